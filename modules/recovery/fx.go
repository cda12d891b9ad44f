package recovery

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Module provides *Readiness and runs startup recovery (the registry's
// OpenAll, under mmmq.broker.storage.on-corruption) when the application
// starts: after the registry took its lock, before the dispatchers and the
// HTTP server start (list it after topicqueue.Module and before them).
var Module = fx.Module("recovery",
	fx.Provide(func() *Readiness { return new(Readiness) }),
	fx.Invoke(register),
)

// Ready marks the broker ready (/readyz) once every start hook registered
// before it has run, and not ready again as soon as stopping begins. List
// it after every other module (app.Modules does): its hook is then the last
// to start and the first to stop.
var Ready = fx.Module("ready", fx.Invoke(registerReady))

// register takes mmmq.broker.storage for its on-corruption policy.
func register(lc fx.Lifecycle, reg *topicqueue.Registry, st topicqueue.StorageConfig, log *zap.Logger) {
	lc.Append(fx.StartHook(func(context.Context) error {
		_, err := reg.OpenAll(st.OnCorruption, log.Named("recovery"))
		return err
	}))
}

func registerReady(lc fx.Lifecycle, r *Readiness) {
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { r.Set(true); return nil },
		OnStop:  func(context.Context) error { r.Set(false); return nil },
	})
}
