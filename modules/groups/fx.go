package groups

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Params are the coordinator's dependencies in the Fx graph.
type Params struct {
	fx.In

	// Groups is mmmq.broker.groups (ConfigSection, registered by Module).
	Groups   Config
	Logger   *zap.Logger
	Registry *topicqueue.Registry
	// Dispatchers, when present, reserve their names: a group may not use
	// a dispatcher's name (ErrNameTaken).
	Dispatchers *dispatcher.Set `optional:"true"`
	// Budget is the in-flight memory budget (topicqueue.Module) fetched
	// batches draw from.
	Budget *contract.Budget
}

// OptionsFromConfig maps mmmq.broker.groups to Options: LeaseTimeout,
// MaxFetch, Shared, MaxDeliveries (0 in the configuration, never
// dead-letter, is -1 in Options), MaxUnacked, Expired and DeadLetterTopics; the
// other fields keep their defaults.
func OptionsFromConfig(g Config) Options {
	o := Options{LeaseTimeout: g.LeaseTimeout, MaxFetch: g.MaxFetch, Shared: g.Shared,
		MaxDeliveries: g.MaxDeliveries, MaxUnacked: g.MaxUnacked, Expired: g.Expired}
	if o.MaxDeliveries == 0 {
		o.MaxDeliveries = -1
	}
	if len(g.DeadLetterTopics) > 0 {
		o.DeadLetterTopics = map[string]string{}
		for _, d := range g.DeadLetterTopics {
			o.DeadLetterTopics[d.Group] = d.Topic
		}
	}
	return o
}

// RouteOptionsFromConfig maps the "server" section to RouteOptions:
// WriteTimeout, by which long polls extend their write deadline.
func RouteOptionsFromConfig(s config.ServerConfig) RouteOptions {
	return RouteOptions{WriteTimeout: s.WriteTimeout}
}

// NewFromConfig builds the coordinator from mmmq.broker.groups
// (lease-timeout, max-fetch) and the in-flight budget. Module starts and stops its lease janitor.
func NewFromConfig(p Params) *Coordinator {
	opts := OptionsFromConfig(p.Groups)
	opts.Logger = p.Logger.Named("groups")
	opts.Budget = p.Budget
	opts.Publisher = dispatcher.RegistryPublisher(p.Registry)
	if set := p.Dispatchers; set != nil {
		opts.Reserved = func(name string) bool { _, ok := set.Get(name); return ok }
	}
	return New(p.Registry, opts)
}

// RouteParams are the HTTP routes' dependencies in the Fx graph.
type RouteParams struct {
	fx.In

	Coordinator *Coordinator
	// Server is the "server" section (config.Module).
	Server config.ServerConfig
	Logger *zap.Logger
	// Tracer is the tracing module's (modules/tracing): a span per
	// fetch. Nil or absent: tracing off.
	Tracer *tracing.Tracer `optional:"true"`
}

// NewRouteFromConfig builds the HTTP routes; long polls extend their write
// deadline by server.write-timeout.
func NewRouteFromConfig(p RouteParams) *Route {
	opts := RouteOptionsFromConfig(p.Server)
	opts.Logger = p.Logger.Named("groups")
	opts.Tracer = p.Tracer
	return NewRoute(p.Coordinator, opts)
}

// registerLifecycle starts the lease janitor with the application and stops
// it on stop. The HTTP server drains the routes' long polls (Route.Drain)
// when its shutdown begins.
func registerLifecycle(lc fx.Lifecycle, c *Coordinator) {
	lc.Append(fx.StartStopHook(c.Start, c.Stop))
}

// Module registers the configuration section mmmq.broker.groups
// (ConfigSection, provided as Config), provides the consumer-group
// *Coordinator (janitor started and stopped with the app) and contributes
// its HTTP routes (*Route) to the routes value group
// (contract.ProvideRoute). It needs the topic registry, *config.Config and
// the "server" section (config.Module) and the logger; *dispatcher.Set is
// optional. The line protocol plugin (plugins/lineproto) uses the same
// *Coordinator.
var Module = fx.Module("groups",
	config.ProvideSection(ConfigSection),
	fx.Provide(NewFromConfig),
	contract.ProvideRoute(NewRouteFromConfig),
	fx.Invoke(registerLifecycle),
)
