package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Bounds of the automatic max-open-segments (AutoMaxOpenSegments).
const (
	minAutoOpenSegments = 1
	maxAutoOpenSegments = 4096
)

// AutoMaxOpenSegments is the segment cache capacity used when none is
// configured (mmmq.broker.storage.max-open-segments: 0): a quarter of the
// open-file limit in segments, so segment files take at most half of the
// process's descriptors and connections, listeners and checkpoint commits
// keep the other half — at least 1 and at most 4096 segments. limit is
// RLIMIT_NOFILE (see contract.OpenFileLimit); 0 means unknown and gives 256.
func AutoMaxOpenSegments(limit uint64) int {
	if limit == 0 {
		return 256
	}
	return int(min(max(limit/4, minAutoOpenSegments), maxAutoOpenSegments))
}

// CheckMaxOpenSegments refuses a configured capacity whose descriptors (2
// per segment) would take more than half of the open-file limit, naming
// the key, the numbers and the fix. n <= 0 (automatic) and an unknown limit
// (0) always pass.
func CheckMaxOpenSegments(n int, limit uint64) error {
	if n <= 0 || limit == 0 || uint64(n) <= limit/4 {
		return nil
	}
	return fmt.Errorf("mmmq.broker.storage.max-open-segments: %d segments need %d file descriptors, more than half of the open-file limit (%d); set it to at most %d, or 0 for automatic, or raise the limit (ulimit -n, systemd LimitNOFILE)",
		n, 2*n, limit, limit/4)
}

// SegmentCache bounds the file descriptors held by segments, active and
// sealed, of every log it serves: at most capacity .mmm/.idx pairs are open
// at any time. Pairs are opened on demand, kept while there is room and
// closed when evicted (CLOCK, an approximation of least recently used). One
// cache may serve many logs (the broker shares one across all topics, so
// 10,000 idle topics hold no descriptors); a Log whose Options.SegmentCache
// is nil makes its own.
//
// Readers open a pair read-only. The writer of a log pins its active
// segment's pair for the length of one group commit (write and fsync of
// both files), opening it read-write when the cache holds none or only a
// read-only one; so a pair is only ever closed with no unsynced write in it.
// A topic whose active segment was evicted while idle reopens it on its
// next append.
//
// Readers and the writer pin a pair (a reference count) for the length of
// their calls, and no caller pins two pairs at once: eviction drops the
// cache's reference and the files close when the last pin is released,
// never under an in-flight read or write. An evicted pair still pinned
// counts against capacity until it closes, so when every open pair is
// pinned a miss waits for one to close instead of opening more files (a
// burst of 10,000 topics committing at once takes turns, it does not run
// out of descriptors). A cache hit takes no lock (an atomic load and
// compare-and-swap); a miss takes the cache's mutex to reserve room and
// again to insert, and opens the files between the two.
type SegmentCache struct {
	capacity int

	mu    sync.Mutex
	freed *sync.Cond   // broadcast when a pair closes
	open  int          // pairs open or being opened, cached or not (<= capacity)
	waits atomic.Int32 // callers reserving room now (see reserveLocked)
	ring  []*segFiles  // cached pairs; slot i holds ring[i].slot == i
	hand  int          // CLOCK hand into ring

	opens     atomic.Int64 // pairs opened on a miss
	evictions atomic.Int64 // pairs evicted to make room
}

// NewSegmentCache returns an empty cache of at most maxOpenSegments pairs
// (2 file descriptors each); <= 0 means AutoMaxOpenSegments of this
// process's open-file limit.
func NewSegmentCache(maxOpenSegments int) *SegmentCache {
	if maxOpenSegments <= 0 {
		limit, _ := contract.OpenFileLimit()
		maxOpenSegments = AutoMaxOpenSegments(limit)
	}
	c := &SegmentCache{capacity: maxOpenSegments}
	c.freed = sync.NewCond(&c.mu)
	return c
}

// Capacity is the number of segments whose files may be open at once.
func (c *SegmentCache) Capacity() int { return c.capacity }

// Len is the number of segments whose files are cached now.
func (c *SegmentCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ring)
}

// SegmentCacheStats is a snapshot of a SegmentCache's counters, for
// metrics (mmmq_segment_cache_*).
type SegmentCacheStats struct {
	Capacity  int   // most pairs open at once (max-open-segments)
	Open      int   // pairs open now, cached or pinned after eviction (2 descriptors each)
	Opens     int64 // pairs opened on a miss since the cache was made
	Evictions int64 // pairs evicted to make room since the cache was made
}

// Stats returns the cache's counters now.
func (c *SegmentCache) Stats() SegmentCacheStats {
	c.mu.Lock()
	open := c.open
	c.mu.Unlock()
	return SegmentCacheStats{Capacity: c.capacity, Open: open, Opens: c.opens.Load(), Evictions: c.evictions.Load()}
}

// segFiles is the open .mmm/.idx pair of one segment. refs counts one
// reference for its owner (the cache while it is in the ring, or the
// writer while the segment is active) plus one per pin; the files are
// closed when it reaches 0 and the pair is never used again.
type segFiles struct {
	cache *SegmentCache // counts the pair in open until it closes
	seg   *segment
	mmm   vfs.File
	idx   vfs.File
	refs  atomic.Int64
	used  atomic.Bool // CLOCK reference bit, set by pins
	slot  int         // index in SegmentCache.ring, -1 when not cached (guarded by its mu)
	// writable: opened read-write (by the writer, for the active segment).
	writable bool
}

// newSegFiles wraps an open pair with one reference, for its owner (the
// cache once it is inserted).
func newSegFiles(seg *segment, mmm, idx vfs.File, writable bool) *segFiles {
	f := &segFiles{seg: seg, mmm: mmm, idx: idx, slot: -1, writable: writable}
	f.refs.Store(1)
	return f
}

// unref drops one reference and closes both files when it was the last,
// giving their room back to the cache. Close errors are ignored: a pair
// anyone can still hold is read-only or had every write fsynced before its
// writer released it, and an fsync failure has already failed its log.
func (f *segFiles) unref() {
	c := f.cache
	if f.refs.Add(-1) != 0 {
		// A released pin may make the pair evictable: wake whoever
		// waits for room to look again.
		if c != nil && c.waits.Load() > 0 {
			c.mu.Lock()
			c.freed.Broadcast()
			c.mu.Unlock()
		}
		return
	}
	f.closeFiles()
	if c != nil {
		c.mu.Lock()
		c.freeLocked()
		c.mu.Unlock()
	}
}

// unrefLocked is unref with f.cache.mu held.
func (f *segFiles) unrefLocked() {
	if f.refs.Add(-1) == 0 {
		f.closeFiles()
		f.cache.freeLocked()
	}
}

func (f *segFiles) closeFiles() { _ = errors.Join(f.mmm.Close(), f.idx.Close()) }

// freeLocked gives back the room of a pair that closed (or was never
// opened) and wakes whoever waits for room. c.mu is held.
//
// A waiter cannot miss a wake-up: it checks for room and for an evictable
// pair and goes to sleep under c.mu, and every closing or unpinning that
// could give it room broadcasts under c.mu after its change is visible.
func (c *SegmentCache) freeLocked() {
	c.open--
	c.freed.Broadcast()
}

// reserveLocked makes room for one more open pair: while capacity pairs
// are open it evicts a cached pair nobody pins (it closes at once) or,
// when every open pair is pinned, waits for one to close. closed, when
// set, ends the wait with contract.ErrClosed. c.mu is held (Wait releases it).
func (c *SegmentCache) reserveLocked(closed *atomic.Bool) error {
	// Counted before the first look at the pins: a pin released after
	// that look sees the count and broadcasts (see unref).
	c.waits.Add(1)
	defer c.waits.Add(-1)
	for c.open >= c.capacity {
		if closed != nil && closed.Load() {
			return contract.ErrClosed
		}
		if v := c.victimLocked(); v != nil {
			c.removeLocked(v)
			c.evictions.Add(1)
			continue
		}
		c.freed.Wait()
	}
	c.open++
	return nil
}

// openReserved opens a pair with open once room is reserved for it
// (reserveLocked), giving the room back when open fails. The pair comes
// back with one reference and counted by the cache.
func (c *SegmentCache) openReserved(closed *atomic.Bool, open func() (*segFiles, error)) (*segFiles, error) {
	c.mu.Lock()
	err := c.reserveLocked(closed)
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	f, err := open()
	if err != nil {
		c.mu.Lock()
		c.freeLocked()
		c.mu.Unlock()
		return nil, err
	}
	f.cache = c
	c.opens.Add(1)
	return f, nil
}

// unpin releases a pin taken by pin or pinWritable.
func (f *segFiles) unpin() { f.unref() }

// tryPin pins the pair currently attached to seg, if any and still open,
// without a lock.
func (s *segment) tryPin() *segFiles {
	for {
		f := s.files.Load()
		if f == nil {
			return nil
		}
		r := f.refs.Load()
		if r <= 0 {
			return nil // being closed: evicted and its last pin released
		}
		if f.refs.CompareAndSwap(r, r+1) {
			if !f.used.Load() {
				f.used.Store(true)
			}
			return f
		}
	}
}

// pin returns the open files of seg with a reference the caller releases
// with unpin, opening them read-only (and caching them) when they are not
// open. closed is the owning log's flag: once it is set no pair is opened
// any more and pin returns contract.ErrClosed. A missing file is an error wrapping
// fs.ErrNotExist, never an empty read ("open segment <path>: ...").
func (c *SegmentCache) pin(fsys vfs.FS, seg *segment, closed *atomic.Bool) (*segFiles, error) {
	if f := seg.tryPin(); f != nil {
		return f, nil
	}
	if closed.Load() {
		return nil, contract.ErrClosed
	}
	f, err := c.openReserved(closed, func() (*segFiles, error) { return openSealed(fsys, seg) })
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if closed.Load() {
		c.mu.Unlock()
		f.unref()
		return nil, contract.ErrClosed
	}
	if other := seg.tryPin(); other != nil { // another reader opened it first
		c.mu.Unlock()
		f.unref()
		return other, nil
	}
	f.refs.Add(1) // the caller's pin; the first reference is the cache's
	f.used.Store(true)
	c.insertLocked(f)
	seg.files.Store(f)
	c.mu.Unlock()
	return f, nil
}

// pinWritable is pin for the writer of seg's log: it returns seg's files
// opened read-write, pinned until the writer calls unpin. A read-only pair
// a reader cached is replaced (readers still pinning it keep it until their
// reads end). Only the writer calls it, so no other read-write pair of seg
// can appear meanwhile. Errors are those of opening the files ("open
// segment|index <path>: ...", with a hint at the open-file limit); nothing
// is written then.
func (c *SegmentCache) pinWritable(fsys vfs.FS, seg *segment) (*segFiles, error) {
	if f := seg.tryPin(); f != nil {
		if f.writable {
			return f, nil
		}
		f.unpin()
	}
	f, err := c.openReserved(nil, func() (*segFiles, error) { return openSegment(fsys, seg, true) })
	if err != nil {
		return nil, err
	}
	f.refs.Add(1) // the writer's pin; the first reference is the cache's
	c.mu.Lock()
	if old := seg.files.Load(); old != nil && c.cachedLocked(old) {
		c.removeLocked(old)
	}
	c.insertLocked(f)
	seg.files.Store(f)
	c.mu.Unlock()
	return f, nil
}

// create runs create (createSegment or createTopic: new files, opened
// read-write) once room is reserved for the pair, caches the pair and
// attaches it to its segment. pinned adds the writer's pin. Errors are
// create's; nothing is cached then.
func (c *SegmentCache) create(pinned bool, create func() (*segment, *segFiles, error)) (*segment, error) {
	var seg *segment
	f, err := c.openReserved(nil, func() (*segFiles, error) {
		s, f, err := create()
		seg = s
		return f, err
	})
	if err != nil {
		return nil, err
	}
	if pinned {
		f.refs.Add(1)
	}
	c.mu.Lock()
	c.insertLocked(f)
	seg.files.Store(f)
	c.mu.Unlock()
	return seg, nil
}

// openSealed opens the files of a segment read-only, for readers. Repair
// checked them when the log was opened; nothing is validated again here.
func openSealed(fsys vfs.FS, seg *segment) (*segFiles, error) {
	return openSegment(fsys, seg, false)
}

// openSegment opens seg's pair, read-write when writable.
func openSegment(fsys vfs.FS, seg *segment, writable bool) (*segFiles, error) {
	open := fsys.Open
	if writable {
		open = fsys.OpenRW
	}
	mmm, err := open(seg.mmmPath)
	if err != nil {
		return nil, fmt.Errorf("open segment %s: %w%s", seg.mmmPath, err, fdHint(err))
	}
	idx, err := open(seg.idxPath)
	if err != nil {
		mmm.Close()
		return nil, fmt.Errorf("open index %s: %w%s", seg.idxPath, err, fdHint(err))
	}
	return newSegFiles(seg, mmm, idx, writable), nil
}

// cachedLocked reports whether f is in the ring. c.mu is held.
func (c *SegmentCache) cachedLocked(f *segFiles) bool {
	return f.slot >= 0 && f.slot < len(c.ring) && c.ring[f.slot] == f
}

// insertLocked adds f to the ring. Room for it was reserved when it was
// opened (reserveLocked), so the ring, whose pairs are all open, has fewer
// than capacity. c.mu is held.
func (c *SegmentCache) insertLocked(f *segFiles) {
	f.slot = len(c.ring)
	c.ring = append(c.ring, f)
}

// victimLocked picks a cached pair to evict: CLOCK, skipping pairs used
// since the hand last passed (clearing their bit) and pairs pinned now; nil
// when two turns found none unpinned (every open pair is in use). c.mu is
// held.
func (c *SegmentCache) victimLocked() *segFiles {
	for i := 0; i < 2*len(c.ring); i++ {
		if c.hand >= len(c.ring) {
			c.hand = 0
		}
		f := c.ring[c.hand]
		c.hand++
		if f.used.Load() {
			f.used.Store(false)
			continue
		}
		if f.refs.Load() > 1 {
			continue
		}
		return f
	}
	return nil
}

// removeLocked takes f out of the ring, detaches it from its segment and
// drops the cache's reference. c.mu is held.
func (c *SegmentCache) removeLocked(f *segFiles) {
	last := len(c.ring) - 1
	c.ring[f.slot] = c.ring[last]
	c.ring[f.slot].slot = f.slot
	c.ring[last] = nil
	c.ring = c.ring[:last]
	f.slot = -1
	f.seg.files.CompareAndSwap(f, nil)
	f.unrefLocked()
}

// drop evicts the cached files of segs (a log being closed, its writer
// stopped). Pairs still pinned close when their last pin is released.
func (c *SegmentCache) drop(segs []*segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range segs {
		if f := s.files.Load(); f != nil && c.cachedLocked(f) {
			c.removeLocked(f)
		}
	}
}
