package storage

import (
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Options configures a Log. The zero value of every field means its default.
type Options struct {
	// FS is the filesystem; default vfs.OS{}.
	FS vfs.FS
	// Logger receives repair reports, slow-fsync warnings and failures;
	// default zap.NewNop().
	Logger *zap.Logger
	// SegmentMaxBytes is the rotation threshold in bytes
	// (mmmq.broker.segment.max-bytes); default 64 MiB. Rotation is checked
	// before each append, so a segment may end up to one entry
	// larger.
	SegmentMaxBytes int64
	// MaxRecordBytes caps one message JSON (mmmq.broker.segment.max-record-bytes);
	// default 1 MiB. Decoding never allocates more than this from a length field.
	MaxRecordBytes int
	// MaxPendingBytes caps the bytes queued for the writer; Append beyond it
	// fails fast with contract.ErrQueueFull (HTTP 503). Default 64 MiB.
	MaxPendingBytes int64
	// Budget, when set, is the broker-wide in-flight memory budget
	// (mmmq.broker.memory.max-inflight-bytes), shared by every topic's log:
	// the bytes of an ACCEPTED append draw from it from the moment it is
	// queued until its batch is committed, and an ACCEPTED append that does
	// not fit is refused with an error wrapping contract.ErrOverloaded
	// (nothing queued). WRITTEN and DURABLE appends do not draw from it:
	// their callers wait, so what they hold is bounded by the requests
	// being served. Nil: only MaxPendingBytes bounds the queue.
	Budget *contract.Budget
	// SlowFsync is the fsync duration above which a warning is logged;
	// default 1s.
	SlowFsync time.Duration
	// SegmentCache holds the open files of segments, bounding the
	// descriptors they use (see SegmentCache); share one across logs to
	// bound them per process. Nil: Open makes a cache of MaxOpenSegments
	// for this log alone.
	SegmentCache *SegmentCache
	// MaxOpenSegments is the capacity, in segments (two file descriptors
	// each), of the cache Open makes when SegmentCache is nil
	// (mmmq.broker.storage.max-open-segments); <= 0 means
	// AutoMaxOpenSegments of the process's open-file limit.
	MaxOpenSegments int
	// SpaceGuard, when set, is the disk guard of the data filesystem
	// (mmmq.broker.storage.min-free-bytes), shared by every topic's log:
	// an append it refuses fails with a *LowSpaceError (HTTP 507
	// NO_SPACE) before anything is queued. Nil: no guard.
	SpaceGuard *SpaceGuard
	// IndexSync selects when the offset index is fsynced
	// (mmmq.broker.storage.index-sync): IndexSyncCommit (the default, the
	// original Java mmmq's order: segment fsync, then index fsync, then the
	// answer; two fsyncs per group commit) or IndexSyncLazy (one fsync per
	// group commit: the segment's; see IndexSyncLazy).
	IndexSync IndexSync
	// IndexSyncInterval bounds how long a lazily written offset index
	// stays unsynced while the topic is idle or busy
	// (mmmq.broker.storage.index-sync-interval); default 1s. Only
	// IndexSyncLazy uses it.
	IndexSyncInterval time.Duration
	// FilesystemSynced tells Open that everything written to the data
	// filesystem before this process started is durable already (the
	// caller ran vfs.FSSyncer.SyncFS once, as the broker's local backend
	// does at startup), so repair need not fsync the last segment's files
	// of each topic it opens (see the package doc, "Repair on open"). Set
	// it only then: without that sync, a killed process's writes may sit
	// in the page cache. Default false: Open fsyncs them.
	FilesystemSynced bool
	// Preallocate is how many bytes of written, fsynced zeros a busy
	// topic's active segment keeps ahead of its writer
	// (mmmq.broker.storage.preallocate; its offset index keeps an eighth
	// of that, at least 4 KiB), so that group commits overwrite zeros and
	// use fdatasync (see prealloc.go). 0, the default here, is off: the
	// files hold exactly their entries at every moment, as before.
	// Sealed, cleanly closed and repaired files end at their last entry
	// either way.
	Preallocate int64
	// Preallocation is the broker-wide budget of preallocated bytes
	// shared by every topic's log (mmmq.broker.storage.preallocate-max-bytes,
	// NewPreallocBudget), which also checks the disk guard. Nil with
	// Preallocate set: Open makes one of DefaultPreallocateMaxBytes for
	// this log alone, checking SpaceGuard.
	Preallocation *PreallocBudget
	// PreallocateIdle is how long a topic without a group commit keeps
	// its preallocated tail before it is cut and given back to the
	// budget; default DefaultPreallocateIdle (10s).
	PreallocateIdle time.Duration
	// Observer, when set, is told about every fsync and every committed batch
	// (metrics). It is called from the writer goroutine and must not block.
	Observer Observer
	// Hooks are crash-injection points for tests; nil in production.
	Hooks *Hooks
}

// Observer receives write-path measurements (for Prometheus metrics).
type Observer interface {
	// ObserveFsync is called after each fsync of a segment (file
	// FileSegment) or offset index (FileIndex) file.
	ObserveFsync(topic string, file FileKind, d time.Duration)
	// ObserveBatch is called after each group commit with its entry count.
	ObserveBatch(topic string, entries int)
}

// Hooks are named injection points on the write path, used by crash and
// power-loss tests to stop the process (or snapshot a MemFS) at an exact
// moment. Each func is called, when non-nil, from the writer goroutine.
type Hooks struct {
	AfterSegmentWrite func() // .mmm write returned, not fsynced
	AfterSegmentSync  func() // .mmm fsynced, .idx not yet written
	AfterIndexWrite   func() // .idx write returned, not fsynced
	AfterIndexSync    func() // .idx fsynced, before the high watermark moves and waiters are answered (commit mode)
	// AfterAnswer is called once a group commit answered its waiters: in
	// lazy mode the index entries are written and not yet fsynced.
	AfterAnswer func()
	// BeforeSealIndexSync is called in lazy mode when a rotation is about
	// to fsync the full segment's offset index (before the next segment
	// is created).
	BeforeSealIndexSync func()
	AfterRotateSegment  func() // rotation: new .mmm created, .idx not yet created
	// Topic deletion (DeleteTopicDir), called from the deleting goroutine:
	AfterTopicRename     func() // topic dir renamed aside, data root not yet fsynced
	AfterTopicRenameSync func() // rename made durable, nothing removed yet
	AfterTopicFileRemove func() // one file of the renamed-aside dir removed (called per file)
	// BetweenSegmentUnlinks is called by retention (ApplyRetention, from
	// the caller's goroutine) after a head segment's .idx was removed and
	// before its .mmm is: the interrupted deletion repair must finish.
	BetweenSegmentUnlinks func()
	// AckBeforeSync, when true, makes DURABLE waiters be answered right
	// after the .mmm write, before any fsync. It is the deliberately wrong
	// variant used as the negative control of the power-loss tests: it must
	// lose acknowledged data. Never set outside tests.
	AckBeforeSync bool
	// SkipDatasync, when true, makes every fdatasync of a group commit
	// into preallocated zeros return at once without syncing: the
	// deliberately wrong variant the power-loss tests with preallocation
	// use as their negative control. Never set outside tests.
	SkipDatasync bool
	// IndexBeforeSegmentSync, when true, makes a commit-mode group commit
	// write and fsync its index entries before it fsyncs the segment
	// bytes they point at: one order in which fsyncing the two files at
	// once can complete. It is the deliberately wrong variant the
	// power-loss tests use to show that they catch an index made durable
	// ahead of its segment (repair then refuses the topic). Never set
	// outside tests.
	IndexBeforeSegmentSync bool
	// SkipFinishedSync, when true, makes a checkpoint's RecordFinished
	// return without fsyncing the records it appended to <name>.finished:
	// the deliberately wrong variant the finished-offsets power-loss test
	// uses as its negative control. Never set outside tests.
	SkipFinishedSync bool
	// SkipDeliveriesSync, when true, makes a checkpoint's RecordDeliveries
	// return without fsyncing the kind-2 records it appended to
	// <name>.finished: the deliberately wrong variant the delivery-count
	// power-loss test uses as its negative control. Never set outside
	// tests.
	SkipDeliveriesSync bool
}

// FileKind names the file of an fsync for an Observer.
type FileKind string

// The two files of a segment.
const (
	FileSegment FileKind = "segment" // <base>.mmm
	FileIndex   FileKind = "index"   // <base>.idx
)

// IndexSync is when a log fsyncs its offset index; see Options.IndexSync.
type IndexSync int

const (
	// IndexSyncCommit fsyncs the index in every group commit, after the
	// segment and before anyone is answered: .mmm write, fsync, .idx write,
	// fsync, answer. Two fsyncs per group commit.
	IndexSyncCommit IndexSync = iota
	// IndexSyncLazy writes the index in every group commit but fsyncs it
	// only before a rotation seals the segment, when the log closes, and
	// at most Options.IndexSyncInterval after it was first left unsynced,
	// and once the segment bytes its unsynced entries cover reach
	// LazyIndexSyncBytes (4 MiB, so that a crash leaves recovery a bounded
	// walk): .mmm write, fsync, .idx write, answer. One fsync per group
	// commit.
	// An index entry is still written only after the bytes it points at
	// were fsynced, so whatever a power loss leaves of the index never
	// points at lost data; repair indexes again the entries the index
	// lost (see the package doc). Kafka works this way: it trusts its
	// segments and rebuilds the offset index after an unclean shutdown.
	IndexSyncLazy
)

// DefaultIndexSyncInterval is Options.IndexSyncInterval's default.
const DefaultIndexSyncInterval = time.Second

// String is the configuration spelling: "commit" or "lazy".
func (m IndexSync) String() string {
	if m == IndexSyncLazy {
		return "lazy"
	}
	return "commit"
}

// ParseIndexSync parses "commit" or "lazy" (case-insensitive), the values
// of mmmq.broker.storage.index-sync.
func ParseIndexSync(s string) (IndexSync, error) {
	switch strings.ToLower(s) {
	case "commit":
		return IndexSyncCommit, nil
	case "lazy":
		return IndexSyncLazy, nil
	}
	return 0, fmt.Errorf("index sync %q: want commit or lazy", s)
}

func (o *Options) withDefaults() Options {
	r := *o
	if r.FS == nil {
		r.FS = vfs.OS{}
	}
	if r.Logger == nil {
		r.Logger = zap.NewNop()
	}
	if r.SegmentMaxBytes <= 0 {
		r.SegmentMaxBytes = defaultSegmentMaxBytes
	}
	if r.MaxRecordBytes <= 0 {
		r.MaxRecordBytes = defaultMaxRecordBytes
	}
	if r.MaxPendingBytes <= 0 {
		r.MaxPendingBytes = 64 << 20
	}
	if r.SegmentCache == nil {
		r.SegmentCache = NewSegmentCache(r.MaxOpenSegments)
	}
	if r.IndexSyncInterval <= 0 {
		r.IndexSyncInterval = DefaultIndexSyncInterval
	}
	if r.Preallocate < 0 {
		r.Preallocate = 0
	}
	if r.Preallocate > 0 && r.Preallocation == nil {
		r.Preallocation = NewPreallocBudget(0, r.SpaceGuard)
	}
	if r.PreallocateIdle <= 0 {
		r.PreallocateIdle = DefaultPreallocateIdle
	}
	if r.SlowFsync <= 0 {
		r.SlowFsync = time.Second
	}
	return r
}
