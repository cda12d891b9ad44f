package groups

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Params are the coordinator's dependencies in the Fx graph.
type Params struct {
	fx.In

	Config    *config.Config
	Logger    *zap.Logger
	Registry  *topicqueue.Registry
	Lifecycle fx.Lifecycle
	// Dispatchers, when present, reserve their names: a group may not use
	// a dispatcher's name (ErrNameTaken).
	Dispatchers *dispatcher.Set `optional:"true"`
}

// NewFromConfig builds the coordinator from mmmq.broker.groups
// (lease-timeout, max-fetch) and starts its lease janitor with the
// application (stopped on app stop).
func NewFromConfig(p Params) *Coordinator {
	g := p.Config.MMMQ.Broker.Groups
	opts := Options{
		LeaseTimeout: g.LeaseTimeout,
		MaxFetch:     g.MaxFetch,
		Logger:       p.Logger.Named("groups"),
	}
	if set := p.Dispatchers; set != nil {
		opts.Reserved = func(name string) bool { _, ok := set.Get(name); return ok }
	}
	c := New(p.Registry, opts)
	p.Lifecycle.Append(fx.StartStopHook(c.Start, c.Stop))
	return c
}

// RouteParams are the HTTP routes' dependencies in the Fx graph.
type RouteParams struct {
	fx.In

	Coordinator *Coordinator
	Config      *config.Config
	Logger      *zap.Logger
}

// NewRouteFromConfig builds the HTTP routes; long polls extend their write
// deadline by server.write-timeout.
func NewRouteFromConfig(p RouteParams) *Route {
	return NewRoute(p.Coordinator, RouteOptions{
		WriteTimeout: p.Config.Server.WriteTimeout,
		Logger:       p.Logger.Named("groups"),
	})
}

type drainParams struct {
	fx.In

	Lifecycle   fx.Lifecycle
	Coordinator *Coordinator
	Server      *httpapi.Server `optional:"true"`
}

// registerDrain appends Drain as a stop hook after the HTTP server's hooks,
// so it runs before the server's graceful shutdown: waiting long polls
// answer at once instead of holding the shutdown for up to their wait.
func registerDrain(p drainParams) {
	p.Lifecycle.Append(fx.StopHook(p.Coordinator.Drain))
}

// Module provides the consumer-group *Coordinator (janitor started and
// stopped with the app) and contributes its HTTP routes (*Route) to the
// httpapi routes value group (httpapi.RouteTag). It needs the topic
// registry, the config and the logger; *dispatcher.Set is optional. The
// line protocol plugin (plugins/lineproto) uses the same *Coordinator.
var Module = fx.Module("groups",
	fx.Provide(NewFromConfig),
	fx.Provide(fx.Annotate(NewRouteFromConfig, fx.As(new(httpapi.Route)), fx.ResultTags(httpapi.RouteTag))),
	fx.Invoke(registerDrain),
)
