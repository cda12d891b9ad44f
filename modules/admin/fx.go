package admin

import (
	"slices"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Params are the Admin's dependencies in the Fx graph.
type Params struct {
	fx.In

	Manager *dispatcher.Manager
	Set     *dispatcher.Set
	// Store keeps the api dispatchers: the *Store of dispatchers.json,
	// unless a shared storage backend decorates it.
	Store SpecStore
	// Dispatch is mmmq.broker.dispatch (dispatcher.Module).
	Dispatch dispatcher.Config
	// Admin is mmmq.admin (ConfigSection, registered by Module).
	Admin    Config
	Logger   *zap.Logger
	Registry *topicqueue.Registry
	// Self is the broker's own addresses (dispatcher.Module): a dispatcher
	// may not push to the broker itself.
	Self *dispatcher.Self `optional:"true"`
	// Groups, when present, reserve their names: a dispatcher may not take
	// the name of a consumer group in use.
	Groups *groups.Coordinator `optional:"true"`
	// Pauses is paused.json (NewPauseFileFromConfig).
	Pauses *PauseFile `optional:"true"`
}

// NewStoreFromConfig is the Store of <mmmq.broker.storage.root-dir>/dispatchers.json
// on the graph's filesystem. Crash tests decorate it (Store.BeforeRename).
func NewStoreFromConfig(st topicqueue.StorageConfig, fsys vfs.FS) *Store {
	return NewStore(fsys, st.RootDir)
}

// NewPauseFileFromConfig is the PauseFile of
// <mmmq.broker.storage.root-dir>/paused.json on the graph's filesystem:
// each node's own, also on a backend shared by several nodes.
func NewPauseFileFromConfig(st topicqueue.StorageConfig, fsys vfs.FS) *PauseFile {
	return NewPauseFile(fsys, st.RootDir)
}

// NewSpecStore is where the api dispatchers are kept: the storage
// backend's own store when it has one (a SpecStoreProvider: a backend
// shared by several broker nodes), else file, dispatchers.json.
func NewSpecStore(file *Store, reg *topicqueue.Registry) (SpecStore, error) {
	if p, ok := reg.Backend().(SpecStoreProvider); ok {
		return p.DispatcherStore()
	}
	return file, nil
}

// NewFromConfig builds the Admin from mmmq.broker.dispatch (defaults of
// new dispatchers) and mmmq.admin.
func NewFromConfig(p Params) *Admin {
	opts := Options{Defaults: p.Dispatch, AllowedHosts: slices.Clone(p.Admin.AllowedHosts), Self: p.Self, Logger: p.Logger.Named("admin"), Pauses: p.Pauses}
	if c := p.Groups; c != nil {
		reg := p.Registry
		opts.GroupTaken = func(name string) bool {
			for _, q := range reg.List() {
				for _, g := range c.Groups(q.Name()) {
					if g.Group == name {
						return true
					}
				}
			}
			return false
		}
	}
	return New(p.Manager, p.Set, p.Store, opts)
}

// Module provides the *Admin and *Store and the sections mmmq.admin and
// mmmq.webhooks, contributes the admin API's routes and the public webhook
// keys (KeysRoute), and loads dispatchers.json when the application starts (after
// recovery and the dispatcher manager, which start before it: list it
// after dispatcher.Module).
var Module = fx.Module("admin",
	config.ProvideSection(ConfigSection),
	config.ProvideSection(WebhooksSection),
	fx.Provide(NewStoreFromConfig, NewFromConfig, NewSpecStore, NewPauseFileFromConfig),
	contract.ProvideRoute(NewRoute),
	contract.ProvideRoute(NewKeysRoute),
	// When the graph is built, before the dispatcher manager starts: a
	// paused dispatcher declared in the configuration or in Go never
	// delivers before its recorded pause applies.
	fx.Invoke(func(a *Admin) error { return a.RestorePauses() }),
	fx.Invoke(registerLifecycle),
)

// registerLifecycle loads dispatchers.json on start and, on stop, ends the
// watch of a store shared by several nodes (the dispatcher manager stops
// the workers).
func registerLifecycle(lc fx.Lifecycle, a *Admin) { lc.Append(fx.StartStopHook(a.Start, a.Stop)) }
