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
// pause is recorded with reason PauseAuto and its time; the Manager's
// pause hook (SetPauseHook: the admin module's durable pause record) is
// told. A resume starts the count again.

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

// SetPauseHook sets fn, called (on a goroutine of its own, after the
// pause) each time a dispatcher pauses itself (pause-after), with its
// name and PauseInfo. The admin module stores the pause with it. Set it
// before Start.
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

// autoPause pauses the dispatcher d (pause-after) unless it was changed,
// removed or paused meanwhile. It runs on a goroutine of its own: Pause
// waits for the workers, one of which noticed.
func (m *Manager) autoPause(d *Dispatcher, since time.Time) {
	defer m.wg.Done()
	m.liveMu.Lock()
	cur, ok := m.set.Get(d.name)
	m.mu.Lock()
	if !ok || cur != d || m.paused[d.name] || m.state != stateStarted {
		m.mu.Unlock()
		m.liveMu.Unlock()
		return
	}
	info := PauseInfo{Reason: PauseAuto, At: time.Now()}
	m.paused[d.name], m.pauseInfo[d.name] = true, info
	hook := m.pauseHook
	m.mu.Unlock()
	m.stopWorkers(func(k workerKey) bool { return k.dispatcher == d.name })
	m.liveMu.Unlock()
	m.log.Warn("dispatcher paused automatically: its endpoint failed without a success for pause-after; resume it once the consumer is back",
		zap.String("dispatcher", d.name), zap.String("host", d.Host().String()), zap.Duration("pause-after", d.PauseAfter()),
		zap.Time("failing-since", since))
	if hook != nil {
		hook(d.name, info)
	}
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
			go w.m.autoPause(w.d, since)
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
