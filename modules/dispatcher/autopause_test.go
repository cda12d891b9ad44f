package dispatcher

import (
	"slices"
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
