package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// DefaultMaxOpenSegments is the capacity of a SegmentCache made with a
// capacity <= 0: 512 sealed segments, 1024 file descriptors
// (mmmq.broker.storage.max-open-segments).
const DefaultMaxOpenSegments = 512

// SegmentCache bounds the file descriptors held by sealed segments: their
// .mmm and .idx files are opened read-only on demand, kept in a cache of at
// most capacity pairs and closed when evicted (CLOCK, an approximation of
// least recently used). One cache may serve many logs (the broker shares one
// across all topics); a Log whose Options.SegmentCache is nil makes its own
// of Options.MaxOpenSegments pairs.
//
// The active segment of each log (the one appended to) is not counted: its
// files stay open while it is active and join the cache when a rotation
// seals it (the writer fsynced both files first, so eviction never closes a
// file with unsynced writes; every file the cache opens itself is
// read-only).
//
// Readers pin a pair (a reference count) for the length of their ReadAt
// calls: eviction drops the cache's reference and the files are closed by
// whoever releases the last one, never under an in-flight read. A cache hit
// takes no lock (an atomic load and compare-and-swap); a miss opens the
// files outside the cache's mutex and takes it only to insert them. So
// while readers pin more pairs than capacity, or pin pairs already evicted,
// up to that many more pairs are open for the length of those reads.
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
}

// newSegFiles wraps an open pair with one reference, for its owner.
func newSegFiles(seg *segment, mmm, idx vfs.File) *segFiles {
	f := &segFiles{seg: seg, mmm: mmm, idx: idx, slot: -1}
	f.refs.Store(1)
	return f
}

// unref drops one reference and closes both files when it was the last.
// Only the owner's error matters (the active segment at Log.Close); pins
// ignore it: a pair a reader can still hold is read-only or fsynced.
func (f *segFiles) unref() error {
	if f.refs.Add(-1) != 0 {
		return nil
	}
	return errors.Join(f.mmm.Close(), f.idx.Close())
}

// unpin releases a pin taken by pin.
func (f *segFiles) unpin() { _ = f.unref() }

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

// openSealed opens the files of a sealed segment read-only. Repair checked
// them when the log was opened; nothing is validated again here.
func openSealed(fsys vfs.FS, seg *segment) (*segFiles, error) {
	mmm, err := fsys.Open(seg.mmmPath)
	if err != nil {
		return nil, fmt.Errorf("open segment %s: %w%s", seg.mmmPath, err, fdHint(err))
	}
	idx, err := fsys.Open(seg.idxPath)
	if err != nil {
		mmm.Close()
		return nil, fmt.Errorf("open index %s: %w%s", seg.idxPath, err, fdHint(err))
	}
	return newSegFiles(seg, mmm, idx), nil
}

// adopt takes over the open files of a segment a rotation just sealed: the
// writer's reference becomes the cache's. The writer fsynced both files
// before the rotation, so evicting them later closes no unsynced write.
func (c *SegmentCache) adopt(f *segFiles) {
	c.mu.Lock()
	c.insertLocked(f)
	c.mu.Unlock()
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
	_ = f.unref() // read-only or fsynced before it was adopted
}

// drop evicts the cached files of segs (a log being closed). Pairs still
// pinned close when their last pin is released. Files of an active segment
// (not in the ring) are left to their owner.
func (c *SegmentCache) drop(segs []*segment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range segs {
		if f := s.files.Load(); f != nil && f.slot >= 0 && f.slot < len(c.ring) && c.ring[f.slot] == f {
			c.removeLocked(f)
		}
	}
}
