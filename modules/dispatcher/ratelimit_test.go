package dispatcher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// arrivals is a PushSender that ACKs every message at once and records
// when each push's messages came and how big each push was.
type arrivals struct {
	mu     sync.Mutex
	at     []time.Time
	pushes []int
	hold   chan struct{} // when non-nil, a push waits for it (or its ctx)
}

func (a *arrivals) Send(ctx context.Context, d Delivery) (Outcome, error) {
	ans, err := a.Push(ctx, Push{Messages: []Delivery{d}})
	if err != nil {
		return "", err
	}
	return ans.Outcomes[0], nil
}

func (a *arrivals) Push(ctx context.Context, p Push) (Answer, error) {
	now := time.Now()
	a.mu.Lock()
	for range p.Messages {
		a.at = append(a.at, now)
	}
	a.pushes = append(a.pushes, len(p.Messages))
	a.mu.Unlock()
	if a.hold != nil {
		select {
		case <-a.hold:
		case <-ctx.Done():
			return Answer{}, ctx.Err()
		}
	}
	out := make([]Outcome, len(p.Messages))
	for i := range out {
		out[i] = ACK
	}
	return Answer{Status: 200, Outcomes: out}, nil
}

func (a *arrivals) snapshot() ([]time.Time, []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.at), slices.Clone(a.pushes)
}

// worstWindow returns the largest excess, over every window [at[i], at[j]]
// of the sorted arrival times, of the messages that arrived in it over
// burst + r × (its length + jitter): > 0 means the bucket was exceeded.
// jitter is how much later than its reservation a push may be recorded
// (the goroutine start, the scheduler), which can bunch arrivals.
func worstWindow(at []time.Time, r float64, burst int, jitter time.Duration) (excess float64, where string) {
	slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
	excess = -1e18
	for i := range at {
		for j := i; j < len(at); j++ {
			n := float64(j - i + 1)
			allowed := float64(burst) + r*(at[j].Sub(at[i])+jitter).Seconds()
			if e := n - allowed; e > excess {
				excess, where = e, fmt.Sprintf("%d messages in %s (allowed %.0f)", j-i+1, at[j].Sub(at[i]), allowed)
			}
		}
	}
	return excess, where
}

// testHost is a consumer host for a test sender that does not dial it.
func testHost(t *testing.T) Host {
	t.Helper()
	h, err := ParseHost("http://localhost:1")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// startWith starts a Manager for ds over the topics with sender and stops
// it at cleanup.
func startWith(t testing.TB, sender Sender, opts Options, topics []*memTopic, ds ...*Dispatcher) *Manager {
	t.Helper()
	set, err := SetOf(ds...)
	if err != nil {
		t.Fatal(err)
	}
	src := newMemSource()
	for _, tp := range topics {
		src.add(tp)
	}
	m := NewManager(set, src, sender, opts, zaptest.NewLogger(t))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m) })
	return m
}

// With rate-limit r and burst b, the pushes of a dispatcher's two topics,
// together, never exceed the token bucket: in any window t the consumer
// sees at most b + r×(t + 100 ms) messages (100 ms of scheduling slack),
// with max-in-flight 1, 8 and 64, ordering key, and batches (capped at the
// burst). The same check fails on the same load without the limit (the
// negative control), so it can fail.
func TestRateLimitBoundsArrivalsInAnyWindow(t *testing.T) {
	const (
		r      = 400.0
		burst  = 20
		per    = 120 // messages per topic
		jitter = 100 * time.Millisecond
	)
	cases := []struct {
		name string
		d    func(*Dispatcher) *Dispatcher
	}{
		{"max-in-flight=1", func(d *Dispatcher) *Dispatcher { return d }},
		{"max-in-flight=8", func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(8) }},
		{"max-in-flight=64", func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(64) }},
		{"ordering=key,max-in-flight=8", func(d *Dispatcher) *Dispatcher { return d.WithOrdering(OrderKey).WithMaxInFlight(8) }},
		{"batch=50", func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(4).WithBatch(Batch{MaxMessages: 50}) }},
	}
	run := func(t *testing.T, limited bool, d func(*Dispatcher) *Dispatcher) ([]time.Time, []int) {
		opts := testOptions()
		opts.BatchSize = 64
		a, b := newMemTopic(t, t.TempDir(), "t.a"), newMemTopic(t, t.TempDir(), "t.b")
		a.publish(per)
		b.publish(per)
		disp := d(New("d", testHost(t), MustPattern("t.*")))
		if limited {
			disp = disp.WithRateLimit(r, burst)
		}
		if err := disp.Validate(); err != nil {
			t.Fatal(err)
		}
		snd := &arrivals{}
		m := startWith(t, snd, opts, []*memTopic{a, b}, disp)
		waitCommitted(t, m, "d", "t.a", per)
		waitCommitted(t, m, "d", "t.b", per)
		return snd.snapshot()
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			at, pushes := run(t, true, c.d)
			if len(at) < 2*per {
				t.Fatalf("%d messages pushed, want %d", len(at), 2*per)
			}
			span := at[len(at)-1].Sub(at[0])
			excess, where := worstWindow(at, r, burst, jitter)
			t.Logf("%d messages in %s (%.0f/s), %d pushes, worst window: %s", len(at), span, float64(len(at)-1)/span.Seconds(), len(pushes), where)
			if excess > 0 {
				t.Errorf("the bucket (rate %v/s, burst %d) was exceeded: %s", r, burst, where)
			}
			if mx := slices.Max(pushes); mx > burst {
				t.Errorf("a push of %d messages: a batch holds at most the burst (%d) under a rate limit", mx, burst)
			}
		})
	}
	t.Run("negative control: no limit", func(t *testing.T) {
		at, _ := run(t, false, cases[1].d)
		excess, where := worstWindow(at, r, burst, jitter)
		t.Logf("without the limit, worst window: %s", where)
		if excess <= 0 {
			t.Errorf("without a limit the check passed (%s): it cannot tell a limited dispatcher from one without", where)
		}
	})
}

// A worker waiting for tokens is stopped promptly by a pause and by the
// broker's stop: the wait is part of the loop, not a sleep. It is not an
// attempt (the held message was never sent, so the consumer saw one push)
// and starts no backoff; the status shows the worker waiting.
func TestRateLimitWaitEndsOnPauseAndStop(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(3)
	snd := &arrivals{}
	// One token per 1000 s: the second push would wait that long.
	d := New("d", testHost(t), MustPattern("t")).WithRateLimit(0.001, 0)
	set, err := SetOf(d)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(set, newMemSource(tp), snd, testOptions(), zaptest.NewLogger(t))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stopManager(t, m)
	waiting := func() bool { rs, on := m.RateStatus("d"); return on && rs.Waiting == 1 }
	eventually(t, "a worker waiting for tokens", waiting)
	rs, _ := m.RateStatus("d")
	if rs.Limit != 0.001 || rs.Burst != 1 || rs.Delayed != 1 {
		t.Errorf("rate status %+v, want limit 0.001, burst 1 (the default), 1 push delayed", rs)
	}
	st := status(m, "d", "t")
	if st.Delivered != 1 || st.Abnormal != 0 || st.Backoff || st.Attempt != 0 {
		t.Errorf("status while waiting %+v: want 1 delivered, no abnormal answer, no backoff, no attempt of the held message", st)
	}

	start := time.Now()
	if err := m.Pause("d"); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("pause took %s while a worker waited for tokens", el)
	}
	if rs, _ := m.RateStatus("d"); rs.Waiting != 0 {
		t.Errorf("paused: %d workers still waiting", rs.Waiting)
	}
	if err := m.Resume("d"); err != nil {
		t.Fatal(err)
	}
	// The pause gave back the held push's reservation, not a token more:
	// after the resume the push waits again, the message still unsent.
	eventually(t, "the resumed worker waiting", waiting)
	start = time.Now()
	stopManager(t, m)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("stop took %s while a worker waited for tokens", el)
	}
	if at, _ := snd.snapshot(); len(at) != 1 {
		t.Errorf("%d pushes, want 1 (the held message is never sent)", len(at))
	}
}

func TestRateLimitSettings(t *testing.T) {
	base := New("d", testHost(t), MustPattern("t"))
	for _, tc := range []struct {
		limit float64
		burst int
		want  int // the effective burst
	}{
		{0, 0, 0}, {0.5, 0, 1}, {1, 0, 1}, {2.5, 0, 3}, {100, 0, 100}, {100, 7, 7}, {MaxRateLimit, MaxRateBurst, MaxRateBurst},
	} {
		d := base.WithRateLimit(tc.limit, tc.burst)
		if err := d.Validate(); err != nil {
			t.Errorf("rate-limit %v, rate-burst %d: %v", tc.limit, tc.burst, err)
		}
		if d.RateBurst() != tc.want {
			t.Errorf("rate-limit %v, rate-burst %d: burst %d, want %d", tc.limit, tc.burst, d.RateBurst(), tc.want)
		}
	}
	nan := 0.0
	nan = nan / nan
	for name, tc := range map[string]struct {
		d    *Dispatcher
		want string
	}{
		"negative":        {base.WithRateLimit(-1, 0), "rate-limit: must be a number of messages per second in 0..1000000 (0 = off); got -1"},
		"too large":       {base.WithRateLimit(MaxRateLimit+1, 0), "rate-limit: must be"},
		"NaN":             {base.WithRateLimit(nan, 0), "rate-limit: must be"},
		"burst alone":     {base.WithRateLimit(0, 5), "rate-burst: needs rate-limit"},
		"burst negative":  {base.WithRateLimit(10, -1), "rate-burst: must be 1..1000000 messages"},
		"burst too large": {base.WithRateLimit(10, MaxRateBurst+1), "rate-burst: must be 1..1000000"},
	} {
		err := tc.d.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	// As shown by GET (the burst as set): turning the limit off alone is
	// accepted when the burst was the default.
	shown := base.WithRateLimit(50, 0).Settings()
	shown.RateLimit = 0
	if _, err := FromSettings(shown, "d", SourceAPI); err != nil {
		t.Errorf("rate limit off from what GET shows: %v", err)
	}
	if _, err := FromSettings(Settings{Name: "d", Host: "http://localhost:1", Patterns: []string{"t"}, RateBurst: 3}, "mmmq.broker.dispatchers[0]", SourceAPI); err == nil ||
		!strings.Contains(err.Error(), "mmmq.broker.dispatchers[0]") || !strings.Contains(err.Error(), "rate-burst") {
		t.Errorf("burst without limit from settings: %v, want an error naming the entry and rate-burst", err)
	}
}

// The bucket at times the test chooses (the limiter takes its time from
// the caller): rate 10/s, burst 2. Two workers share it: the first two
// pushes go at once, the next ones are held in turn, 100 ms apart; a push
// given up (a stop) gives its tokens back, so the next reservation goes
// where it would have; a batch takes one token per message.
func TestRateLimitReservationsAtChosenTimes(t *testing.T) {
	m := &Manager{limiters: map[string]*rateLimiter{}}
	d := New("d", testHost(t), MustPattern("t.*")).WithRateLimit(10, 2)
	rl := m.limiterLocked(d)
	if rl == nil || m.limiterLocked(d) != rl {
		t.Fatal("one bucket per dispatcher while its settings are unchanged")
	}
	w1, w2 := &worker{rl: rl}, &worker{rl: rl}
	one := func() []*msg { return []*msg{{}} }
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	if !w1.reserve(one(), t0) || !w2.reserve(one(), t0) {
		t.Fatal("the burst of 2 did not go at once")
	}
	if w1.reserve(one(), t0) || !w1.held.at.Equal(ms(100)) {
		t.Fatalf("third push: held until %v, want t0+100ms", w1.held)
	}
	if w2.reserve(one(), t0) || !w2.held.at.Equal(ms(200)) {
		t.Fatalf("fourth push: held until %v, want t0+200ms (after the third)", w2.held)
	}
	if rs, _ := m.RateStatus("d"); rs.Waiting != 2 || rs.Delayed != 2 {
		t.Errorf("status %+v, want 2 waiting, 2 delayed", rs)
	}
	// w2 stops at t0+50ms: its token goes back.
	if u := w2.release(ms(50), false); len(u) != 1 || w2.held != nil {
		t.Fatalf("release gave %v back, held %v", u, w2.held)
	}
	if w2.reserve(one(), ms(50)) || !w2.held.at.Equal(ms(200)) {
		t.Fatalf("after the give-back: held until %v, want t0+200ms", w2.held)
	}
	w1.release(ms(100), true)
	w2.release(ms(200), true)
	rs, _ := m.RateStatus("d")
	if rs.Waiting != 0 || rs.Delayed != 3 || rs.Waited != 300*time.Millisecond {
		t.Errorf("status %+v, want none waiting, 3 delayed, 300ms waited (100 + 50 + 150)", rs)
	}
	// At t0+200ms the bucket is empty; a batch of 2 waits for 2 tokens.
	if w1.reserve([]*msg{{}, {}}, ms(200)) || !w1.held.at.Equal(ms(400)) {
		t.Fatalf("batch of 2: held until %v, want t0+400ms", w1.held)
	}
	w1.release(ms(400), true)

	// A change of the limit makes a new bucket; the counters carry over;
	// off, there is none, and the counters stay for the metrics.
	rl2 := m.limiterLocked(d.WithRateLimit(20, 0))
	if rl2 == rl || rl2.burst != 20 {
		t.Fatalf("new limit: bucket %p (old %p), burst %d, want a new one of 20", rl2, rl, rl2.burst)
	}
	if m.limiterLocked(d.WithRateLimit(0, 0)) != nil {
		t.Fatal("limit off: a bucket")
	}
	if rs, on := m.RateStatus("d"); on || rs.Delayed != 4 || rs.Waited != 500*time.Millisecond {
		t.Errorf("off: status %+v on=%v, want off with 4 delayed, 500ms waited", rs, on)
	}
}
