package storage

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Defaults of SpaceGuardOptions.
const (
	// DefaultMinFreeBytes is mmmq.broker.storage.min-free-bytes' default:
	// 256 MiB.
	DefaultMinFreeBytes = 256 << 20
	// DefaultSpaceCheckInterval is the longest time between two free-space
	// samples of a SpaceGuard, and so how soon freed space is noticed.
	DefaultSpaceCheckInterval = time.Second
)

// LowSpaceError is an append refused by the SpaceGuard: the data
// filesystem had less than MinFree bytes available at the last sample.
// Nothing was queued or written. It wraps ErrNoSpace (HTTP 507 NO_SPACE,
// with Retry-After): the refusal lifts by itself once space is freed.
type LowSpaceError struct {
	Free    int64 // bytes available at the last sample
	MinFree int64 // mmmq.broker.storage.min-free-bytes
	// Request is the bytes of the refused append when it alone would have
	// taken the free space under MinFree (one large batch while Free was
	// still above it); 0 when Free itself was under MinFree.
	Request int64
}

func (e *LowSpaceError) Error() string {
	if e.Request > 0 && e.Free >= e.MinFree {
		return fmt.Sprintf("storage: this request needs %d bytes; with %d bytes free on the data filesystem it would leave %d, under mmmq.broker.storage.min-free-bytes (%d): send it in smaller parts, or free space (retention or an operator); nothing was stored",
			e.Request, e.Free, e.Free-e.Request, e.MinFree)
	}
	return fmt.Sprintf("storage: %d bytes free on the data filesystem, under mmmq.broker.storage.min-free-bytes (%d): publishes are refused until space is freed (retention or an operator); nothing was stored",
		e.Free, e.MinFree)
}

// Unwrap returns ErrNoSpace.
func (e *LowSpaceError) Unwrap() error { return ErrNoSpace }

// SpaceGuardOptions configures a SpaceGuard.
type SpaceGuardOptions struct {
	// FS and Dir are where free space is measured: FS.FreeSpace(Dir), the
	// data root (mmmq.broker.storage.root-dir).
	FS  vfs.FS
	Dir string
	// MinFree is mmmq.broker.storage.min-free-bytes: appends are refused
	// while fewer bytes than this are free. <= 0 turns the guard off
	// (NewSpaceGuard returns nil).
	MinFree int64
	// Interval is the longest time between two samples; default
	// DefaultSpaceCheckInterval (1s).
	Interval time.Duration
	// Slack is the most bytes admitted between two samples; default
	// MinFree/2. It must stay below MinFree for the guard to refuse before
	// the disk is full.
	Slack int64
	// Now is the clock; default time.Now. Tests pass a fake one.
	Now func() time.Time
	// Logger receives one line when the guard starts or stops refusing,
	// and when a sample fails; default zap.NewNop().
	Logger *zap.Logger
}

// SpaceGuard refuses appends with a *LowSpaceError while the filesystem of
// the data root has less than MinFree bytes available, so that the disk
// never fills up under publishes: what is left is room for checkpoint
// commits, segment deletions (retention), topic directories and startup
// repair. It lifts by itself once space is back (retention deleted
// segments, or an operator freed space); nothing needs a restart. One
// guard serves every topic's log of a data root (Options.SpaceGuard).
//
// The cost on the publish path is bounded: free space is sampled with one
// FS.FreeSpace (statfs(2)) call at most once per Interval (1s) of time and
// once per Slack (MinFree/2) bytes admitted, whichever comes first; every
// other Admit is two atomic adds and a monotonic clock read, no system
// call and no lock. While refusing, bytes are not counted, and a refused
// append triggers a new sample only once Interval has passed since the
// last one, so a flood of refused publishes costs one statfs per second
// and freed space is noticed within a second. The bound this gives: after
// a sample that saw at least MinFree bytes free, at most Slack more bytes
// of entries and index are admitted before the next sample (a single
// request larger than Slack is measured against what it would leave), so
// publishes alone leave at least MinFree - Slack (128 MiB by default) free; writers
// the guard does not see (checkpoints, other processes) count against that
// margin for at most one Interval. A failed sample keeps the previous
// decision (it is logged once, until a sample succeeds again): the guard
// never refuses on a statfs error alone, and a write that then hits a full
// disk still fails its topic without acknowledging anything.
//
// A nil *SpaceGuard admits everything; its methods may be called on it.
type SpaceGuard struct {
	fs       vfs.FS
	dir      string
	minFree  int64
	interval int64 // nanoseconds
	slack    int64
	now      func() time.Time
	start    time.Time
	log      *zap.Logger

	low       atomic.Bool  // refusing: the last good sample saw < minFree
	free      atomic.Int64 // bytes free at the last good sample; -1 before it
	next      atomic.Int64 // clock (ns since start) of the next time-based sample
	since     atomic.Int64 // bytes admitted since the last sample
	refused   atomic.Int64
	samples   atomic.Int64
	failures  atomic.Int64
	mu        sync.Mutex // one sample at a time
	lastError bool       // the last sample failed (guarded by mu)
}

// NewSpaceGuard returns a guard over o, or nil (admit everything) when
// o.MinFree <= 0. It samples nothing until CheckAtStart or the first
// Admit.
func NewSpaceGuard(o SpaceGuardOptions) *SpaceGuard {
	if o.MinFree <= 0 {
		return nil
	}
	if o.FS == nil {
		o.FS = vfs.OS{}
	}
	if o.Interval <= 0 {
		o.Interval = DefaultSpaceCheckInterval
	}
	if o.Slack <= 0 {
		o.Slack = max(o.MinFree/2, 1)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	g := &SpaceGuard{fs: o.FS, dir: o.Dir, minFree: o.MinFree, interval: int64(o.Interval), slack: o.Slack,
		now: o.Now, start: o.Now(), log: o.Logger}
	g.free.Store(-1)
	return g
}

// CheckAtStart is the guard's look at the data filesystem when the broker
// starts (the data root must exist): it warns, naming both numbers and
// mmmq.broker.storage.min-free-bytes, when the whole filesystem is smaller
// than MinFree — every publish would be refused for as long as the broker
// runs — and takes a first sample, which warns when free space is already
// under MinFree (publishes are refused from the first one). A failed
// statfs is logged by the sample; a filesystem whose size cannot be read
// is only sampled.
func (g *SpaceGuard) CheckAtStart() {
	if g == nil {
		return
	}
	if total, err := g.fs.TotalSpace(g.dir); err == nil && total < g.minFree {
		g.log.Warn("the data filesystem is smaller than mmmq.broker.storage.min-free-bytes: every publish will be refused (507 NO_SPACE); "+
			"lower mmmq.broker.storage.min-free-bytes (0 turns the disk guard off) or give root-dir a larger filesystem",
			zap.String("dir", g.dir), zap.Int64("filesystem-bytes", total), zap.Int64("min-free-bytes", g.minFree))
	}
	g.sample()
}

// clock is the time since the guard was made, in nanoseconds (monotonic).
func (g *SpaceGuard) clock() int64 { return int64(g.now().Sub(g.start)) }

// Admit asks for room for n more bytes (entries and their index
// entries). It returns nil, or a *LowSpaceError when the guard is
// refusing; see SpaceGuard for when it samples.
func (g *SpaceGuard) Admit(n int64) error {
	if g == nil {
		return nil
	}
	if g.low.Load() {
		if g.clock() >= g.next.Load() {
			g.sample()
		}
		if g.low.Load() {
			return g.refuse()
		}
	}
	if g.since.Add(n) >= g.slack || g.clock() >= g.next.Load() {
		g.sample()
		// A request larger than the slack (one big batch) is measured
		// against what it would leave, not only against what is free now:
		// it must not take the disk under MinFree by itself.
		if g.low.Load() {
			return g.refuse()
		}
		if f := g.free.Load(); f >= 0 && f-n < g.minFree { // -1: never measured
			g.refused.Add(1)
			return &LowSpaceError{Free: f, MinFree: g.minFree, Request: n}
		}
		// The sample did not see these bytes written: they count
		// towards the next one.
		g.since.Add(n)
	}
	return nil
}

// allows reports whether n bytes of preallocated zeros (PreallocBudget)
// may be written: only when the guard is not refusing and the free space
// measured, less what was admitted since, would stay at or above the
// minimum after them. The bytes count towards the next sample as an
// append's do. A nil guard allows everything; a guard that never
// measured allows nothing.
func (g *SpaceGuard) allows(n int64) bool {
	if g == nil {
		return true
	}
	if g.clock() >= g.next.Load() {
		g.sample()
	}
	f := g.free.Load()
	if g.low.Load() || f < 0 || f-g.since.Load()-n < g.minFree {
		return false
	}
	g.since.Add(n)
	return true
}

func (g *SpaceGuard) refuse() error {
	g.refused.Add(1)
	return &LowSpaceError{Free: g.free.Load(), MinFree: g.minFree}
}

// sample measures free space, unless another caller did while this one
// waited for the lock.
func (g *SpaceGuard) sample() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	if now < g.next.Load() && g.since.Load() < g.slack {
		return // sampled meanwhile
	}
	g.since.Store(0)
	g.next.Store(now + g.interval)
	g.samples.Add(1)
	free, err := g.fs.FreeSpace(g.dir)
	if err != nil {
		g.failures.Add(1)
		if !g.lastError {
			g.log.Warn("free space of the data filesystem cannot be read; the disk guard keeps its last decision",
				zap.String("dir", g.dir), zap.Bool("refusing", g.low.Load()), zap.Error(err))
		}
		g.lastError = true
		return
	}
	g.lastError = false
	g.free.Store(free)
	low := free < g.minFree
	if was := g.low.Swap(low); was != low {
		if low {
			g.log.Warn("free space under mmmq.broker.storage.min-free-bytes: publishes are refused (507 NO_SPACE) until space is freed",
				zap.String("dir", g.dir), zap.Int64("free-bytes", free), zap.Int64("min-free-bytes", g.minFree))
		} else {
			g.log.Info("free space back over mmmq.broker.storage.min-free-bytes: publishes are accepted again",
				zap.String("dir", g.dir), zap.Int64("free-bytes", free), zap.Int64("min-free-bytes", g.minFree),
				zap.Int64("refused", g.refused.Load()))
		}
	}
}

// FreeBytes returns the bytes free at the last sample, sampling first when
// the last one is older than the interval (a metrics scrape of an idle
// broker still shows a current value, at one statfs per interval at
// most); -1 when no sample has succeeded, 0 for a nil guard.
func (g *SpaceGuard) FreeBytes() int64 {
	if g == nil {
		return 0
	}
	if g.clock() >= g.next.Load() {
		g.sample()
	}
	return g.free.Load()
}

// SpaceGuardStats is a snapshot of a SpaceGuard, for metrics
// (mmmq_storage_free_bytes, mmmq_storage_space_refused_total).
type SpaceGuardStats struct {
	MinFree  int64 // mmmq.broker.storage.min-free-bytes
	Free     int64 // bytes free at the last successful sample; -1 before one
	Refusing bool  // appends are refused now
	Refused  int64 // appends refused since the guard was made
	Samples  int64 // FreeSpace calls made
	Failures int64 // FreeSpace calls that failed
}

// Stats returns the guard's state now; the zero value for a nil guard.
func (g *SpaceGuard) Stats() SpaceGuardStats {
	if g == nil {
		return SpaceGuardStats{}
	}
	return SpaceGuardStats{MinFree: g.minFree, Free: g.free.Load(), Refusing: g.low.Load(),
		Refused: g.refused.Load(), Samples: g.samples.Load(), Failures: g.failures.Load()}
}
