package dispatcher

import (
	"container/heap"
	"sync"
	"time"

	"go.uber.org/zap"
)

// The circuit breaker of a dispatcher (its breaker-failures and
// breaker-cooloff keys).
//
// One breaker per dispatcher (one dispatcher pushes to one host), shared by
// all its (dispatcher, topic) workers on this node. Closed, every push goes
// as usual and the breaker counts consecutive abnormal answers (timeouts,
// refused connections, 5xx, 429: anything but an ACK or a NACK) over all
// the workers; any normal answer sets the count back to 0. At
// breaker-failures it opens: no worker starts a push to the host (pushes
// already in flight finish; their abnormal answers are not counted again)
// until the cool-off is over. Waiting is not an attempt and counts against
// no message's max-abnormal-attempts. Then it is half-open: exactly one
// worker sends one push, the probe; the others keep waiting. A normal
// answer to the probe (or to any push still in flight) closes it: the
// cool-off starts again at its first value, every worker's own backoff is
// dropped (and, under ordering key, the keys parked after an abnormal
// answer are due at once), so delivery resumes at once. An abnormal answer
// to the probe opens it again for twice the last cool-off, at most the
// broker's backoff-max. The first cool-off is breaker-cooloff (default: the
// broker's backoff-initial).
//
// Under ordering key a parked key's retries count once: an answer counts
// only when it is the first abnormal answer of one of its messages, so a
// single failing key (a poison payload the consumer keeps answering 500
// to) never opens the breaker for every other key; the signal is
// breaker-failures consecutive keys failing. Under ordering topic or none
// every abnormal answer counts: the head's retries are the only pushes
// there are.
//
// Every transition is a log line ("circuit breaker open", "half-open",
// "closed") with the dispatcher and its host. The breaker lives in memory:
// a restart starts closed (and the first failures open it again).

// BreakerState is the state of a dispatcher's circuit breaker.
type BreakerState string

// The breaker's states.
const (
	BreakerClosed   BreakerState = "closed"    // pushes go as usual
	BreakerOpen     BreakerState = "open"      // no push until NextProbe
	BreakerHalfOpen BreakerState = "half-open" // one probe push, the others wait
)

// BreakerStatus is a dispatcher's circuit breaker as the admin API shows
// it.
type BreakerStatus struct {
	State BreakerState
	// Failures is the count of consecutive abnormal answers while closed.
	Failures int
	// Cooloff is the cool-off of the current (or last failed-probe)
	// opening; while closed, the one the next opening takes (the first
	// cool-off). NextProbe is when it ends (open only; zero otherwise).
	Cooloff   time.Duration
	NextProbe time.Time
	// Opened counts the openings (from closed or after a failed probe)
	// and Probes the probe pushes sent, since the Manager was made.
	Opened, Probes uint64
}

// breaker is the circuit breaker of one dispatcher.
type breaker struct {
	name, host string
	log        *zap.Logger
	threshold  int
	first, max time.Duration

	mu       sync.Mutex
	state    BreakerState
	failures int
	cooloff  time.Duration
	probeAt  time.Time
	prober   *worker       // half-open: the worker whose probe is out (nil: none yet)
	changed  chan struct{} // closed and replaced at every change a waiting worker must see
	closings uint64        // times it closed: each worker drops its backoff once per closing
	opened   uint64
	probes   uint64
}

// breakerLocked returns the shared breaker of d (nil when off), made anew
// when d's breaker settings changed (m.mu held).
func (m *Manager) breakerLocked(d *Dispatcher) *breaker {
	n := d.BreakerFailures()
	if n <= 0 {
		delete(m.breakers, d.name)
		return nil
	}
	first := m.firstCooloff(d)
	mx := max(m.opts.BackoffMax, first)
	if b := m.breakers[d.name]; b != nil && b.threshold == n && b.first == first && b.host == d.Host().String() {
		return b
	}
	b := &breaker{name: d.name, host: d.Host().String(), log: m.log.With(zap.String("dispatcher", d.name), zap.String("host", d.Host().String())),
		threshold: n, first: first, max: mx, state: BreakerClosed, cooloff: first, changed: make(chan struct{})}
	m.breakers[d.name] = b
	return b
}

// firstCooloff is d's first cool-off: breaker-cooloff, or the broker's
// backoff-initial when unset.
func (m *Manager) firstCooloff(d *Dispatcher) time.Duration {
	if c := d.BreakerCooloff(); c > 0 {
		return c
	}
	return m.opts.BackoffInitial
}

// BreakerStatus is the circuit breaker of the dispatcher named name and
// whether it is on. While closed, Cooloff is the one the next opening
// would take; a breaker no worker has used yet (no topic matched, or
// paused since the start) is closed with the configured first cool-off.
func (m *Manager) BreakerStatus(name string) (BreakerStatus, bool) {
	m.mu.Lock()
	b := m.breakers[name]
	m.mu.Unlock()
	if b == nil {
		d, ok := m.set.Get(name)
		if !ok || d.BreakerFailures() <= 0 {
			return BreakerStatus{}, false
		}
		return BreakerStatus{State: BreakerClosed, Cooloff: m.firstCooloff(d)}, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tickLocked(time.Now())
	st := BreakerStatus{State: b.state, Failures: b.failures, Cooloff: b.cooloff, Opened: b.opened, Probes: b.probes}
	if b.state == BreakerOpen {
		st.NextProbe = b.probeAt
	}
	return st, true
}

// notifyLocked wakes the workers waiting for a change (b.mu held).
func (b *breaker) notifyLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// wait returns the channel closed at the next change, and the number of
// closings so far.
func (b *breaker) wait() (<-chan struct{}, uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed, b.closings
}

// tickLocked turns an open breaker whose cool-off is over half-open
// (b.mu held).
func (b *breaker) tickLocked(now time.Time) {
	if b.state == BreakerOpen && !now.Before(b.probeAt) {
		b.state, b.prober = BreakerHalfOpen, nil
		b.log.Info("circuit breaker half-open: one probe push", zap.Duration("cooloff", b.cooloff))
	}
}

// gate says whether w may start a push now: pass when closed, or when w
// just became the prober (probe); otherwise wake is when to look again
// (zero: at the next change).
func (b *breaker) gate(w *worker, now time.Time) (pass, probe bool, wake time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tickLocked(now)
	switch b.state {
	case BreakerClosed:
		return true, false, time.Time{}
	case BreakerOpen:
		return false, false, b.probeAt
	}
	if b.prober != nil {
		return false, false, time.Time{}
	}
	b.prober = w
	b.probes++
	return true, true, time.Time{}
}

// abandon gives the probe back when w claimed it but sent nothing, or
// stops before its answer: another worker may probe.
func (b *breaker) abandon(w *worker) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == BreakerHalfOpen && b.prober == w {
		b.prober = nil
		b.notifyLocked()
	}
}

// success records a normal answer (ACK or NACK): the breaker closes.
func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failures = 0
	if b.state == BreakerClosed {
		return
	}
	b.state, b.prober, b.cooloff = BreakerClosed, nil, b.first
	b.closings++
	b.log.Info("circuit breaker closed: the host answers again")
	b.notifyLocked()
}

// failure records an abnormal answer at now: probe says it answered the
// probe, counts whether it counts towards opening (ordering key: a
// message's first abnormal answer only).
func (b *breaker) failure(probe, counts bool, now time.Time, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		if !counts {
			return
		}
		b.failures++
		if b.failures < b.threshold {
			return
		}
		b.cooloff = b.first
	case BreakerHalfOpen:
		if !probe {
			return // a push started before it opened
		}
		b.cooloff = min(2*b.cooloff, b.max)
	default:
		return // open: pushes still in flight when it opened
	}
	b.state, b.prober, b.probeAt = BreakerOpen, nil, now.Add(b.cooloff)
	b.opened++
	b.log.Warn("circuit breaker open: no push to the host until the probe", zap.Int("failures", b.failures),
		zap.Duration("cooloff", b.cooloff), zap.Time("next-probe", b.probeAt), zap.Error(err))
	b.failures = 0
	b.notifyLocked()
}

// breakerGate is the breaker's say on w's next push at now: pass, or when
// to look again (zero: at the next change or answer). A breaker that
// closed since w last looked drops w's own backoff; while it is open w
// shows the probe time as its next retry.
func (w *worker) breakerGate(now time.Time) (pass bool, wake time.Time) {
	if w.br == nil {
		return true, time.Time{}
	}
	if _, c := w.br.wait(); c != w.brClosings {
		w.brClosings = c
		w.retryUntil = time.Time{}
		w.retryAt.Store(0)
		w.bo.Reset()
		w.backingOff.Store(false)
		if w.kw != nil {
			w.unparkAbnormal(now)
		}
	}
	if w.probing {
		return false, time.Time{} // the probe is out: its answer decides
	}
	if len(w.ready) == 0 && w.held == nil {
		return true, time.Time{} // nothing to send: no probe to claim
	}
	pass, probe, wake := w.br.gate(w, now)
	if !pass {
		if !wake.IsZero() {
			w.retryAt.Store(wake.UnixNano())
			w.backingOff.Store(true)
		}
		return false, wake
	}
	if probe {
		// The breaker's schedule replaces the worker's own backoff.
		w.probeClaim = true
		w.retryUntil = time.Time{}
	}
	return true, time.Time{}
}

// unparkAbnormal makes the keys parked after an abnormal answer due now
// (the breaker closed: the host answers).
func (w *worker) unparkAbnormal(now time.Time) {
	changed := false
	for _, m := range w.kw.parked {
		if m.abnormals > 0 && m.retryAt.After(now) {
			m.retryAt = now
			changed = true
		}
	}
	if changed {
		heap.Init(&w.kw.parked)
		w.kw.dirty = true
	}
}
