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
	Config    *config.Config
	Logger    *zap.Logger
	FS        vfs.FS
	Lifecycle fx.Lifecycle
	// Observer receives fsync and batch measurements (metrics plugin).
	Observer storage.Observer `optional:"true"`
	// Hooks are write-path injection points; only crash tests provide them
	// (app/mmmq built with -tags crashpoints). Nil in production.
	Hooks *storage.Hooks `optional:"true"`
}

// NewFromConfig builds the registry from the configuration. On start it
// takes the data root's lock (LockRoot; two brokers on one directory refuse
// to start); on stop it closes every log (after the HTTP server and the
// dispatchers, which were started later and so stop first) and unlocks.
func NewFromConfig(p Params) *Registry {
	c := p.Config.MMMQ.Broker
	r := New(Options{
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
	})
	// The registry's hooks are the first appended, so the data root is
	// locked before recovery runs and unlocked only after every log closed.
	var release func() error
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			var err error
			release, err = LockRoot(p.FS, c.Storage.RootDir)
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
	return r
}

// Module provides the *Registry.
var Module = fx.Module("topicqueue", fx.Provide(NewFromConfig))
