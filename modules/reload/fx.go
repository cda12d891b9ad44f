package reload

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Params is what the module takes from the graph.
type Params struct {
	fx.In

	// Reloaders are the `group:"reloaders"` members (contract.ProvideReloader).
	Reloaders []contract.Reloader `group:"reloaders"`
	Log       *zap.Logger
}

// Module handles SIGHUP for the application:
//
//	provides *Reloader (All reloads on demand, e.g. in tests)
//	needs    the reloaders value group (may be empty), *zap.Logger
//
// It starts listening when the application starts and stops when it stops.
var Module = fx.Module("reload",
	fx.Provide(newFx),
	fx.Invoke(register),
)

func newFx(p Params) *Reloader { return New(p.Reloaders, p.Log.Named("reload")) }

func register(lc fx.Lifecycle, r *Reloader) { lc.Append(fx.StartStopHook(r.Start, r.Stop)) }
