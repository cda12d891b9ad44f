package logging

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mmmq/mmmq/modules/config"
)

// Module provides the *zap.Logger (from config.LoggingConfig, see
// NewFromConfig), makes Fx log its own events through it (see NewFxLogger),
// logs the configuration's warnings and skipped Kubernetes service-link
// variables once, and syncs the logger on stop.
//
// fx.WithLogger sits outside the fx.Module scope on purpose: inside a module
// it would only apply to that module's events, not the application's.
// Replace the logger in tests with fx.Decorate(func(*zap.Logger) *zap.Logger {...}).
var Module = fx.Options(
	fx.Module("logging",
		fx.Provide(NewFromConfig),
		fx.Invoke(registerSync, logConfigWarnings, logIgnoredVars),
	),
	fx.WithLogger(NewFxLogger),
)

// NewFxLogger adapts l for Fx's own events (provide, invoke, hooks, start,
// stop). Routine events are logged at debug so a default "info" log shows
// only the broker's lines; Fx errors stay at error level.
func NewFxLogger(l *zap.Logger) fxevent.Logger {
	fl := &fxevent.ZapLogger{Logger: l.Named("fx")}
	fl.UseLogLevel(zapcore.DebugLevel)
	fl.UseErrorLevel(zapcore.ErrorLevel)
	return fl
}

// registerSync appends a stop hook that flushes the logger. Stop hooks run in
// reverse order, so list Module before the modules that log while stopping
// and this hook runs after theirs.
func registerSync(lc fx.Lifecycle, l *zap.Logger) {
	lc.Append(fx.StopHook(func(context.Context) error { return Sync(l) }))
}

// logConfigWarnings logs the configuration's warnings (keys of stock
// plugins this binary does not contain, set to their defaults), one line
// each.
func logConfigWarnings(cfg *config.Config, log *zap.Logger) {
	for _, w := range cfg.Warnings {
		log.Named("config").Warn(w.String(), zap.String("key", w.Key), zap.String("plugin", w.Plugin))
	}
}

// logIgnoredVars logs one debug line per Kubernetes service-link variable
// the configuration skipped (see config.Config.IgnoredVars).
func logIgnoredVars(cfg *config.Config, log *zap.Logger) {
	for _, name := range cfg.IgnoredVars {
		log.Named("config").Debug("ignored a Kubernetes service-link environment variable: it names no configuration key", zap.String("var", name))
	}
}
