package topicqueue

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Backend is where the registry's topics live: the storage-backend seam.
// The default is the local segmented log (LocalBackend); a replicated
// backend implements the same three methods (and contract.TopicDeleter, for topic
// deletion), and everything above the
// registry (dispatchers, consumer groups, HTTP, line protocol) is unchanged.
// Module provides the local one; replace it in an Fx application with
// fx.Decorate(func(topicqueue.Backend) topicqueue.Backend { return mine })
// or fx.Replace(fx.Annotate(mine, fx.As(new(topicqueue.Backend)))).
type Backend interface {
	// Open opens topic name's log. With create it makes the topic when it
	// does not exist (the first message of a new topic); without, the topic
	// must exist (startup). Errors: a corruption error (*contract.CorruptionError
	// for the local backend) for a topic refused by its repair, or an I/O
	// error. name is valid (contract.ValidateTopic).
	Open(name string, create bool) (contract.Log, error)
	// Topics lists the stored topics by name, sorted, and the entries of
	// the store that are not topics (skipped at startup, with a warning).
	Topics() (names, skipped []string, err error)
	// Lock takes the store's exclusive lock for this process's life, so
	// that two brokers never write one store: release gives it back.
	// Errors: ErrRootInUse when another process holds it.
	Lock() (release func() error, err error)
}

// RepairReporter is a log that says what its startup repair did: the local
// engine's *storage.Log. OpenAll collects the reports that are not clean
// for the startup log and GET /topics. It lives here, not with the
// capabilities in modules/contract (capabilities.go), because its report is
// the local engine's type. A log without it reports nothing.
type RepairReporter interface {
	Repair() storage.RepairReport
}

// SegmentCacher is a Backend whose topics share one cache of open segment
// files (LocalBackend), for the metrics observer. It lives here for the
// reason RepairReporter does. A backend without it has no segment-cache
// metrics.
type SegmentCacher interface {
	SegmentCache() *storage.SegmentCache
}

// PreallocBudgeter is a Backend whose topics draw their preallocated zero
// tails from one broker-wide budget (LocalBackend), for the metrics
// observer. It lives here for the reason RepairReporter does. A backend
// without it has no preallocation metrics.
type PreallocBudgeter interface {
	// PreallocBudget is the budget every topic of the backend draws from;
	// nil when preallocation is off (mmmq.broker.storage.preallocate: 0).
	PreallocBudget() *storage.PreallocBudget
}

// LocalBackend is the registry's seam with deletion, a shared segment
// cache and a shared preallocation budget, and its logs report their repair (the table in
// modules/contract/capabilities.go; *storage.Log asserts the rest).
var (
	_ Backend               = (*LocalBackend)(nil)
	_ contract.TopicDeleter = (*LocalBackend)(nil)
	_ SegmentCacher         = (*LocalBackend)(nil)
	_ PreallocBudgeter      = (*LocalBackend)(nil)
	_ RepairReporter        = (*storage.Log)(nil)
)

// LocalBackend is the default Backend: one directory per topic under Root
// with segment and offset-index files, opened by the storage engine (which
// repairs a torn tail and refuses corruption).
type LocalBackend struct {
	// Root is the data root directory (mmmq.broker.storage.root-dir).
	Root string
	// Storage is the template for every topic's log (FS, Logger, sizes).
	// When its SegmentCache is nil, the first Open makes one of
	// Storage.MaxOpenSegments pairs that every topic of this backend
	// shares, so the open-file bound holds across topics.
	Storage storage.Options

	cacheOnce sync.Once
	cache     *storage.SegmentCache
	preOnce   sync.Once
	pre       *storage.PreallocBudget
	// synced: Topics synced the data filesystem (vfs.FSSyncer), so what a
	// previous process left in the page cache is durable and Open passes
	// Storage.FilesystemSynced.
	synced atomic.Bool
}

// SpaceGuard is the disk guard every topic of this backend asks for room
// (Storage.SpaceGuard; nil when off), for metrics.
func (b *LocalBackend) SpaceGuard() *storage.SpaceGuard { return b.Storage.SpaceGuard }

// SegmentCache is the cache of segment files every topic of this backend
// shares (Storage.SegmentCache when set), for metrics.
func (b *LocalBackend) SegmentCache() *storage.SegmentCache {
	if b.Storage.SegmentCache != nil {
		return b.Storage.SegmentCache
	}
	b.cacheOnce.Do(func() { b.cache = storage.NewSegmentCache(b.Storage.MaxOpenSegments) })
	return b.cache
}

// PreallocBudget is the preallocation budget every topic of this backend
// draws from: Storage.Preallocation when set, else one made at the first
// call (storage.DefaultPreallocateMaxBytes, checking Storage.SpaceGuard);
// nil when Storage.Preallocate is 0 (off). For metrics.
func (b *LocalBackend) PreallocBudget() *storage.PreallocBudget {
	if b.Storage.Preallocate <= 0 {
		return nil
	}
	if b.Storage.Preallocation != nil {
		return b.Storage.Preallocation
	}
	b.preOnce.Do(func() { b.pre = storage.NewPreallocBudget(0, b.Storage.SpaceGuard) })
	return b.pre
}

// Open opens (create: or creates) the topic directory Root/name. With
// create, a disk guard that refuses (Storage.SpaceGuard) refuses the new
// topic too (a *storage.LowSpaceError, 507 NO_SPACE): nothing is created.
func (b *LocalBackend) Open(name string, create bool) (contract.Log, error) {
	if create {
		if err := b.Storage.SpaceGuard.Admit(0); err != nil {
			return nil, fmt.Errorf("create topic %s: %w", name, err)
		}
	}
	o := b.Storage
	o.SegmentCache = b.SegmentCache()
	// Storage.Preallocation unset: the topics still share one budget.
	o.Preallocation = b.PreallocBudget()
	o.FilesystemSynced = o.FilesystemSynced || b.synced.Load()
	open := storage.Open
	if !create { // found on disk: a leftover of a failed creation is removed, not created again
		open = storage.OpenExisting
	}
	l, err := open(filepath.Join(b.Root, name), o)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// Topics creates Root (durably) when missing and lists its directories:
// valid topic names are topics, other directories are skipped; plain files
// (the lock file) are ignored. It runs once, at startup, before any topic
// opens, and first syncs the data filesystem (syncfs(2) where the FS
// offers it): one call instead of two fsyncs per topic makes durable what
// a killed process left in the page cache, before any of it is served. A
// sync that fails is logged and every topic's repair then fsyncs its own
// files.
func (b *LocalBackend) Topics() (names, skipped []string, err error) {
	fsys := b.fs()
	if err := storage.MkdirDurable(fsys, b.Root); err != nil {
		return nil, nil, err
	}
	if s, ok := fsys.(vfs.FSSyncer); ok {
		switch err := s.SyncFS(b.Root); {
		case err == nil:
			b.synced.Store(true)
		case b.Storage.Logger == nil:
		case errors.Is(err, errors.ErrUnsupported):
			b.Storage.Logger.Info("the data filesystem's syncfs is not trusted to make the page cache durable; each topic's recovery fsyncs its own files", zap.Error(err))
		default:
			b.Storage.Logger.Warn("could not sync the data filesystem at startup; each topic's recovery fsyncs its own files instead", zap.Error(err))
		}
	}
	ents, err := fsys.List(b.Root)
	if err != nil {
		return nil, nil, fmt.Errorf("list data root %s: %w", b.Root, err)
	}
	for _, e := range ents {
		switch {
		case !e.IsDir:
		case contract.ValidateTopic(e.Name) != nil:
			skipped = append(skipped, e.Name)
		default:
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names, skipped, nil
}

// Lock takes the data root's lock through the filesystem (LockRootFS): a
// flock(2) on Root/.lock for the OS, an in-process lock in memory.
func (b *LocalBackend) Lock() (func() error, error) {
	return LockRootFS(b.fs(), b.Root)
}

func (b *LocalBackend) fs() vfs.FS {
	if b.Storage.FS == nil {
		return vfs.OS{}
	}
	return b.Storage.FS
}
