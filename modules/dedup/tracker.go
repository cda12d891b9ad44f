package dedup

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Defaults of Options (mmmq.broker.dedup in configs/mmmq.yaml).
const (
	DefaultWindow   = 2 * time.Minute
	DefaultMaxIDs   = 100000
	DefaultMaxBytes = 64 << 20
)

// EntryBytes is the memory, in bytes, counted for one remembered id
// against Options.MaxBytes: its 16-byte key and 16-byte value in the
// topic's map with the map's overhead (about 48), and its 24-byte slot in
// the topic's eviction ring. TestEntryBytesCoversMemory measures it.
const EntryBytes = 96

// Options configures a Tracker (mmmq.broker.dedup).
type Options struct {
	// Window is how long an id is remembered after its publish; 0 turns
	// deduplication off (New returns nil).
	Window time.Duration
	// MaxIDs caps the ids remembered per topic (0: DefaultMaxIDs).
	MaxIDs int
	// MaxBytes caps the memory of all topics' ids, counted as EntryBytes
	// per id (0: DefaultMaxBytes).
	MaxBytes int64
	// Logger receives rebuild reports; nil logs nothing.
	Logger *zap.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Stats are the tracker's counters, for metrics.
type Stats struct {
	IDs        int64 // ids remembered now, all topics
	Bytes      int64 // their memory as counted against MaxBytes
	Duplicates int64 // publishes answered as duplicates since start
	Evicted    int64 // ids forgotten before their window ended (MaxIDs, MaxBytes)
	Rebuilt    int64 // ids taken from the logs' tails by rebuilds since start
}

// Tracker is the broker's idempotent-publish state: one Window per open
// topic and the broker-wide memory cap they share. Safe for concurrent
// use.
type Tracker struct {
	opts  Options
	log   *zap.Logger
	seeds [2]maphash.Seed

	ids, bytes, duplicates, evicted, rebuilt atomic.Int64

	mu      sync.Mutex
	windows map[*Window]struct{}
}

// New returns a Tracker, or nil when opts.Window is 0 (deduplication off;
// a nil *Tracker opens no windows).
func New(opts Options) *Tracker {
	if opts.Window <= 0 {
		return nil
	}
	if opts.MaxIDs <= 0 {
		opts.MaxIDs = DefaultMaxIDs
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Tracker{
		opts:    opts,
		log:     opts.Logger,
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		windows: map[*Window]struct{}{},
	}
}

// Window is the configured window length.
func (t *Tracker) Window() time.Duration { return t.opts.Window }

// Stats returns the counters. It first forgets the ids whose window ended
// in every topic (a topic forgets them itself only on its next publish with
// an id), so that IDs and Bytes count what is remembered for a reason.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	ws := make([]*Window, 0, len(t.windows))
	for w := range t.windows {
		ws = append(ws, w)
	}
	t.mu.Unlock()
	horizon := t.opts.Now().UnixNano() - int64(t.opts.Window)
	for _, w := range ws {
		w.mu.Lock()
		w.expireLocked(horizon)
		w.mu.Unlock()
	}
	return Stats{IDs: t.ids.Load(), Bytes: t.bytes.Load(), Duplicates: t.duplicates.Load(),
		Evicted: t.evicted.Load(), Rebuilt: t.rebuilt.Load()}
}

// key is an id's 128-bit keyed hash.
type key [2]uint64

func (t *Tracker) key(id string) key {
	return key{maphash.String(t.seeds[0], id), maphash.String(t.seeds[1], id)}
}

// Open returns the window of topic, whose log is src; nil on a nil
// Tracker. Close it when the topic closes.
func (t *Tracker) Open(topic string, src Source) *Window {
	if t == nil {
		return nil
	}
	w := &Window{t: t, topic: topic, src: src, ids: map[key]stored{}, pend: map[key]pendRef{}}
	w.frontAt.Store(noFront)
	t.mu.Lock()
	t.windows[w] = struct{}{}
	t.mu.Unlock()
	return w
}

// overCap reports whether all windows together hold more than MaxBytes.
func (t *Tracker) overCap() bool { return t.bytes.Load() > t.opts.MaxBytes }

// evictGlobal forgets the oldest ids of any topic until the windows hold
// at most MaxBytes. Each step scans the windows for the oldest first id
// (O(topics)); it runs only while over the cap.
func (t *Tracker) evictGlobal() {
	for t.overCap() {
		var victim *Window
		oldest := int64(noFront)
		t.mu.Lock()
		for w := range t.windows {
			if at := w.frontAt.Load(); at < oldest {
				victim, oldest = w, at
			}
		}
		t.mu.Unlock()
		if victim == nil {
			return
		}
		victim.mu.Lock()
		if victim.ring.len() > 0 {
			victim.evictFrontLocked(t.opts.Now().UnixNano())
		}
		victim.mu.Unlock()
	}
}
