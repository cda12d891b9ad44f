package recovery

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Module provides *Readiness and runs recovery when the application starts,
// before the dispatchers and the HTTP server start (they are constructed
// after it, so their start hooks run later).
var Module = fx.Module("recovery",
	fx.Provide(func() *Readiness { return new(Readiness) }),
	fx.Invoke(register),
)

// register takes mmmq.broker.storage for its on-corruption policy.
func register(lc fx.Lifecycle, reg *topicqueue.Registry, st config.StorageConfig, log *zap.Logger) {
	lc.Append(fx.StartHook(func(context.Context) error {
		_, err := Run(reg, st.OnCorruption, log.Named("recovery"))
		return err
	}))
}
