package dispatcher

import (
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// The rate limit of a dispatcher (its rate-limit and rate-burst keys).
//
// One token bucket (golang.org/x/time/rate) per dispatcher, shared by all
// its (dispatcher, topic) workers on this node: the limit is the sum of
// their pushes, whatever max-in-flight, ordering or batch. A push takes one
// token per message it carries; a batch holds at most rate-burst messages
// while the limit is on, so that a push never needs more tokens than the
// bucket holds. A worker reserves the tokens of its next push before it is
// sent (rate.Limiter.ReserveN, which queues the reservations of all the
// workers in turn) and, when they are not there yet, holds that push (its
// messages taken from ready, not yet attempted) and goes on waiting for
// answers, new data and its stop in its loop until the reservation is due:
// waiting blocks nothing, holds no lock, is not an attempt and starts no
// backoff. A worker that stops (pause, seek, replace, broker stop) while it
// holds a push gives the tokens back (Reservation.CancelAt); its messages
// are sent after the restart as any unfinished ones are.
//
// On a backend shared by several nodes (JetStream) each node has its own
// bucket: a dispatcher's topics are delivered by the nodes holding their
// leases, so the dispatcher's total is at most rate-limit per node that
// delivers some of its topics.

// rateLimiter is the token bucket of one dispatcher with its status.
type rateLimiter struct {
	lim          *rate.Limiter
	limit        float64
	burst        int
	waiting      atomic.Int64 // workers holding a push for tokens
	delayed      atomic.Uint64
	waitedNanos  atomic.Int64 // summed over workers: time pushes were held
	waitedBefore int64        // waitedNanos of the buckets this one replaced
}

// RateStatus is a dispatcher's rate limit as the admin API shows it.
type RateStatus struct {
	// Limit is the rate-limit in messages per second; Burst the bucket's
	// size in messages.
	Limit float64
	Burst int
	// Waiting counts the dispatcher's workers holding a push until its
	// tokens are there.
	Waiting int
	// Delayed counts the pushes held for tokens, and Waited the time they
	// were held, summed over workers (it grows faster than the clock when
	// several wait at once), since the Manager was made.
	Delayed uint64
	Waited  time.Duration
}

// limiterLocked returns the shared bucket of d (nil when its rate limit is
// off), made anew when d's limit or burst changed; the counters carry over
// (m.mu held).
func (m *Manager) limiterLocked(d *Dispatcher) *rateLimiter {
	r, b := d.RateLimit(), d.RateBurst()
	old := m.limiters[d.name]
	if old != nil && old.limit == r && old.burst == b {
		return old.on()
	}
	if old == nil && r <= 0 {
		return nil
	}
	nl := &rateLimiter{limit: r, burst: b}
	if r > 0 {
		nl.lim = rate.NewLimiter(rate.Limit(r), b)
	}
	if old != nil {
		nl.delayed.Store(old.delayed.Load())
		nl.waitedBefore = old.waitedBefore + old.waitedNanos.Load()
	}
	m.limiters[d.name] = nl // kept when off too: its counters
	return nl.on()
}

// on is l, or nil when its limit is off.
func (l *rateLimiter) on() *rateLimiter {
	if l.lim == nil {
		return nil
	}
	return l
}

// RateStatus is the rate limit of the dispatcher named name and whether it
// is on. The counters survive changes of the limit while the Manager runs.
func (m *Manager) RateStatus(name string) (RateStatus, bool) {
	m.mu.Lock()
	l := m.limiters[name]
	m.mu.Unlock()
	if l == nil {
		return RateStatus{}, false
	}
	return RateStatus{Limit: l.limit, Burst: l.burst, Waiting: int(l.waiting.Load()),
		Delayed: l.delayed.Load(), Waited: time.Duration(l.waitedBefore + l.waitedNanos.Load())}, l.limit > 0
}

// RateStatuses returns RateStatus of every dispatcher whose rate limit was
// on at some time since the Manager was made, by name (for metrics).
func (m *Manager) RateStatuses() map[string]RateStatus {
	m.mu.Lock()
	names := make([]string, 0, len(m.limiters))
	for n := range m.limiters {
		names = append(names, n)
	}
	m.mu.Unlock()
	out := make(map[string]RateStatus, len(names))
	for _, n := range names {
		out[n], _ = m.RateStatus(n)
	}
	return out
}

// held is a push waiting for its tokens (worker.held): those of the
// dispatcher's rate limit (res; limited when they made it wait) and of a
// replay rate (rp, replay.go), either nil when not taken.
type held struct {
	unit    []*msg
	res     *rate.Reservation
	rp      *rate.Reservation
	limited bool
	at      time.Time // when the tokens are there
	since   time.Time
}

// reserve takes the tokens of unit's push at now, from the dispatcher's
// rate limit and from the replay rate when they apply; it reports whether
// the push may go at once. Otherwise the push is held (w.held) until
// w.held.at, when both are there.
func (w *worker) reserve(unit []*msg, now time.Time) bool {
	var res *rate.Reservation
	var d time.Duration
	if w.rl != nil {
		// !OK is not reached: takeUnit caps a unit at the burst. Sent
		// rather than held for ever.
		if res = w.rl.lim.ReserveN(now, len(unit)); res.OK() {
			d = res.DelayFrom(now)
		} else {
			res = nil
		}
	}
	rp, dr := w.holdReplay(unit, now)
	if d <= 0 && dr <= 0 {
		return true
	}
	w.held = &held{unit: unit, res: res, rp: rp, limited: d > 0, at: now.Add(max(d, dr)), since: now}
	if d > 0 {
		w.rl.waiting.Add(1)
		w.rl.delayed.Add(1)
	}
	return false
}

// release ends the hold of the held push at now: when sent, it counts the
// time held; when not (the worker stops), the tokens are given back.
func (w *worker) release(now time.Time, sent bool) []*msg {
	h := w.held
	if h == nil {
		return nil
	}
	w.held = nil
	if h.limited {
		w.rl.waiting.Add(-1)
		w.rl.waitedNanos.Add(int64(now.Sub(h.since)))
	}
	if !sent {
		for _, r := range []*rate.Reservation{h.res, h.rp} {
			if r != nil {
				r.CancelAt(now)
			}
		}
	}
	return h.unit
}
