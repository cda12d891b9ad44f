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
	// Storage is mmmq.broker.storage (config.Module).
	Storage config.StorageConfig
	// Segment is mmmq.broker.segment (config.Module).
	Segment   config.SegmentConfig
	Logger    *zap.Logger
	FS        vfs.FS
	Lifecycle fx.Lifecycle
	// Observer receives fsync and batch measurements (metrics plugin).
	Observer storage.Observer `optional:"true"`
	// Hooks are write-path injection points; only crash tests provide them
	// (app/mmmq built with -tags crashpoints). Nil in production.
	Hooks *storage.Hooks `optional:"true"`
}

// OptionsFromConfig maps mmmq.broker.storage and mmmq.broker.segment to
// Options: Root, MaxTopics and Storage (see StorageOptionsFromConfig). FS,
// Logger, Observer and Hooks of Storage are left for the caller.
func OptionsFromConfig(st config.StorageConfig, seg config.SegmentConfig) Options {
	return Options{
		Root:      st.RootDir,
		MaxTopics: st.MaxTopics,
		Storage:   StorageOptionsFromConfig(seg),
	}
}

// StorageOptionsFromConfig maps mmmq.broker.segment to the storage engine's
// options: SegmentMaxBytes and MaxRecordBytes (bytes); the other fields are
// zero. It is the one config -> storage.Options mapping (the registry and
// mmmq verify/dump use it).
func StorageOptionsFromConfig(seg config.SegmentConfig) storage.Options {
	return storage.Options{
		SegmentMaxBytes: seg.MaxBytes,
		MaxRecordBytes:  int(seg.MaxRecordBytes),
	}
}

// NewFromConfig builds the registry from the configuration. On start it
// takes the data root's lock (LockRoot; two brokers on one directory refuse
// to start); on stop it closes every log (after the HTTP server and the
// dispatchers, which were started later and so stop first) and unlocks.
func NewFromConfig(p Params) *Registry {
	opts := OptionsFromConfig(p.Storage, p.Segment)
	opts.Storage.FS = p.FS
	opts.Storage.Logger = p.Logger.Named("storage")
	opts.Storage.Observer = p.Observer
	opts.Storage.Hooks = p.Hooks
	r := New(opts)
	root := p.Storage.RootDir
	// The registry's hooks are the first appended, so the data root is
	// locked before recovery runs and unlocked only after every log closed.
	var release func() error
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			if _, inMemory := p.FS.(*vfs.MemFS); inMemory {
				return nil // tests on an in-memory filesystem
			}
			var err error
			release, err = LockRoot(root)
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
