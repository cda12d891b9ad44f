package dispatcher

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Adaptive concurrency of a dispatcher (its adaptive-concurrency key).
//
// With AdaptiveAIMD one limiter per dispatcher, shared by all its
// (dispatcher, topic) workers on this node, bounds the pushes the
// dispatcher has outstanding to its host: their sum over the workers is at
// most the limit, a number between 1 and max-in-flight (and each worker
// still has at most max-in-flight). The endpoint is what gets overloaded,
// and it has one capacity whatever the topics, so the limit is the
// dispatcher's, as the circuit breaker is; a limit per worker would let 50
// topics send 50 times the limit and learn the same lesson 50 times.
//
// The limit moves per answer (additive increase, multiplicative decrease,
// as TCP's congestion window and Netflix concurrency-limits' AIMDLimit):
//
//   - Down, to aimdBackoff times itself (at least 1), on a 429 or 503
//     answer, a timeout, or a normal answer whose round trip is over
//     aimdTolerance times the long-run average round trip (and at least
//     aimdSlowFloor above it): the host is overloaded or queueing. At most
//     once per round of pushes: an answer to a push sent before the last
//     decrease changes nothing (it tells what the old limit did).
//   - Up, by 1/limit (so by one per limit answers, about one per round
//     trip), on a normal answer (ACK or NACK) that was not slow, when the
//     push went out with at least half the limit in use: a limit the
//     workers do not use is not raised.
//   - Other abnormal answers (refused connections, 500, a bad body) leave
//     it where it is: the host is failing, not overloaded; the backoff and
//     the circuit breaker deal with that.
//
// The long-run average is an exponentially weighted mean of the round
// trips of normal answers (weight aimdSmoothing per answer), so a latency
// that rose for good stops counting as a rise after some hundred answers.
// The limit starts at max-in-flight: with aimd a dispatcher never sends
// less than it would without until its host says so.
//
// Under ordering key an answer counts only when it is the first send of
// its messages (no NACK or abnormal answer yet), the circuit breaker's
// rule: a parked key's retries (a payload the consumer keeps answering 503
// to) never lower the limit of every key.
//
// Retry-After keeps its meaning: a push answered 429 or 503 with one
// waits as without aimd (the worker's backoff, at least the time asked
// for); the answer lowers the limit once, like any 429 or 503. Without
// Retry-After, under ordering none, the lowered limit is the answer: while
// the limit was above 1 the messages go again within it and the topic
// does not back off (every 429 would otherwise stop the whole topic for a
// backoff, whatever the limit); at the floor 1 it backs off as without
// aimd, so a host that only answers 503 gets the usual backoff after a
// few rounds. Under ordering key the key waits out its own backoff as
// without aimd (the others go on), and a timeout backs off as always. The
// answer still counts as abnormal everywhere else (max-abnormal-*, the
// breaker, pause-after).
//
// The limiter lives in memory, per node: a restart starts at
// max-in-flight.

// AdaptiveConcurrency is a dispatcher's adaptive-concurrency setting.
type AdaptiveConcurrency string

const (
	// AdaptiveOff keeps max-in-flight a fixed number of pushes per
	// (dispatcher, topic) worker (the default).
	AdaptiveOff AdaptiveConcurrency = "off"
	// AdaptiveAIMD moves the dispatcher's outstanding pushes, over all
	// its topics on this node, between 1 and max-in-flight: additive
	// increase on fast answers, multiplicative decrease on 429, 503,
	// timeouts and rising latency.
	AdaptiveAIMD AdaptiveConcurrency = "aimd"
)

// The AIMD rule's constants.
const (
	// aimdBackoff is the factor of a decrease (Netflix concurrency-limits'
	// AIMDLimit default backoff ratio).
	aimdBackoff = 0.9
	// aimdTolerance: a round trip over this many times the long-run
	// average is a latency rise.
	aimdTolerance = 2.0
	// aimdSlowFloor: and at least this much over it (a loopback consumer's
	// jitter is not a rise).
	aimdSlowFloor = 5 * time.Millisecond
	// aimdSmoothing is the weight of one answer in the long-run average
	// round trip.
	aimdSmoothing = 0.01
)

// ConcurrencyStatus is a dispatcher's adaptive concurrency as the admin
// API shows it.
type ConcurrencyStatus struct {
	// Limit is the most pushes the dispatcher may have outstanding now,
	// over all its topics on this node (1..Max); Max is max-in-flight.
	Limit, Max int
	// InFlight is the pushes outstanding now.
	InFlight int
	// Decreases and Increases count the moves of the limit (an increase
	// is a move of the whole number) since the Manager was made.
	Decreases, Increases uint64
	// RTT is the long-run average round trip of normal answers (0 before
	// the first).
	RTT time.Duration
}

// signal is what one answer says about the host's load.
type signal int

const (
	signalNone     signal = iota // an abnormal answer that is not overload
	signalOK                     // a normal answer
	signalOverload               // 429, 503 or a timeout
)

// aimd is the adaptive concurrency limiter of one dispatcher.
type aimd struct {
	name string
	log  *zap.Logger
	max  int

	mu          sync.Mutex
	limit       float64 // floor(limit) pushes may be outstanding
	inUse       int
	held        map[*worker]int // pushes outstanding per worker
	waiting     map[*worker]bool
	changed     chan struct{} // closed and replaced when a slot frees or the limit moves
	lastDrop    time.Time     // when the limit last went down
	droppedFrom int           // the whole limit before that decrease
	rtt         float64       // long-run average round trip, ns; 0: none yet
	decreases   uint64
	overloads   uint64 // decreases on a 429, 503 or timeout (the others: latency rises)
	increases   uint64
	loggedAt    time.Time
	unlogged    int // decreases since the last log line
}

// newAIMD returns the limiter of a dispatcher with max-in-flight max,
// starting at max.
func newAIMD(name string, max int, log *zap.Logger) *aimd {
	if log == nil {
		log = zap.NewNop()
	}
	return &aimd{name: name, log: log, max: max, limit: float64(max), held: map[*worker]int{},
		waiting: map[*worker]bool{}, changed: make(chan struct{})}
}

// concurrencyLocked returns the shared limiter of d (nil when off), made
// anew when its max-in-flight changed (m.mu held).
func (m *Manager) concurrencyLocked(d *Dispatcher) *aimd {
	if d.AdaptiveConcurrency() != AdaptiveAIMD {
		delete(m.limits, d.name)
		return nil
	}
	if c := m.limits[d.name]; c != nil && c.max == d.MaxInFlight() {
		return c
	}
	c := newAIMD(d.name, d.MaxInFlight(), m.log.With(zap.String("dispatcher", d.name), zap.String("host", d.Host().String())))
	m.limits[d.name] = c
	return c
}

// ConcurrencyStatus is the adaptive concurrency of the dispatcher named
// name and whether it is on and used by a worker yet.
func (m *Manager) ConcurrencyStatus(name string) (ConcurrencyStatus, bool) {
	m.mu.Lock()
	c := m.limits[name]
	m.mu.Unlock()
	if c == nil {
		return ConcurrencyStatus{}, false
	}
	return c.status(), true
}

func (c *aimd) status() ConcurrencyStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ConcurrencyStatus{Limit: c.slotsLocked(), Max: c.max, InFlight: c.inUse,
		Decreases: c.decreases, Increases: c.increases, RTT: time.Duration(c.rtt)}
}

// slotsLocked is the whole number of pushes allowed (c.mu held).
func (c *aimd) slotsLocked() int { return min(c.max, max(1, int(c.limit))) }

// wait returns the channel closed at the next freed slot or move of the
// limit.
func (c *aimd) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// notifyLocked wakes the workers waiting for a slot (c.mu held).
func (c *aimd) notifyLocked() {
	if len(c.waiting) == 0 {
		return
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// take gives w one slot when the limit allows it, and reports whether it
// did; otherwise w waits (wait) for a slot. While other workers wait, w
// may hold no more than its fair share, the limit over the workers holding
// or waiting for slots (at least 1): a worker with a long backlog does not
// keep every slot it frees.
func (c *aimd) take(w *worker) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	slots := c.slotsLocked()
	mine := c.held[w]
	ok := c.inUse < slots
	others := len(c.waiting)
	if c.waiting[w] {
		others--
	}
	if ok && others > 0 {
		users := others + len(c.held)
		if mine == 0 {
			users++
		}
		ok = mine < max(1, slots/users)
	}
	if !ok {
		c.waiting[w] = true
		return false
	}
	delete(c.waiting, w)
	c.inUse++
	c.held[w] = mine + 1
	return true
}

// give returns a slot of w (its push was answered, or not sent after all).
func (c *aimd) give(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.inUse--
	if c.held[w]--; c.held[w] <= 0 {
		delete(c.held, w)
	}
	c.notifyLocked()
}

// leave forgets w's wait (the worker stops).
func (c *aimd) leave(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, w)
	c.notifyLocked()
}

// unwait forgets that w waited for a slot: it is about to look again
// (take puts it back when refused), or has nothing to send, and must not
// hold the others to their fair share meanwhile.
func (c *aimd) unwait(w *worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waiting, w)
}

// inFlight is the pushes outstanding now (for a push's inUse at send).
func (c *aimd) inFlight() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inUse
}

// observe applies one answer at now to the limit: sig, the round trip
// rtt, when its push was sent and how many pushes were outstanding then
// (itself included). It reports whether an overload answer is taken care
// of by the limit (it was above 1 before this answer, or before the
// decrease of this answer's round): then its push need not wait out a
// backoff.
func (c *aimd) observe(sig signal, rtt time.Duration, sent time.Time, inUse int, now time.Time) (absorbed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	slow := false
	if sig == signalOK {
		avg := c.rtt
		slow = avg > 0 && float64(rtt) > aimdTolerance*avg && rtt-time.Duration(avg) >= aimdSlowFloor
		if avg == 0 {
			c.rtt = float64(rtt)
		} else {
			c.rtt += aimdSmoothing * (float64(rtt) - avg)
		}
	}
	switch {
	case sig == signalOverload || slow:
		if sent.Before(c.lastDrop) {
			return c.droppedFrom > 1 // sent under the old limit: already answered by the last decrease
		}
		before := c.slotsLocked()
		c.droppedFrom = before
		c.limit = max(1, c.limit*aimdBackoff)
		c.lastDrop = now
		c.decreases++
		if !slow {
			c.overloads++
		}
		c.unlogged++
		if now.Sub(c.loggedAt) >= time.Second {
			c.log.Info("adaptive concurrency: limit lowered", zap.Int("from", before), zap.Int("limit", c.slotsLocked()),
				zap.Bool("slow", slow), zap.Int("decreases", c.unlogged), zap.Duration("rtt", rtt))
			c.loggedAt, c.unlogged = now, 0
		}
		c.notifyLocked()
		return before > 1
	case sig == signalOK:
		slots := c.slotsLocked()
		if 2*inUse < slots || c.limit >= float64(c.max) {
			return // the limit is not what holds the pushes back
		}
		c.limit = min(float64(c.max), c.limit+1/float64(slots))
		if c.slotsLocked() > slots {
			c.increases++
			c.notifyLocked()
		}
	}
	return false
}

// answerSignal is what r's answer says about the host's load.
func answerSignal(r pushResult) signal {
	if r.err == nil {
		return signalOK
	}
	var ae *AbnormalError
	if errors.As(r.err, &ae) && (ae.StatusCode == http.StatusTooManyRequests || ae.StatusCode == http.StatusServiceUnavailable) {
		return signalOverload
	}
	if isTimeout(r.err) {
		return signalOverload
	}
	return signalNone
}

// isTimeout reports whether err is a push's timeout.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// concurrencyCounts says whether r's answer counts for the limit: always,
// but under OrderKey only when every message of it was sent for the first
// time (a parked key's retries do not count).
func (w *worker) concurrencyCounts(r pushResult) bool {
	if w.kw == nil {
		return true
	}
	for _, m := range r.ms {
		if m.attempts > 1 {
			return false
		}
	}
	return true
}

// noteConcurrency feeds r's answer to the dispatcher's limiter, if any.
// It reports whether r is a 429 or 503 without Retry-After that the
// limit took care of (observe): under ordering none its messages are
// then sent again within the lowered limit instead of after a backoff of
// the whole topic.
func (w *worker) noteConcurrency(r pushResult) (absorbed bool) {
	if w.cc == nil || r.sent.IsZero() || !w.concurrencyCounts(r) {
		return false
	}
	now := time.Now()
	sig := answerSignal(r)
	absorbed = w.cc.observe(sig, now.Sub(r.sent), r.sent, r.inUse, now)
	var ae *AbnormalError
	return absorbed && errors.As(r.err, &ae) && ae.RetryAfter <= 0 && !isTimeout(r.err)
}

// takeSlot takes a slot of the limiter for the next push (true without
// one).
func (w *worker) takeSlot() bool {
	return w.cc == nil || w.cc.take(w)
}

// giveSlot gives back a slot taken for a push (nothing without a
// limiter).
func (w *worker) giveSlot() {
	if w.cc != nil {
		w.cc.give(w)
	}
}

// answered counts a push's answer out of flight: its slot goes back.
func (w *worker) answered() {
	w.outstanding.Add(-1)
	w.giveSlot()
}

// concurrencyWait is the channel closed when a slot may be free (nil
// without a limiter: never).
func (w *worker) concurrencyWait() <-chan struct{} {
	if w.cc == nil {
		return nil
	}
	return w.cc.wait()
}
