package dedup

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"github.com/mmmq/mmmq/modules/contract"
)

// Source is what a Window needs of its topic's log (contract.Log has it):
// the tail to rebuild from after a restart.
type Source interface {
	HighWatermark() int64
	StartOffset() int64
	ReadBatch(from int64, max int) ([]contract.Entry, error)
}

// Verdict is what Begin decided for one message.
type Verdict uint8

const (
	// Store: the message is new (or has no producer id) and must be
	// stored; Result.Index is its position among the messages to store.
	Store Verdict = iota
	// Duplicate: its id was published within the window; Result.Offset is
	// the first message's offset (-1 when that is not known yet: an
	// ACCEPTED duplicate of a publish still being committed).
	Duplicate
	// DuplicateInCall: an earlier message of the same call has its id;
	// Result.Of is that message's position in the call.
	DuplicateInCall
)

// Result is Begin's decision for one message.
type Result struct {
	Verdict Verdict
	Index   int   // Store: position among the messages to store
	Offset  int64 // Duplicate: the first message's offset, or -1
	Of      int   // DuplicateInCall: the earlier message of the call
}

// stored is a remembered id: where it was stored and when it was
// published (Unix ns; the stored timestamp for ids taken from the log).
type stored struct {
	off int64
	at  int64
}

// pending is one call's claim on its new ids while they are committed.
type pending struct {
	done  chan struct{} // closed once first and err are set
	first int64
	err   error
}

type pendRef struct {
	p    *pending
	call int // the claiming message's position in its call
}

// noFront is frontAt of an empty window.
const noFront = math.MaxInt64

// Window is one topic's remembered ids. Safe for concurrent use.
type Window struct {
	t     *Tracker
	topic string
	src   Source

	loadMu sync.Mutex
	loaded atomic.Bool

	mu     sync.Mutex
	gen    uint64 // bumped by Reset: older claims no longer resolve here
	ids    map[key]stored
	pend   map[key]pendRef
	ring   ring
	closed bool
	// frontAt is the publish time of the oldest id (noFront when none),
	// read without mu by the broker-wide eviction.
	frontAt atomic.Int64
	// waiting, when set (tests), is called each time Begin starts waiting
	// for another call's claim.
	waiting func()
}

// Claim is one call's claim on the ids it is about to store; nil when it
// claimed none. Exactly one Resolve must follow.
type Claim struct {
	w    *Window
	p    *pending
	gen  uint64
	at   int64
	keys []key
	idx  []int // the keys' positions among the messages to store
}

// Begin decides which of a call's messages are duplicates. ids[i] is
// message i's producer id, "" for one without (never deduplicated); res
// (len(ids)) receives the verdicts. The new ids are claimed: until the
// returned Claim is resolved, another publish of one of them waits (or, at
// Accepted, is answered as a duplicate at once). Begin waits for a
// publish of the same ids still being committed by another call; ctx ends
// that wait (ctx.Err()). On a nil Window every message is Store.
func (w *Window) Begin(ctx context.Context, ids []string, level contract.AckLevel, res []Result) (*Claim, error) {
	if w == nil {
		for i := range ids {
			res[i] = Result{Verdict: Store, Index: i}
		}
		return nil, nil
	}
	if !w.loaded.Load() {
		w.load()
	}
	if w.t.overCap() {
		w.t.evictGlobal()
	}
	for {
		c, wait := w.tryClaim(ids, level, res)
		if wait == nil {
			return c, nil
		}
		if w.waiting != nil {
			w.waiting()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tryClaim decides every message under one lock. When an id is being
// committed by another call (and level is not Accepted) it claims nothing
// and returns that call's done channel to wait on; the caller then tries
// again. Claiming all or nothing this way means a call never waits while
// holding claims, so two calls cannot wait for each other.
func (w *Window) tryClaim(ids []string, level contract.AckLevel, res []Result) (*Claim, <-chan struct{}) {
	now := w.t.opts.Now().UnixNano()
	horizon := now - int64(w.t.opts.Window)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.expireLocked(horizon)
	var c *Claim
	stores, dups := 0, 0
	for i, id := range ids {
		if id == "" || w.closed {
			res[i] = Result{Verdict: Store, Index: stores}
			stores++
			continue
		}
		k := w.t.key(id)
		if ref, ok := w.pend[k]; ok {
			switch {
			case c != nil && ref.p == c.p:
				res[i] = Result{Verdict: DuplicateInCall, Of: ref.call}
				dups++
				continue
			case level == contract.Accepted:
				res[i] = Result{Verdict: Duplicate, Offset: -1}
				dups++
				continue
			default:
				if c != nil {
					c.abandonLocked() // nobody saw these claims: we held mu throughout
				}
				return nil, ref.p.done
			}
		}
		if s, ok := w.ids[k]; ok && s.at >= horizon {
			res[i] = Result{Verdict: Duplicate, Offset: s.off}
			dups++
			continue
		}
		if c == nil {
			c = &Claim{w: w, p: &pending{done: make(chan struct{})}, gen: w.gen, at: now}
		}
		w.pend[k] = pendRef{c.p, i}
		c.keys = append(c.keys, k)
		c.idx = append(c.idx, stores)
		res[i] = Result{Verdict: Store, Index: stores}
		stores++
	}
	if dups > 0 {
		w.t.duplicates.Add(int64(dups))
	}
	return c, nil
}

// abandonLocked takes c's claims back (w.mu held).
func (c *Claim) abandonLocked() {
	for _, k := range c.keys {
		if ref, ok := c.w.pend[k]; ok && ref.p == c.p {
			delete(c.w.pend, k)
		}
	}
}

// Resolve records the outcome of storing the claimed messages: first is
// the offset of the call's first stored message, err its failure. On
// success the ids are remembered with their offsets (first + position);
// on failure they are forgotten, and whoever waited for them tries again
// as a new message. Safe to call from the log's writer goroutine: it never
// blocks on anything but the window's lock.
func (c *Claim) Resolve(first int64, err error) {
	if c == nil {
		return
	}
	w := c.w
	w.mu.Lock()
	if c.gen == w.gen {
		c.abandonLocked()
		if err == nil && !w.closed {
			for i, k := range c.keys {
				w.rememberLocked(k, stored{off: first + int64(c.idx[i]), at: c.at})
			}
			for w.ring.len() > w.t.opts.MaxIDs {
				w.evictFrontLocked(c.at)
			}
		}
	}
	w.mu.Unlock()
	c.p.first, c.p.err = first, err
	close(c.p.done)
}

// Done is closed once Resolve ran; then Outcome is final.
func (c *Claim) Done() <-chan struct{} { return c.p.done }

// Outcome is what Resolve recorded (valid after Done is closed).
func (c *Claim) Outcome() (first int64, err error) { return c.p.first, c.p.err }

// rememberLocked adds k (w.mu held).
func (w *Window) rememberLocked(k key, s stored) {
	if _, ok := w.ids[k]; !ok {
		w.t.ids.Add(1)
	}
	w.ids[k] = s
	if w.ring.len() == 0 {
		w.frontAt.Store(s.at)
	}
	w.ring.push(ringItem{k: k, at: s.at})
	w.t.bytes.Add(EntryBytes)
}

// expireLocked forgets the ids published before horizon (w.mu held).
func (w *Window) expireLocked(horizon int64) {
	for w.ring.len() > 0 && w.ring.front().at < horizon {
		w.popFrontLocked()
	}
}

// evictFrontLocked forgets the oldest id; one still inside the window
// counts as evicted (w.mu held, ring not empty).
func (w *Window) evictFrontLocked(now int64) {
	if w.popFrontLocked() && w.ring.lastAt >= now-int64(w.t.opts.Window) {
		w.t.evicted.Add(1)
	}
}

// popFrontLocked drops the ring's front and, unless the id was published
// again since (a newer ring item), its map entry; it reports whether the
// map entry went.
func (w *Window) popFrontLocked() bool {
	it := w.ring.pop()
	w.t.bytes.Add(-EntryBytes)
	forgot := false
	if s, ok := w.ids[it.k]; ok && s.at == it.at {
		delete(w.ids, it.k)
		w.t.ids.Add(-1)
		forgot = true
	}
	if w.ring.len() == 0 {
		w.frontAt.Store(noFront)
	} else {
		w.frontAt.Store(w.ring.front().at)
	}
	return forgot
}

// Reset forgets every id and makes the next Begin rebuild from the log:
// after a failed topic is reopened, offsets the window remembers beyond
// the recovered high watermark no longer hold those messages. Claims made
// before Reset no longer record anything when they resolve (their waiters
// still wake).
func (w *Window) Reset() {
	if w == nil {
		return
	}
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	w.mu.Lock()
	w.gen++
	w.clearLocked()
	w.mu.Unlock()
	w.loaded.Store(false)
}

// Close forgets every id and releases their memory; later calls treat
// every message as new (the topic's log refuses them anyway).
func (w *Window) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.closed = true
	w.gen++
	w.clearLocked()
	w.mu.Unlock()
	w.t.mu.Lock()
	delete(w.t.windows, w)
	w.t.mu.Unlock()
}

func (w *Window) clearLocked() {
	w.t.ids.Add(-int64(len(w.ids)))
	w.t.bytes.Add(-int64(w.ring.len()) * EntryBytes)
	clear(w.ids)
	clear(w.pend)
	w.ring = ring{}
	w.frontAt.Store(noFront)
}

// ringItem is one remembered id in publish order.
type ringItem struct {
	k  key
	at int64
}

// ring is a growable FIFO of ringItems.
type ring struct {
	buf    []ringItem
	head   int
	n      int
	lastAt int64 // at of the item pop returned last
}

func (r *ring) len() int { return r.n }

func (r *ring) front() ringItem { return r.buf[r.head] }

func (r *ring) push(it ringItem) {
	if r.n == len(r.buf) {
		r.resize(max(16, 2*len(r.buf)))
	}
	r.buf[(r.head+r.n)%len(r.buf)] = it
	r.n++
}

func (r *ring) pop() ringItem {
	it := r.buf[r.head]
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	r.lastAt = it.at
	if r.n == 0 {
		r.head = 0
	}
	if len(r.buf) > 1024 && r.n < len(r.buf)/4 {
		r.resize(len(r.buf) / 2) // give back what a burst grew; half stays free
	}
	return it
}

// resize moves the items to a buffer of size (>= r.n), front first.
func (r *ring) resize(size int) {
	nb := make([]ringItem, size)
	for i := 0; i < r.n; i++ {
		nb[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = nb, 0
}
