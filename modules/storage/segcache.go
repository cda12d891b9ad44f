package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// DefaultMaxOpenSegments is the capacity of a SegmentCache made with a
// capacity <= 0: 512 segments, 1024 file descriptors
// (mmmq.broker.storage.max-open-segments).
const DefaultMaxOpenSegments = 512

// SegmentCache bounds the file descriptors held by segments, active and
// sealed, of every log it serves: a segment's .mmm and .idx files are opened
// on demand, kept in a cache of at most capacity pairs and closed when
// evicted (CLOCK, an approximation of least recently used). One cache may
// serve many logs (the broker shares one across all topics, so 10,000 idle
// topics hold no descriptors); a Log whose Options.SegmentCache is nil makes
// its own of Options.MaxOpenSegments pairs.
//
// Readers open a pair read-only. The writer of a log pins its active
// segment's pair for the length of one group commit (write and fsync of
// both files), opening it read-write when the cache holds none or only a
// read-only one; so a pair is only ever closed with no unsynced write in it.
// A topic whose active segment was evicted while idle reopens it on its
// next append.
//
// Readers and the writer pin a pair (a reference count) for the length of
// their calls: eviction drops the cache's reference and the files are closed
// by whoever releases the last one, never under an in-flight read or write.
// A cache hit takes no lock (an atomic load and compare-and-swap); a miss
// opens the files outside the cache's mutex and takes it only to insert
// them. So while readers pin more pairs than capacity, or pin pairs already
// evicted, up to that many more pairs are open for the length of those
// reads.
type SegmentCache struct {
	capacity int

	mu   sync.Mutex
	ring []*segFiles // cached pairs; slot i holds ring[i].slot == i
	hand int         // CLOCK hand into ring

	opens     atomic.Int64 // pairs opened on a miss
	evictions atomic.Int64 // pairs evicted to make room
}

// NewSegmentCache returns an empty cache of at most maxOpenSegments sealed
// segments (2 file descriptors each); <= 0 means DefaultMaxOpenSegments.
func NewSegmentCache(maxOpenSegments int) *SegmentCache {
	if maxOpenSegments <= 0 {
		maxOpenSegments = DefaultMaxOpenSegments
	}
	return &SegmentCache{capacity: maxOpenSegments}
}

// Capacity is the number of sealed segments whose files the cache keeps
// open, at most (pinned ones aside, see SegmentCache).
func (c *SegmentCache) Capacity() int { return c.capacity }

// Len is the number of sealed segments whose files are cached now.
func (c *SegmentCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ring)
}

// SegmentCacheStats is a snapshot of a SegmentCache's counters, for
// metrics (mmmq_segment_cache_*).
type SegmentCacheStats struct {
	Capacity  int   // most pairs kept open (max-open-segments)
	Open      int   // pairs cached now (2 descriptors each)
	Opens     int64 // pairs opened on a miss since the cache was made
	Evictions int64 // pairs evicted to make room since the cache was made
}

// Stats returns the cache's counters now.
func (c *SegmentCache) Stats() SegmentCacheStats {
	return SegmentCacheStats{Capacity: c.capacity, Open: c.Len(), Opens: c.opens.Load(), Evictions: c.evictions.Load()}
}

// segFiles is the open .mmm/.idx pair of one segment. refs counts one
// reference for its owner (the cache while it is in the ring, or the
// writer while the segment is active) plus one per pin; the files are
// closed when it reaches 0 and the pair is never used again.
type segFiles struct {
	seg  *segment
	mmm  vfs.File
	idx  vfs.File
	refs atomic.Int64
	used atomic.Bool // CLOCK reference bit, set by pins
	slot int         // index in SegmentCache.ring, -1 when not cached (guarded by its mu)
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

// unref drops one reference and closes both files when it was the last.
// Close errors are ignored: a pair anyone can still hold is read-only or
// had every write fsynced before its writer released it, and an fsync
// failure has already failed its log.
func (f *segFiles) unref() {
	if f.refs.Add(-1) == 0 {
		_ = errors.Join(f.mmm.Close(), f.idx.Close())
	}
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
// any more and pin returns ErrClosed. A missing file is an error wrapping
// fs.ErrNotExist, never an empty read ("open segment <path>: ...").
func (c *SegmentCache) pin(fsys vfs.FS, seg *segment, closed *atomic.Bool) (*segFiles, error) {
	if f := seg.tryPin(); f != nil {
		return f, nil
	}
	if closed.Load() {
		return nil, ErrClosed
	}
	f, err := openSealed(fsys, seg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if closed.Load() {
		c.mu.Unlock()
		f.unref()
		return nil, ErrClosed
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
	c.opens.Add(1)
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
	f, err := openSegment(fsys, seg, true)
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
	c.opens.Add(1)
	return f, nil
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

// adopt caches the read-write files of a segment the writer just created
// (their one reference becomes the cache's) and attaches them to it.
func (c *SegmentCache) adopt(f *segFiles) {
	c.mu.Lock()
	c.insertLocked(f)
	f.seg.files.Store(f)
	c.mu.Unlock()
}

// cachedLocked reports whether f is in the ring. c.mu is held.
func (c *SegmentCache) cachedLocked(f *segFiles) bool {
	return f.slot >= 0 && f.slot < len(c.ring) && c.ring[f.slot] == f
}

// insertLocked adds f to the ring, first evicting pairs while the ring is
// full. c.mu is held.
func (c *SegmentCache) insertLocked(f *segFiles) {
	for len(c.ring) >= c.capacity {
		c.removeLocked(c.victimLocked())
		c.evictions.Add(1)
	}
	f.slot = len(c.ring)
	c.ring = append(c.ring, f)
}

// victimLocked picks the pair to evict (the ring is not empty): CLOCK,
// skipping pairs used since the hand last passed (clearing their bit) and
// pairs pinned now; after two turns without one it takes the pair at the
// hand anyway, whose files then close when its last pin is released.
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
	if c.hand >= len(c.ring) {
		c.hand = 0
	}
	return c.ring[c.hand]
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
	f.unref()
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
