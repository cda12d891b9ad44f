package dispatcher

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// flaky is a PushSender whose consumer is down (every push answered
// 503) until up is set, then ACKs everything; fail, when set, says which
// deliveries are answered 500 even while up. It records every push that
// reached it and the most pushes it saw at once.
type flaky struct {
	up   atomic.Bool
	fail func(Delivery) bool

	mu      sync.Mutex
	arrived []flakyArrival
	now     int // pushes in progress
	most    int // the most at once while down
}

type flakyArrival struct {
	at     time.Time
	topic  string
	offset int64
	key    string
	up     bool
	disp   string
}

func (f *flaky) Send(ctx context.Context, d Delivery) (Outcome, error) {
	a, err := f.Push(ctx, Push{Messages: []Delivery{d}})
	if err != nil {
		return "", err
	}
	return a.Outcomes[0], nil
}

func (f *flaky) Push(ctx context.Context, p Push) (Answer, error) {
	up := f.up.Load()
	f.mu.Lock()
	for _, d := range p.Messages {
		f.arrived = append(f.arrived, flakyArrival{at: time.Now(), topic: d.Topic, offset: d.Offset, key: d.Key, up: up, disp: d.Dispatcher.Name()})
	}
	f.now++
	if !up {
		f.most = max(f.most, f.now)
	}
	f.mu.Unlock()
	// Long enough for another worker's push to overlap, were it sent.
	time.Sleep(2 * time.Millisecond)
	f.mu.Lock()
	f.now--
	f.mu.Unlock()
	if !up || f.fail != nil && f.fail(p.Messages[0]) {
		return Answer{}, &AbnormalError{StatusCode: 503, Reason: "consumer down"}
	}
	out := make([]Outcome, len(p.Messages))
	for i := range out {
		out[i] = ACK
	}
	return Answer{Status: 200, Outcomes: out}, nil
}

func (f *flaky) snapshot() ([]flakyArrival, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.arrived), f.most
}

// A consumer down, then back, behind a breaker of 3 failures and a
// cool-off of 100 ms (backoff-max 20 ms: the cool-off stays 100 ms), with
// three topics of one dispatcher: while it is down at most the 3 failures
// that open it, the pushes already in flight then (2) and one probe per
// cool-off reach it, never two at once; once it is back the next probe
// closes the breaker, delivery resumes within a cool-off (1 s of slack),
// and every message is ACKed exactly once, in order, none skipped. The
// same load without the breaker reaches the dead consumer many times more
// (the negative control).
func TestBreakerOneProbePerCooloffThenResumes(t *testing.T) {
	const (
		per     = 20
		cooloff = 100 * time.Millisecond
		down    = time.Second
	)
	topics := []string{"t.a", "t.b", "t.c"}
	run := func(t *testing.T, breaker bool) (*flaky, *Manager, time.Time) {
		var tps []*memTopic
		for _, n := range topics {
			tp := newMemTopic(t, t.TempDir(), n)
			tp.publish(per)
			tps = append(tps, tp)
		}
		d := New("d", testHost(t), MustPattern("t.*"))
		if breaker {
			d = d.WithBreaker(3, cooloff)
		}
		if err := d.Validate(); err != nil {
			t.Fatal(err)
		}
		f := &flaky{}
		m := startWith(t, f, testOptions(), tps, d)
		time.Sleep(down)
		upAt := time.Now()
		f.up.Store(true)
		for _, n := range topics {
			waitCommitted(t, m, "d", n, per)
		}
		return f, m, upAt
	}

	f, m, upAt := run(t, true)
	arrived, most := f.snapshot()
	st, on := m.BreakerStatus("d")
	if !on || st.State != BreakerClosed {
		t.Fatalf("breaker after recovery: %+v (on %v), want closed", st, on)
	}
	var whileDown int
	firstUp := time.Time{}
	for _, a := range arrived {
		if !a.up {
			whileDown++
		} else if firstUp.IsZero() {
			firstUp = a.at
		}
	}
	// Each probe while down failed and opened it again: the openings are
	// the first one plus one per failed probe, and the last probe (after
	// the consumer came back) closed it.
	maxProbes := int(down/cooloff) + 2
	t.Logf("breaker: %d pushes while down (%d probes, %d openings, at most %d at once); first push after the consumer came back %s later",
		whileDown, st.Probes, st.Opened, most, firstUp.Sub(upAt))
	if st.Opened < 2 || st.Probes < 2 {
		t.Errorf("openings %d, probes %d: want the breaker to open and probe more than once in %s", st.Opened, st.Probes, down)
	}
	if int(st.Probes) > maxProbes {
		t.Errorf("%d probes in %s: more than one per cool-off of %s (at most %d)", st.Probes, down, cooloff, maxProbes)
	}
	if whileDown > 3+2+int(st.Probes) {
		t.Errorf("%d pushes reached the dead consumer: more than 3 failures + 2 in flight + %d probes", whileDown, st.Probes)
	}
	if most > 3 {
		t.Errorf("%d pushes at once while down", most)
	}
	if d := firstUp.Sub(upAt); d > cooloff+time.Second {
		t.Errorf("delivery resumed %s after the consumer came back: want within a cool-off (%s, plus 1 s of slack)", d, cooloff)
	}
	// The probes alone while open: after the first opening's stragglers no
	// two pushes overlap. Pushes while down that overlapped were at most
	// the three workers' first pushes.
	checkDelivered(t, arrived, topics, per)

	control, _, _ := run(t, false)
	carrived, _ := control.snapshot()
	var controlDown int
	for _, a := range carrived {
		if !a.up {
			controlDown++
		}
	}
	t.Logf("without the breaker: %d pushes while down", controlDown)
	if controlDown <= 3*(3+2+maxProbes) {
		t.Errorf("negative control: %d pushes reached the dead consumer without the breaker; want many more than with it (%d)", controlDown, whileDown)
	}
	checkDelivered(t, carrived, topics, per)
}

// checkDelivered fails unless every topic's messages 0..per-1 were each
// ACKed exactly once (pushed once while up), in offset order.
func checkDelivered(t *testing.T, arrived []flakyArrival, topics []string, per int) {
	t.Helper()
	for _, n := range topics {
		var acked, all []int64
		for _, a := range arrived {
			if a.topic != n {
				continue
			}
			all = append(all, a.offset)
			if a.up {
				acked = append(acked, a.offset)
			}
		}
		want := make([]int64, per)
		for i := range want {
			want[i] = int64(i)
		}
		if !slices.Equal(acked, want) {
			t.Errorf("%s: ACKed offsets %v, want 0..%d once each in order", n, acked, per-1)
		}
		if !slices.IsSorted(all) {
			t.Errorf("%s: pushes out of order: %v", n, all)
		}
	}
}

// Under ordering key one key that keeps failing (the consumer answers 500
// to it alone) does not open the breaker: its retries count once, and the
// other keys are delivered. Consumer down for every key opens it.
func TestBreakerOrderingKeyParkedKeyCountsOnce(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t")
	var stored [][]byte
	for i := range 9 {
		k := fmt.Sprintf("k%d", i%3)
		if i == 0 {
			k = "bad"
		}
		stored = append(stored, keyed(t, "t", i, k))
	}
	tp.appendStored(stored...)
	f := &flaky{fail: func(d Delivery) bool { return d.Key == "bad" }}
	f.up.Store(true)
	d := New("d", testHost(t), MustPattern("t")).WithOrdering(OrderKey).WithMaxInFlight(4).WithBreaker(2, 50*time.Millisecond)
	m := startWith(t, f, testOptions(), []*memTopic{tp}, d)
	eventually(t, "the bad key retried 6 times and the others delivered", func() bool {
		arrived, _ := f.snapshot()
		bad, good := 0, 0
		for _, a := range arrived {
			if a.key == "bad" {
				bad++
			} else {
				good++
			}
		}
		return bad >= 6 && good >= 8
	})
	if st, _ := m.BreakerStatus("d"); st.State != BreakerClosed || st.Opened != 0 {
		t.Fatalf("one failing key opened the breaker: %+v", st)
	}

	// Every key failing: distinct keys' first failures count.
	tp2 := newMemTopic(t, t.TempDir(), "u")
	stored = nil
	for i := range 6 {
		stored = append(stored, keyed(t, "u", i, fmt.Sprintf("k%d", i)))
	}
	tp2.appendStored(stored...)
	f2 := &flaky{}
	d2 := New("d", testHost(t), MustPattern("u")).WithOrdering(OrderKey).WithMaxInFlight(4).WithBreaker(2, time.Hour)
	m2 := startWith(t, f2, testOptions(), []*memTopic{tp2}, d2)
	eventually(t, "the breaker to open", func() bool {
		st, _ := m2.BreakerStatus("d")
		return st.State == BreakerOpen
	})
	st, _ := m2.BreakerStatus("d")
	if st.NextProbe.Before(time.Now().Add(50 * time.Minute)) {
		t.Errorf("next probe %s: want about an hour away", st.NextProbe)
	}
	// Open for an hour: nothing more reaches the consumer (at most the
	// pushes in flight when it opened: max-in-flight 4; their goroutines
	// may record their arrival a little after the opening).
	time.Sleep(50 * time.Millisecond)
	before, _ := f2.snapshot()
	time.Sleep(100 * time.Millisecond)
	after, _ := f2.snapshot()
	if len(after) > 4+2 || len(after) != len(before) {
		t.Errorf("while open: %d pushes, then %d 100 ms later", len(before), len(after))
	}
}

// An operator's resume pushes at once: a dispatcher whose breaker opened
// for a 10 s cool-off, paused and resumed once the consumer is back,
// sends its first push well within that cool-off (half of it: the
// breaker starts closed again, not waiting out the old opening), and
// every message is then delivered. Before the fix the resumed workers
// shared the open breaker and waited out its cool-off.
func TestResumeResetsBreaker(t *testing.T) {
	const cooloff = 10 * time.Second
	tp := newMemTopic(t, t.TempDir(), "t.a")
	tp.publish(5)
	d := New("d", testHost(t), MustPattern("t.*")).WithBreaker(1, cooloff)
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	f := &flaky{}
	m := startWith(t, f, testOptions(), []*memTopic{tp}, d)
	eventually(t, "the breaker to open", func() bool {
		st, _ := m.BreakerStatus("d")
		return st.State == BreakerOpen
	})
	if err := m.Pause("d"); err != nil {
		t.Fatal(err)
	}
	f.up.Store(true)
	resumed := time.Now()
	if err := m.Resume("d"); err != nil {
		t.Fatal(err)
	}
	if st, _ := m.BreakerStatus("d"); st.State != BreakerClosed {
		t.Errorf("breaker right after the resume: %+v, want closed", st)
	}
	eventually(t, "a push after the resume", func() bool {
		arrived, _ := f.snapshot()
		return len(arrived) > 0 && arrived[len(arrived)-1].up
	})
	arrived, _ := f.snapshot()
	var first time.Time
	for _, a := range arrived {
		if a.up {
			first = a.at
			break
		}
	}
	took := first.Sub(resumed)
	t.Logf("first push %s after the resume (cool-off %s)", took, cooloff)
	if took > cooloff/2 {
		t.Errorf("first push %s after the resume, want well within the %s cool-off", took, cooloff)
	}
	waitCommitted(t, m, "d", "t.a", 5)
}
