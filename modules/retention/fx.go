package retention

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Params are the Retainer's dependencies in the Fx graph.
type Params struct {
	fx.In
	// Config is mmmq.broker.retention (ConfigSection).
	Config Config
	// Storage is mmmq.broker.storage (topicqueue.StorageSection): with a backend
	// other than local ("jetstream") the backend applies the policies
	// itself and the Retainer runs no loop. Zero = local.
	Storage  topicqueue.StorageConfig
	Registry *topicqueue.Registry
	Logger   *zap.Logger
	// Dispatchers and Groups hold data under keep-unconsumed; an
	// application without them holds nothing for them.
	Dispatchers *dispatcher.Set     `optional:"true"`
	Groups      *groups.Coordinator `optional:"true"`
}

// NewFromConfig builds the Retainer from mmmq.broker.retention. An invalid
// pattern in mmmq.broker.retention.topics fails startup, naming the key.
// With a storage backend other than local the Retainer deletes nothing and
// starts no loop (nor logs one): the JetStream backend sets the policies
// on its streams, which enforce them.
func NewFromConfig(p Params) (*Retainer, error) {
	o, err := OptionsFromConfig(p.Config)
	if err != nil {
		return nil, err
	}
	if b := p.Storage.Backend; b != "" && b != topicqueue.BackendLocal {
		o.Default, o.Rules = contract.RetentionPolicy{}, nil
	}
	o.Dispatchers = p.Dispatchers
	if p.Groups != nil {
		o.Groups = p.Groups
	}
	o.Logger = p.Logger.Named("retention")
	return New(p.Registry, o), nil
}

// registerLifecycle starts the check loop with the application and stops
// it before the topics close (the Retainer depends on the registry, so Fx
// stops it first).
func registerLifecycle(lc fx.Lifecycle, r *Retainer) {
	lc.Append(fx.StartStopHook(r.Start, r.Stop))
}

// Module registers the section mmmq.broker.retention (ConfigSection) and
// provides its value, provides the *Retainer (also as the
// contract.RetentionHolds the HTTP API shows) and runs its check loop
// between start and stop. It needs the config, the logger and the topic registry;
// *dispatcher.Set and *groups.Coordinator are optional.
var Module = fx.Module("retention",
	config.ProvideSection(ConfigSection), // mmmq.broker.retention, provided as Config
	fx.Provide(NewFromConfig),
	fx.Provide(func(r *Retainer) contract.RetentionHolds { return r }), // GET /topics' retentionHeldBy
	fx.Invoke(registerLifecycle),
)
