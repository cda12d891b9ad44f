// Package app is the composition root of mmmq: New builds the Fx
// application with the default module set, to which a custom binary adds its
// own plugins (for example Dispatchers provided with dispatcher.Provide):
//
//	app.New(orders.Module).Run()
package app

import (
	"context"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/logging"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
	"github.com/mmmq/mmmq/plugins/metrics"
)

// StopTimeout bounds the whole graceful stop (HTTP drain, dispatch workers,
// closing the logs). server.shutdown-timeout bounds the HTTP part inside it.
const StopTimeout = 90 * time.Second

// Modules is the default module set, in start order: the topic registry
// and recovery first, then dispatchers, then the HTTP API (stop runs in
// reverse, so the API stops accepting first and the logs close last).
func Modules() fx.Option {
	return fx.Options(
		config.Module,
		logging.Module,
		storage.Module,
		topicqueue.Module,
		recovery.Module,
		fx.Provide(DispatcherSource, dispatcher.OptionsFromConfig),
		dispatcher.Module,
		configdispatchers.Module,
		groups.Module,
		metrics.Module,
		httpapi.Module,
	)
}

// Sections returns the configuration sections of the plugins in Modules
// (today mmmq.metrics), in a new slice. A binary that loads the configuration
// before building the application passes them, plus those of the plugins it
// adds, in config.LoadOptions.Sections, so that it reads the same keys as
// app.New loading inside the graph:
//
//	config.Load(config.LoadOptions{Sections: append(app.Sections(), lineproto.ConfigSection)})
func Sections() []config.Section {
	return []config.Section{metrics.ConfigSection}
}

// New returns the mmmq application: the default modules plus opts (plugins,
// fx.Supply(config.LoadOptions{...}), fx.Decorate overrides). The broker
// reports ready (/readyz) once every start hook has run.
func New(opts ...fx.Option) *fx.App {
	return fx.New(Options(opts...))
}

// Options is everything New passes to fx.New, for tests that build the
// application with fxtest.New(t, app.Options(...)).
func Options(opts ...fx.Option) fx.Option {
	return fx.Options(
		Modules(),
		fx.Options(opts...),
		fx.Invoke(markReady, logConfigWarnings),
		fx.StopTimeout(StopTimeout),
	)
}

func markReady(lc fx.Lifecycle, r *recovery.Readiness, _ *httpapi.Server, _ *dispatcher.Manager) {
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { r.Set(true); return nil },
		OnStop:  func(context.Context) error { r.Set(false); return nil },
	})
}

// logConfigWarnings logs the configuration's warnings (keys of stock
// plugins this binary does not contain, at their defaults), one line each.
func logConfigWarnings(cfg *config.Config, log *zap.Logger) {
	for _, w := range cfg.Warnings {
		log.Warn(w.String(), zap.String("key", w.Key), zap.String("plugin", w.Plugin))
	}
}

// registrySource adapts the topic registry to dispatcher.Source.
type registrySource struct{ r *topicqueue.Registry }

func (s registrySource) Subscribe(fn func(dispatcher.Topic)) (cancel func()) {
	return s.r.Subscribe(func(q *topicqueue.TopicQueue) { fn(q) })
}

// DispatcherSource exposes the topic registry to the dispatcher module.
func DispatcherSource(r *topicqueue.Registry) dispatcher.Source { return registrySource{r} }

// DispatcherOptions maps mmmq.broker.dispatch.* to dispatcher.Options, with
// the defaults filled in.
//
// Deprecated: use dispatcher.OptionsFromConfig(cfg.MMMQ.Broker.Dispatch),
// which Modules provides.
func DispatcherOptions(cfg *config.Config) dispatcher.Options {
	return dispatcher.OptionsFromConfig(cfg.MMMQ.Broker.Dispatch).WithDefaults()
}
