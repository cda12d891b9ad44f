package dispatcher

import (
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Auto-pause (a dispatcher's pause-after key).
//
// A dispatcher whose endpoint has answered only abnormally for pause-after
// (no ACK or NACK from any of its topic workers on this node since the
// first abnormal answer after the last normal one) is paused, exactly as
// an admin pause does: its workers stop, finished messages are committed,
// nothing is skipped or dead-lettered, and a resume delivers from the
// checkpoints. It happens at the first abnormal answer at or past
// pause-after (so up to one backoff, or breaker cool-off, later). The
// pause is recorded with reason PauseAuto and its time. The Manager's
// pause hook (SetPauseHook: the admin module's durable pause record) is
// told first, and the pause applies once it has returned: when the status
// says paused, the record is stored, so a crash right then keeps the
// pause (as an admin pause is stored before it applies). While the hook
// runs the pause is pending (PausePending) and the workers still deliver;
// a Pause, Resume or Remove meanwhile cancels it. A resume starts the
// count again, and so does a restart: the failing time lives in memory
// only (nothing is written per failure), while the pause itself is
// durable through the hook.

// PauseReason says who paused a dispatcher.
type PauseReason string

// The reasons of a pause.
const (
	PauseAdmin PauseReason = "admin" // the admin API, the CLI, the status page, a stored pause
	PauseAuto  PauseReason = "auto"  // pause-after: the endpoint failed that long
)

// PauseInfo is why and since when a dispatcher is paused.
type PauseInfo struct {
	Reason PauseReason
	At     time.Time
}

// health is the auto-pause state of one dispatcher, shared by its workers.
type health struct {
	after        time.Duration
	failingSince atomic.Int64 // Unix ns of the first abnormal answer since the last normal one; 0: none
	pausing      atomic.Bool  // the auto-pause was started
}

// healthLocked returns the shared auto-pause state of d (nil when its
// pause-after is off), made anew when pause-after changed (m.mu held).
func (m *Manager) healthLocked(d *Dispatcher) *health {
	after := d.PauseAfter()
	if after <= 0 {
		delete(m.health, d.name)
		return nil
	}
	if h := m.health[d.name]; h != nil && h.after == after {
		return h
	}
	h := &health{after: after}
	m.health[d.name] = h
	return h
}

// normal records a normal answer: the endpoint works.
func (h *health) normal() {
	if h.failingSince.Load() != 0 {
		h.failingSince.Store(0)
	}
}

// abnormal records an abnormal answer at now; it reports whether the
// dispatcher is to be paused now (true once) and since when it failed.
func (h *health) abnormal(now time.Time) (pause bool, since time.Time) {
	h.failingSince.CompareAndSwap(0, now.UnixNano())
	since = time.Unix(0, h.failingSince.Load())
	if now.Sub(since) < h.after {
		return false, since
	}
	return h.pausing.CompareAndSwap(false, true), since
}

// autoPending is an automatic pause decided and not applied yet: the
// pause hook runs.
type autoPending struct {
	info PauseInfo
	h    *health
}

// SetPauseHook sets fn, called each time a dispatcher pauses itself
// (pause-after), with its name and PauseInfo, on a goroutine of its own
// and before the pause applies: the dispatcher is reported paused, and its
// workers stop, once fn has returned. The admin module stores the pause
// with it, so that a paused status is a stored pause. While fn runs the
// pause is pending: a Pause, Resume or Remove meanwhile cancels it
// (PausePending then reports false) and it never applies, so fn checks
// PausePending under the lock that orders its record with theirs and
// stores nothing for a cancelled pause. Set it before Start.
func (m *Manager) SetPauseHook(fn func(name string, info PauseInfo)) {
	m.mu.Lock()
	m.pauseHook = fn
	m.mu.Unlock()
}

// PauseInfo is why and since when the dispatcher named name is paused;
// false when it is not paused.
func (m *Manager) PauseInfo(name string) (PauseInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.paused[name] {
		return PauseInfo{}, false
	}
	return m.pauseInfo[name], true
}

// PausePending is the automatic pause of the dispatcher named name that
// was decided and does not apply yet, while the pause hook runs (see
// SetPauseHook); false when there is none: none was decided, it applied,
// or a Pause, Resume or Remove cancelled it.
func (m *Manager) PausePending(name string) (PauseInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.autoPausing[name]
	if p == nil {
		return PauseInfo{}, false
	}
	return p.info, true
}

// cancelAutoPauseLocked cancels the pending automatic pause of name, if
// any (m.mu held); with reset its failing time counts again from the next
// abnormal answer (a resume: the workers go on with that health).
func (m *Manager) cancelAutoPauseLocked(name string, reset bool) {
	p := m.autoPausing[name]
	if p == nil {
		return
	}
	delete(m.autoPausing, name)
	if reset {
		p.h.failingSince.Store(0)
		p.h.pausing.Store(false)
	}
}

// autoPause pauses the dispatcher d (pause-after) unless it was changed,
// removed or paused meanwhile; then it gives h's pause back, so that the
// next abnormal answer at or past pause-after (of a replacement sharing h)
// starts it again. The pause hook runs first, the pause pending meanwhile;
// the pause then applies unless it was cancelled (a Pause, Resume or
// Remove). It runs on a goroutine of its own: the hook may wait for the
// disk, and applying it waits for the workers, one of which noticed.
func (m *Manager) autoPause(d *Dispatcher, h *health, since time.Time) {
	defer m.wg.Done()
	m.liveMu.Lock()
	cur, ok := m.set.Get(d.name)
	m.mu.Lock()
	if !ok || cur != d || m.paused[d.name] || m.autoPausing[d.name] != nil || m.state != stateStarted {
		h.pausing.Store(false)
		m.mu.Unlock()
		m.liveMu.Unlock()
		return
	}
	p := &autoPending{info: PauseInfo{Reason: PauseAuto, At: time.Now()}, h: h}
	m.autoPausing[d.name] = p
	hook := m.pauseHook
	m.mu.Unlock()
	m.liveMu.Unlock()
	// Not under liveMu: the admin module takes its own lock before the
	// Manager's live changes, and the hook takes it too.
	if hook != nil {
		hook(d.name, p.info)
	}
	m.liveMu.Lock()
	defer m.liveMu.Unlock()
	m.mu.Lock()
	if m.autoPausing[d.name] != p {
		m.mu.Unlock() // cancelled: paused, resumed or removed meanwhile
		return
	}
	delete(m.autoPausing, d.name)
	// Applied to the dispatcher of that name, even one replaced meanwhile:
	// the pause is stored.
	m.paused[d.name], m.pauseInfo[d.name] = true, p.info
	m.mu.Unlock()
	m.stopWorkers(func(k workerKey) bool { return k.dispatcher == d.name })
	m.log.Warn("dispatcher paused automatically: its endpoint failed without a success for pause-after; resume it once the consumer is back",
		zap.String("dispatcher", d.name), zap.String("host", d.Host().String()), zap.Duration("pause-after", d.PauseAfter()),
		zap.Time("failing-since", since))
}

// noteHealth tells the dispatcher's auto-pause state of an answer; an
// abnormal one at or past pause-after starts the pause.
func (w *worker) noteHealth(normal bool, now time.Time) {
	if w.hl == nil {
		return
	}
	if normal {
		w.hl.normal()
		return
	}
	if pause, since := w.hl.abnormal(now); pause {
		w.m.mu.Lock()
		started := w.m.state == stateStarted
		if started {
			w.m.wg.Add(1)
		}
		w.m.mu.Unlock()
		if started {
			go w.m.autoPause(w.d, w.hl, since)
		}
	}
}

// PauseAs pauses the dispatcher named name as Pause does, recording
// reason and at (a pause restored from the durable record keeps its
// original reason and time). On a paused dispatcher it only updates the
// record. Error: ErrUnknownDispatcher.
func (m *Manager) PauseAs(name string, reason PauseReason, at time.Time) error {
	if err := m.Pause(name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.paused[name] {
		return fmt.Errorf("dispatcher: %s resumed meanwhile", name)
	}
	m.pauseInfo[name] = PauseInfo{Reason: reason, At: at}
	return nil
}
