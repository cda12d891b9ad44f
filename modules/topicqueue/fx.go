package topicqueue

import (
	"context"
	"fmt"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Params are the default backend's dependencies in the Fx graph.
type Params struct {
	fx.In
	// Storage is mmmq.broker.storage (StorageSection).
	Storage StorageConfig
	// Segment is mmmq.broker.segment (SegmentSection).
	Segment SegmentConfig
	Logger  *zap.Logger
	FS      vfs.FS
	// Observer receives fsync and batch measurements (metrics plugin).
	Observer storage.Observer `optional:"true"`
	// Hooks are write-path injection points; only crash tests provide them
	// (app/mmmq built with -tags crashpoints). Nil in production.
	Hooks *storage.Hooks `optional:"true"`
	// Budget is the in-flight memory budget (NewBudgetFromConfig): the
	// logs' ACCEPTED appends draw from it.
	Budget *contract.Budget
	// SpaceGuard is the disk guard (NewSpaceGuardFromConfig; nil when
	// mmmq.broker.storage.min-free-bytes is 0): every log's appends ask it
	// for room.
	SpaceGuard *storage.SpaceGuard `optional:"true"`
	// Factories are the other storage backends of the application
	// (BackendFactoryTag), one of which mmmq.broker.storage.backend may
	// name.
	Factories []BackendFactory `group:"storage-backends"`
}

// BackendFactory is a storage backend other than the local one that a
// plugin adds to the application (the JetStream plugin), chosen by
// mmmq.broker.storage.backend. Provide it in the value group
// BackendFactoryTag:
//
//	fx.Provide(fx.Annotate(newFactory, fx.ResultTags(topicqueue.BackendFactoryTag)))
//
// A group rather than fx.Decorate: a decoration made inside an
// fx.Module applies to that module only, and one made at the root
// would collide with an application's (or a test's) own decoration.
type BackendFactory struct {
	// Name is the value of mmmq.broker.storage.backend that selects it.
	Name string
	// New makes the backend. It is called once, while the registry is
	// built, and only when Name is selected; it appends its own stop hook
	// (closing connections) at that point, so that hook runs after the
	// registry closed its logs.
	New func() (Backend, error)
}

// BackendFactoryTag is the value-group tag of BackendFactory.
const BackendFactoryTag = `group:"storage-backends"`

// RegistryParams are the registry's dependencies in the Fx graph.
type RegistryParams struct {
	fx.In
	Storage StorageConfig
	Segment SegmentConfig
	Logger  *zap.Logger
	FS      vfs.FS
	// Backend opens the topics: Module provides the LocalBackend
	// (NewBackendFromConfig); replace it with fx.Decorate or fx.Replace.
	Backend Backend
	// Dedup is the idempotent-publish window (NewDedupFromConfig; nil
	// when mmmq.broker.dedup.window is 0).
	Dedup *dedup.Tracker `optional:"true"`
	// PublishObserver is told how long publishes took per ack level
	// (the metrics plugin); none observes nothing.
	PublishObserver PublishObserver `optional:"true"`
}

// OptionsFromConfig maps mmmq.broker.storage and mmmq.broker.segment to
// Options: Root, MaxTopics and Storage (see StorageOptionsFromConfig, plus
// MaxOpenSegments, IndexSync, IndexSyncInterval and Preallocate; an index-sync the
// config validation let through is "commit" or "lazy"). FS, Logger, Observer, Hooks and SegmentCache of Storage
// are left for the caller (LocalBackend makes the one cache its topics
// share).
func OptionsFromConfig(st StorageConfig, seg SegmentConfig) Options {
	o := Options{
		Root:      st.RootDir,
		MaxTopics: st.MaxTopics,
		Storage:   StorageOptionsFromConfig(seg),
	}
	o.Storage.MaxOpenSegments = st.MaxOpenSegments
	o.Storage.IndexSync, _ = storage.ParseIndexSync(st.IndexSync)
	o.Storage.IndexSyncInterval = st.IndexSyncInterval
	o.Storage.Preallocate = st.Preallocate
	return o
}

// StorageOptionsFromConfig maps mmmq.broker.segment to the storage engine's
// options: SegmentMaxBytes and MaxRecordBytes (bytes); the other fields are
// zero. It is the one config -> storage.Options mapping (the registry and
// mmmq verify/dump use it).
func StorageOptionsFromConfig(seg SegmentConfig) storage.Options {
	return storage.Options{
		SegmentMaxBytes: seg.MaxBytes,
		MaxRecordBytes:  int(seg.MaxRecordBytes),
	}
}

// NewBudgetFromConfig is the broker's one in-flight memory budget of
// mmmq.broker.memory.max-inflight-bytes bytes (0: unlimited, still
// counted). The storage logs (ACCEPTED appends), the consumer-group
// coordinator (fetch replies, HTTP and line protocol) and the HTTP server
// (read-back pages) all draw from this one value.
func NewBudgetFromConfig(m MemoryConfig) *contract.Budget {
	return contract.NewBudget(m.MaxInflightBytes)
}

// NewSpaceGuardFromConfig is the broker's disk guard: free space of the
// filesystem of mmmq.broker.storage.root-dir, sampled through the graph's
// filesystem, against mmmq.broker.storage.min-free-bytes (see
// storage.SpaceGuard). It returns nil, no guard, when min-free-bytes is 0
// or when the backend is not "local" (the messages are not on this disk).
// Tests replace it with fx.Decorate(func(*storage.SpaceGuard)
// *storage.SpaceGuard { return mine }) (a fake clock, another minimum).
func NewSpaceGuardFromConfig(st StorageConfig, fsys vfs.FS, log *zap.Logger) *storage.SpaceGuard {
	if st.Backend != "" && st.Backend != BackendLocal {
		return nil
	}
	return storage.NewSpaceGuard(storage.SpaceGuardOptions{
		FS: fsys, Dir: st.RootDir, MinFree: st.MinFreeBytes, Logger: log.Named("storage"),
	})
}

// NewBackendFromConfig is the Backend mmmq.broker.storage.backend names:
// for "local" (the default) the local segmented log under
// mmmq.broker.storage.root-dir, with the storage engine's options from
// mmmq.broker.segment and the graph's filesystem, observer, hooks,
// in-flight budget and disk guard; for another name the BackendFactory of
// that name. Errors: a max-open-segments that would take more than half of
// the process's open-file limit (storage.CheckMaxOpenSegments), no factory
// of the name, or the factory's error.
func NewBackendFromConfig(p Params) (Backend, error) {
	if p.Storage.Backend != "" && p.Storage.Backend != BackendLocal {
		for _, f := range p.Factories {
			if f.Name == p.Storage.Backend {
				return f.New()
			}
		}
		return nil, fmt.Errorf("topicqueue: mmmq.broker.storage.backend is %q, but this application has no %s module", p.Storage.Backend, p.Storage.Backend)
	}
	limit, _ := contract.OpenFileLimit()
	if err := storage.CheckMaxOpenSegments(p.Storage.MaxOpenSegments, limit); err != nil {
		return nil, err
	}
	opts := OptionsFromConfig(p.Storage, p.Segment)
	opts.Storage.FS = p.FS
	opts.Storage.Logger = p.Logger.Named("storage")
	opts.Storage.Observer = p.Observer
	opts.Storage.Hooks = p.Hooks
	opts.Storage.Budget = p.Budget
	opts.Storage.SpaceGuard = p.SpaceGuard
	if opts.Storage.Preallocate > 0 {
		// One budget for every topic, checking the disk guard.
		opts.Storage.Preallocation = storage.NewPreallocBudget(p.Storage.PreallocateMaxBytes, p.SpaceGuard)
	}
	b := &LocalBackend{Root: opts.Root, Storage: opts.Storage}
	p.Logger.Debug("segment cache", zap.Int("max-open-segments", b.SegmentCache().Capacity()), zap.Uint64("open-file-limit", limit))
	return b, nil
}

// NewFromConfig builds the registry over p.Backend. Module takes the
// backend's lock (the data root's .lock: two brokers on one directory
// refuse to start) when the application starts, and on stop closes every
// log and releases the lock.
func NewFromConfig(p RegistryParams) *Registry {
	opts := OptionsFromConfig(p.Storage, p.Segment)
	opts.Storage.FS = p.FS
	opts.Storage.Logger = p.Logger.Named("storage")
	opts.Backend = p.Backend
	opts.Dedup = p.Dedup
	opts.PublishObserver = p.PublishObserver
	return New(opts)
}

// NewDedupFromConfig is the broker's idempotent-publish window from
// mmmq.broker.dedup (see package dedup); nil, deduplication off, when its
// window is 0.
func NewDedupFromConfig(d DedupConfig, log *zap.Logger) *dedup.Tracker {
	return dedup.New(dedup.Options{Window: d.Window, MaxIDs: d.MaxIDs, MaxBytes: d.MaxBytes, Logger: log.Named("dedup")})
}

// lifecycleParams are what registerLifecycle ties to the application's
// start and stop.
type lifecycleParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Registry  *Registry
	// SpaceGuard is the disk guard; nil when off.
	SpaceGuard *storage.SpaceGuard `optional:"true"`
}

// registerLifecycle locks the store on start, before recovery opens
// anything, then has the disk guard look at the data filesystem (a
// warning when min-free-bytes can never be met, or is not met now), and
// on stop closes every log, after the HTTP server and the dispatchers
// (which started later, so stop first), then unlocks.
func registerLifecycle(p lifecycleParams) {
	r := p.Registry
	var release func() error
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			var err error
			if release, err = r.Lock(); err == nil {
				p.SpaceGuard.CheckAtStart()
			}
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

// Module registers the sections mmmq.broker.storage, .segment, .memory and
// .dedup (StorageSection, SegmentSection, MemorySection, DedupSection) and
// provides their values, the broker's in-flight memory budget (*contract.Budget,
// NewBudgetFromConfig), the idempotent-publish window (*dedup.Tracker,
// NewDedupFromConfig; nil when off), the disk guard (*storage.SpaceGuard,
// NewSpaceGuardFromConfig; nil when off), the Backend (the local segmented log; replace it
// with fx.Decorate(func(topicqueue.Backend) topicqueue.Backend { return
// mine }) or fx.Replace) and the *Registry over it, and ties the backend's
// lock and the topics' logs to the application's start and stop.
var Module = fx.Module("topicqueue",
	config.ProvideSection(StorageSection), // mmmq.broker.storage, provided as StorageConfig
	config.ProvideSection(SegmentSection), // mmmq.broker.segment, provided as SegmentConfig
	config.ProvideSection(MemorySection),  // mmmq.broker.memory, provided as MemoryConfig
	config.ProvideSection(DedupSection),   // mmmq.broker.dedup, provided as DedupConfig
	fx.Provide(NewBudgetFromConfig, NewDedupFromConfig, NewSpaceGuardFromConfig, NewBackendFromConfig, NewFromConfig),
	fx.Invoke(registerLifecycle),
)
