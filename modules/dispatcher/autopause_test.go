package dispatcher

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pause-after 1s with a dead consumer (every push 503): the dispatcher
// pauses itself (reason auto, the hook told once), nothing committed,
// skipped or dead-lettered; with the consumer back nothing is pushed
// until the resume, which delivers every message once, in order. A
// dispatcher without pause-after on the same dead consumer stays unpaused
// (the negative control).
func TestAutoPauseAfterFailingThenResume(t *testing.T) {
	const per = 5
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(per)
	f := &flaky{}
	d := New("d", testHost(t), MustPattern("t")).WithPauseAfter(time.Second)
	plain := New("plain", testHost(t), MustPattern("t"))
	hooked := make(chan PauseInfo, 4)
	set, err := SetOf(d, plain)
	if err != nil {
		t.Fatal(err)
	}
	src := newMemSource(tp)
	m := NewManager(set, src, f, testOptions(), nil)
	m.SetPauseHook(func(name string, info PauseInfo) {
		if name == "d" {
			hooked <- info
		}
	})
	start := time.Now()
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m) })
	eventually(t, "d paused itself", func() bool { return m.Paused("d") })
	info, paused := m.PauseInfo("d")
	if !paused || info.Reason != PauseAuto || info.At.Sub(start) < time.Second {
		t.Fatalf("pause info %+v (paused %v): want reason auto, at least 1 s after the start", info, paused)
	}
	select {
	case h := <-hooked:
		if h != info {
			t.Errorf("hook got %+v, status %+v", h, info)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("pause hook not called")
	}
	if m.Paused("plain") {
		t.Error("plain (no pause-after) paused too")
	}
	if st := status(m, "d", "t"); st.Committed != 0 || st.Skipped != 0 || st.Exhausted != 0 || st.DeadLettered != 0 {
		t.Errorf("auto-paused worker %+v: want nothing committed, skipped or dead-lettered", st)
	}
	f.up.Store(true)
	waitCommitted(t, m, "plain", "t", per)
	time.Sleep(50 * time.Millisecond) // a paused dispatcher pushes nothing meanwhile
	arrived, _ := f.snapshot()
	for _, a := range arrived {
		if a.up && a.disp == "d" {
			t.Fatalf("d pushed offset %d while paused", a.offset)
		}
	}
	if err := m.Resume("d"); err != nil {
		t.Fatal(err)
	}
	if _, paused := m.PauseInfo("d"); paused {
		t.Error("still paused after the resume")
	}
	waitCommitted(t, m, "d", "t", per)
	if len(hooked) != 0 {
		t.Errorf("hook called again: %+v", <-hooked)
	}
	arrived, _ = f.snapshot()
	var acked []int64
	for _, a := range arrived {
		if a.up && a.disp == "d" {
			acked = append(acked, a.offset)
		}
	}
	if want := []int64{0, 1, 2, 3, 4}; !slices.Equal(acked, want) {
		t.Errorf("after the resume d pushed %v, want %v", acked, want)
	}
}

// An auto-pause that lost the race with a replace. A worker of d decides
// to pause (pause-after reached) while a live change holds the manager
// (Replace swaps d for d2, same pause-after, whose workers share the
// failing time); the pause goroutine then finds d2 in the set and gives
// up, as it must. d2 must still pause itself at its next abnormal answer
// at or past pause-after: before the fix the pause stayed marked as
// started and d2 kept failing unpaused for ever.
func TestAutoPauseAfterAReplaceWonTheRace(t *testing.T) {
	const after = 200 * time.Millisecond
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(3)
	f := &flaky{}
	d := New("d", testHost(t), MustPattern("t")).WithPauseAfter(after)
	set, err := SetOf(d)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(set, newMemSource(tp), f, testOptions(), nil)
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m) })

	// Hold the manager as a live change does, until d's worker has
	// started the pause (its goroutine now waits for the manager).
	m.liveMu.Lock()
	eventually(t, "d's worker started the pause", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		h := m.health["d"]
		return h != nil && h.pausing.Load()
	})
	d2 := New("d", testHost(t), MustPattern("t")).WithPauseAfter(after)
	if _, err := m.set.Put(d2); err != nil { // what Replace does while it holds the manager
		m.liveMu.Unlock()
		t.Fatal(err)
	}
	m.liveMu.Unlock()
	// The pause goroutine finds d2, not d, and does nothing; the proper
	// replace restarts the workers with d2.
	if err := m.Replace(d2); err != nil {
		t.Fatal(err)
	}
	eventually(t, "d2 paused itself", func() bool { return m.Paused("d") })
	if info, _ := m.PauseInfo("d"); info.Reason != PauseAuto {
		t.Errorf("pause reason %q, want auto", info.Reason)
	}
	if st := status(m, "d", "t"); st.Committed != 0 || st.Skipped != 0 || st.DeadLettered != 0 {
		t.Errorf("worker %+v: want nothing committed, skipped or dead-lettered", st)
	}
}

// holdingSender answers 503 to every push of topic "a", the first only
// once the push of topic "b" is out; that push (every push of "b") is
// held until release closes or its context ends: a worker slow to stop.
type holdingSender struct {
	bOut    chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *holdingSender) Send(ctx context.Context, d Delivery) (Outcome, error) {
	if d.Topic == "b" {
		s.once.Do(func() { close(s.bOut) })
		select {
		case <-s.release:
		case <-ctx.Done():
		}
		return "", &AbnormalError{StatusCode: 503, Reason: "held, then down"}
	}
	select {
	case <-s.bOut:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return "", &AbnormalError{StatusCode: 503, Reason: "consumer down"}
}

// An automatic pause is stored (the pause hook has returned) before the
// dispatcher is reported paused, even while one of its workers is slow to
// stop (a push in flight, waited for during the stop grace): a crash right
// after the status said paused keeps the pause. The hook runs while the
// pause is pending (PausePending) and not yet reported; once it applies,
// every worker of the dispatcher stops. Before the fix the hook ran only
// after every worker had ended, so the status said paused for the whole
// grace with nothing stored.
func TestAutoPauseStoredBeforeReportedPaused(t *testing.T) {
	const after = 100 * time.Millisecond
	ta, tb := newMemTopic(t, t.TempDir(), "a"), newMemTopic(t, t.TempDir(), "b")
	ta.publish(2)
	tb.publish(2)
	s := &holdingSender{bOut: make(chan struct{}), release: make(chan struct{})}
	d := New("d", testHost(t), MustPattern("a"), MustPattern("b")).WithPauseAfter(after)
	set, err := SetOf(d)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	opts.StopGrace = time.Minute // b's worker waits for its push while it stops
	opts.DefaultTimeout = time.Minute
	m := NewManager(set, newMemSource(ta, tb), s, opts, nil)
	type call struct {
		info            PauseInfo
		paused, pending bool
		pendingInfo     PauseInfo
	}
	calls := make(chan call, 4)
	var hookDone atomic.Bool
	m.SetPauseHook(func(name string, info PauseInfo) {
		c := call{info: info, paused: m.Paused(name)}
		c.pendingInfo, c.pending = m.PausePending(name)
		calls <- c
		hookDone.Store(true)
	})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m) })
	var released sync.Once
	release := func() { released.Do(func() { close(s.release) }) }
	t.Cleanup(release) // before the stop: the held push ends

	eventually(t, "d paused itself", func() bool { return m.Paused("d") })
	if !hookDone.Load() {
		t.Fatal("d reported paused before the pause hook returned: a crash now loses the pause")
	}
	c := <-calls
	if c.paused {
		t.Error("the hook ran with d already reported paused")
	}
	if !c.pending || c.pendingInfo != c.info {
		t.Errorf("in the hook PausePending = %+v, %v; want %+v, true", c.pendingInfo, c.pending, c.info)
	}
	info, _ := m.PauseInfo("d")
	if info != c.info || info.Reason != PauseAuto {
		t.Errorf("pause info %+v, hook told %+v; want the same, reason auto", info, c.info)
	}
	if _, pending := m.PausePending("d"); pending {
		t.Error("PausePending still true once the pause applied")
	}
	release()
	eventually(t, "every worker of d stopped", func() bool {
		for _, st := range m.Status() {
			if st.Dispatcher == "d" {
				return false
			}
		}
		return true
	})
	if len(calls) != 0 {
		t.Errorf("hook called again: %+v", <-calls)
	}
	if st := status(m, "d", "a"); st.Committed != 0 {
		t.Errorf("a committed %d, want 0", st.Committed)
	}
}

// A resume while the pause hook stores an automatic pause cancels it: the
// dispatcher never reports paused, PausePending is false once the hook
// sees the resume, its workers go on, and its failing time counts again
// from the resume, so that it pauses itself again pause-after later.
func TestAutoPauseCancelledByResumeDuringTheHook(t *testing.T) {
	const after = 100 * time.Millisecond
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(3)
	f := &flaky{}
	d := New("d", testHost(t), MustPattern("t")).WithPauseAfter(after)
	set, err := SetOf(d)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(set, newMemSource(tp), f, testOptions(), nil)
	entered, proceed := make(chan PauseInfo, 4), make(chan struct{}, 4)
	type seen struct {
		pending bool
		paused  bool
	}
	after1 := make(chan seen, 4)
	m.SetPauseHook(func(name string, info PauseInfo) {
		entered <- info
		<-proceed
		_, pending := m.PausePending(name)
		after1 <- seen{pending: pending, paused: m.Paused(name)}
	})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m) })
	t.Cleanup(func() { close(proceed) })

	first := recv(t, "the pause hook", entered)
	resumedAt := time.Now()
	if err := m.Resume("d"); err != nil { // not paused: cancels the pending pause
		t.Fatal(err)
	}
	proceed <- struct{}{}
	if s := recv(t, "the end of the hook", after1); s.pending || s.paused {
		t.Errorf("after the resume, in the hook: pending %v, paused %v; want neither", s.pending, s.paused)
	}
	// The cancelled pause never applies; the worker keeps delivering
	// (failing) and pauses again, pause-after from the resume.
	second := recv(t, "the second pause", entered)
	if second.At.Sub(resumedAt) < after {
		t.Errorf("paused again %s after the resume, before pause-after %s", second.At.Sub(resumedAt), after)
	}
	if m.Paused("d") {
		t.Error("d reported paused while its second pause is being stored")
	}
	proceed <- struct{}{}
	recv(t, "the end of the second hook", after1)
	eventually(t, "d paused itself the second time", func() bool { return m.Paused("d") })
	if info, _ := m.PauseInfo("d"); info != second || first == second {
		t.Errorf("pause info %+v, want the second pause %+v (the first %+v was cancelled)", info, second, first)
	}
}

// recv waits for a value of ch for up to 15 s (a bound, not a measure).
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}
