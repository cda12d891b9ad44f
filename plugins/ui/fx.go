package ui

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/jetstream"
)

// Params are the plugin's dependencies in the Fx graph.
type Params struct {
	fx.In

	Config    Config
	Storage   topicqueue.StorageConfig
	Registry  *topicqueue.Registry
	Logger    *zap.Logger
	Lifecycle fx.Lifecycle
	// Admin, Groups, Authenticator and JetStream are used when the graph
	// has them (dispatchers, consumer groups, mmmq.auth, the JetStream
	// backend's servers).
	Admin         *admin.Admin           `optional:"true"`
	Groups        *groups.Coordinator    `optional:"true"`
	Authenticator contract.Authenticator `optional:"true"`
	JetStream     jetstream.Config       `optional:"true"`
	// Holds is retention's (modules/retention): which reader holds a
	// topic's retention back, shown in the topic tables.
	Holds contract.RetentionHolds `optional:"true"`
}

// Result is the /ui/ route (nil when mmmq.ui.enabled is false) and the
// *UI itself (nil then too).
type Result struct {
	fx.Out

	UI    *UI
	Route contract.Route `group:"routes"`
}

// NewFromConfig builds the status page from the graph and appends its
// sampler's start and stop to the lifecycle; with mmmq.ui.enabled false it
// contributes nothing.
func NewFromConfig(p Params) (Result, error) {
	if !p.Config.Enabled {
		return Result{}, nil
	}
	u, err := New(Options{
		Config: p.Config, Storage: p.Storage, Registry: p.Registry, Admin: p.Admin, Groups: p.Groups,
		Authenticator: p.Authenticator, JetStreamServers: p.JetStream.Servers, Holds: p.Holds,
		Logger: p.Logger.Named("ui"), Audit: contract.AuditLogger(p.Logger),
	})
	if err != nil {
		return Result{}, err
	}
	p.Lifecycle.Append(fx.StartStopHook(u.Start, u.Stop))
	return Result{UI: u, Route: u}, nil
}

// Module registers ConfigSection (and provides Config) and, when
// mmmq.ui.enabled is true, provides the *UI and its route (GET /ui/ and
// the pages below it, on the API port). It needs the topic registry; the
// admin module's *admin.Admin, when present, gives the dispatchers. List it
// after admin.Module and before httpapi.Module.
var Module = fx.Module("ui",
	config.ProvideSection(ConfigSection),
	fx.Provide(NewFromConfig),
)
