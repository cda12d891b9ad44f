package topicqueue

import (
	"context"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Params are the registry's dependencies in the Fx graph.
type Params struct {
	fx.In
	Config *config.Config
	Logger *zap.Logger
	FS     vfs.FS
	// Observer receives fsync and batch measurements (metrics plugin).
	Observer storage.Observer `optional:"true"`
	// Hooks are write-path injection points; only crash tests provide them
	// (app/mmmq built with -tags crashpoints). Nil in production.
	Hooks *storage.Hooks `optional:"true"`
	// Backend replaces the local segmented log (a replicated store);
	// absent means LocalBackend over mmmq.broker.storage.root-dir.
	Backend Backend `optional:"true"`
}

// NewFromConfig builds the registry from the configuration. Module takes
// the backend's lock (the data root's .lock: two brokers on one directory
// refuse to start) when the application starts, and on stop closes every
// log and releases the lock.
func NewFromConfig(p Params) *Registry {
	c := p.Config.MMMQ.Broker
	return New(Options{
		Root:      c.Storage.RootDir,
		MaxTopics: c.Storage.MaxTopics,
		Storage: storage.Options{
			FS:              p.FS,
			Logger:          p.Logger.Named("storage"),
			SegmentMaxBytes: c.Segment.MaxBytes,
			MaxRecordBytes:  int(c.Segment.MaxRecordBytes),
			Observer:        p.Observer,
			Hooks:           p.Hooks,
		},
		Backend: p.Backend,
	})
}

// registerLifecycle locks the store on start, before recovery opens
// anything, and on stop closes every log, after the HTTP server and the
// dispatchers (which started later, so stop first), then unlocks.
func registerLifecycle(lc fx.Lifecycle, r *Registry) {
	var release func() error
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			var err error
			release, err = r.Lock()
			return err
		},
		OnStop: func(context.Context) error {
			err := r.Close()
			if release != nil {
				if rerr := release(); err == nil {
					err = rerr
				}
			}
			return err
		},
	})
}

// Module provides the *Registry and ties its lock and its logs to the
// application's start and stop. The Backend is the local segmented log
// unless one is provided (or decorated) in the graph.
var Module = fx.Module("topicqueue",
	fx.Provide(NewFromConfig),
	fx.Invoke(registerLifecycle),
)
