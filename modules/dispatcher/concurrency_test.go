package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pushAnswer is a pushResult answered with err (nil: a normal answer).
func pushAnswer(err error) pushResult { return pushResult{err: err} }

// The limiter at times the test chooses: each overload signal (429, 503,
// a timeout, a round trip over twice the long-run average) lowers the
// limit by a tenth, once per round (an answer to a push sent before the
// last decrease changes nothing); a 500, a refused connection or a NACK
// leaves it; a fast answer raises it by 1/limit only when at least half
// the limit was in use.
func TestAIMDLimiterRules(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		r    pushResult
	}{
		{"429", pushAnswer(&AbnormalError{StatusCode: 429, Reason: "too many"})},
		{"503", pushAnswer(&AbnormalError{StatusCode: 503, Reason: "unavailable"})},
		{"429 with Retry-After", pushAnswer(&AbnormalError{StatusCode: 429, RetryAfter: time.Second})},
		{"timeout", pushAnswer(fmt.Errorf("post: %w", context.DeadlineExceeded))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newAIMD("d", 20, nil)
			if sig := answerSignal(tc.r); sig != signalOverload {
				t.Fatalf("signal %v, want overload", sig)
			}
			c.observe(signalOverload, ms, t0, 20, t0.Add(ms))
			if st := c.status(); st.Limit != 18 || st.Decreases != 1 {
				t.Fatalf("after one %s: %+v, want limit 18 (20 × 0.9), 1 decrease", tc.name, st)
			}
			// The other pushes of that round answer the same: no more.
			for range 10 {
				c.observe(signalOverload, ms, t0, 20, t0.Add(2*ms))
			}
			if st := c.status(); st.Limit != 18 {
				t.Errorf("answers to pushes sent before the decrease lowered it again: %+v", st)
			}
			// A push sent after the decrease: the next round.
			c.observe(signalOverload, ms, t0.Add(3*ms), 18, t0.Add(4*ms))
			if st := c.status(); st.Limit != 16 {
				t.Errorf("next round: limit %d, want 16 (18 × 0.9 = 16.2)", st.Limit)
			}
		})
	}
	for _, tc := range []struct {
		name string
		r    pushResult
		want signal
	}{
		{"500", pushAnswer(&AbnormalError{StatusCode: 500}), signalNone},
		{"refused", pushAnswer(errors.New("dial tcp: connection refused")), signalNone},
		{"bad body", pushAnswer(&AbnormalError{StatusCode: 200, Reason: "body"}), signalNone},
		{"ACK or NACK", pushResult{ans: Answer{Outcomes: []Outcome{NACK}}}, signalOK},
	} {
		if got := answerSignal(tc.r); got != tc.want {
			t.Errorf("%s: signal %v, want %v", tc.name, got, tc.want)
		}
		c := newAIMD("d", 20, nil)
		c.observe(tc.want, ms, t0, 20, t0.Add(ms))
		if st := c.status(); st.Limit != 20 || st.Decreases != 0 {
			t.Errorf("%s at the max: %+v, want limit 20 unchanged", tc.name, st)
		}
	}

	t.Run("latency rise", func(t *testing.T) {
		c := newAIMD("d", 20, nil)
		now := t0
		for range 200 {
			now = now.Add(ms)
			c.observe(signalOK, 2*ms, now.Add(-2*ms), 20, now)
		}
		if st := c.status(); st.Limit != 20 || st.RTT != 2*ms {
			t.Fatalf("fast answers at the max: %+v, want limit 20, rtt 2ms", st)
		}
		now = now.Add(ms)
		c.observe(signalOK, 9*ms/2, now.Add(-9*ms/2), 20, now) // over twice the average, but only 2.5 ms more: jitter
		if st := c.status(); st.Limit != 20 {
			t.Fatalf("a 4.5 ms answer over a 2 ms average lowered the limit: %+v", st)
		}
		now = now.Add(60 * ms)
		c.observe(signalOK, 60*ms, now.Add(-60*ms), 20, now)
		if st := c.status(); st.Limit != 18 || st.Decreases != 1 {
			t.Fatalf("a 60 ms answer over a 2 ms average: %+v, want limit 18", st)
		}
		// The latency stays high: the average follows, and after some
		// hundred answers the rise no longer counts; the limit climbs.
		for range 400 {
			now = now.Add(ms)
			c.observe(signalOK, 60*ms, now.Add(-60*ms), 20, now)
		}
		st := c.status()
		if st.Limit != 20 || st.RTT < 50*ms {
			t.Errorf("after 400 answers at 60 ms: %+v, want the limit back at 20 and the average near 60 ms", st)
		}
		if st.Decreases < 2 {
			t.Errorf("a lasting rise lowered the limit %d times, want several rounds first", st.Decreases)
		}
	})

	t.Run("increase and bounds", func(t *testing.T) {
		c := newAIMD("d", 12, nil)
		now := t0
		for range 100 {
			now = now.Add(ms)
			c.observe(signalOverload, ms, now, 12, now.Add(ms/2))
		}
		if st := c.status(); st.Limit != 1 {
			t.Fatalf("after 100 overload rounds: limit %d, want the floor 1", st.Limit)
		}
		// +1/limit per fast answer with at least half the limit in use:
		// 1 → 2 → 2.5 → 3 → 3.33.
		c.observe(signalOK, ms, now, 1, now.Add(ms))
		for range 3 {
			c.observe(signalOK, ms, now, 2, now.Add(ms))
		}
		if st := c.status(); st.Limit != 3 || st.Increases != 2 {
			t.Fatalf("4 answers from limit 1: %+v, want limit 3 after 2 increases (1, 2, 2.5, 3, 3.33)", st)
		}
		// Fast answers with the limit not in use (1 of 3): no increase.
		for range 50 {
			c.observe(signalOK, ms, now, 1, now.Add(ms))
		}
		if got := c.status().Limit; got != 3 {
			t.Errorf("answers with 1 of 3 in use raised the limit to %d", got)
		}
		for range 1000 {
			c.observe(signalOK, ms, now, 12, now.Add(ms))
		}
		if st := c.status(); st.Limit != 12 || st.Max != 12 {
			t.Errorf("after 1000 fast answers in use: %+v, want the limit at its max 12", st)
		}
	})
}

// take and give: never more than the limit out, over all the workers; a
// worker with a long backlog keeps no more than its fair share while
// another waits.
func TestAIMDSlotsShared(t *testing.T) {
	c := newAIMD("d", 4, nil)
	a, b := &worker{}, &worker{}
	for i := range 4 {
		if !c.take(a) {
			t.Fatalf("slot %d refused under the limit 4", i)
		}
	}
	if c.take(b) || c.take(a) {
		t.Fatal("a fifth slot given under the limit 4")
	}
	c.give(a)
	if c.take(a) {
		t.Fatal("a took the freed slot back while b waits, holding 3 of 4 (its share is 2)")
	}
	if !c.take(b) {
		t.Fatal("b refused the freed slot")
	}
	if st := c.status(); st.InFlight != 4 {
		t.Fatalf("in flight %d, want 4", st.InFlight)
	}
}

// A dispatcher with aimd on 3 topics, max-in-flight 6, and a consumer
// that holds every push until released: at most 6 pushes are out at once
// over the three (without aimd, 6 per topic: 18), and the status shows the
// limit and what is in flight.
func TestAIMDLimitIsTheDispatchers(t *testing.T) {
	for _, mode := range []AdaptiveConcurrency{AdaptiveAIMD, AdaptiveOff} {
		t.Run(string(mode), func(t *testing.T) {
			var cur, peak atomic.Int64
			release := make(chan struct{})
			c := newConsumer(t, func(_ received, w http.ResponseWriter, _ *http.Request) {
				n := cur.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				<-release
				cur.Add(-1)
				answer(w, ACK)
			})
			var tps []*memTopic
			for i := range 3 {
				tp := newMemTopic(t, t.TempDir(), fmt.Sprintf("cc.%d", i))
				tp.publish(20)
				tps = append(tps, tp)
			}
			opts := testOptions()
			m := startWith(t, NewHTTPSender(opts), opts, tps, New("cc", c.host(t), MustPattern("cc.*")).WithMaxInFlight(6).WithAdaptiveConcurrency(mode))
			var once sync.Once
			free := func() { once.Do(func() { close(release) }) }
			t.Cleanup(free) // before the manager stops, also when the test fails
			want := int64(6)
			if mode == AdaptiveOff {
				want = 18
			}
			eventually(t, "pushes held by the consumer", func() bool { return cur.Load() >= want })
			time.Sleep(50 * time.Millisecond) // room for a push too many
			st, on := m.ConcurrencyStatus("cc")
			free()
			if p := peak.Load(); p != want {
				t.Errorf("%d pushes at once, want %d", p, want)
			}
			if mode == AdaptiveOff {
				if on {
					t.Errorf("a concurrency status without aimd: %+v", st)
				}
				return
			}
			if !on || st.Limit != 6 || st.Max != 6 || st.InFlight != 6 {
				t.Errorf("status %+v (on %v), want limit 6 of max 6, 6 in flight", st, on)
			}
			for _, tp := range tps {
				waitCommitted(t, m, "cc", tp.name, 20)
			}
		})
	}
}

// Ordering key, aimd, max-in-flight 8: the consumer answers 503 to every
// push of key "bad" and ACKs the rest. The bad key's first answer lowers
// the limit once; its retries (it stays parked) never again. Without the
// rule each retry is a new round and lowers it again (7, 6, 5 ...).
func TestAIMDParkedKeyDoesNotLowerTheLimit(t *testing.T) {
	var badPushes atomic.Int64
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Key == "bad" {
			badPushes.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, t.TempDir(), "ck")
	var msgs [][]byte
	msgs = append(msgs, keyMsg(t, "ck", 0, "bad"))
	for i := 1; i < 40; i++ {
		msgs = append(msgs, keyMsg(t, "ck", i, fmt.Sprintf("k%d", i%5)))
	}
	tp.appendStored(msgs...)
	opts := testOptions() // backoff 5 ms doubling to 20 ms: many retries
	m := startWith(t, NewHTTPSender(opts), opts, []*memTopic{tp},
		New("ck", c.host(t), MustPattern("ck")).WithMaxInFlight(8).WithOrdering(OrderKey).WithAdaptiveConcurrency(AdaptiveAIMD))
	eventually(t, "the other keys delivered and bad retried 6 times", func() bool {
		return status(m, "ck", "ck").Delivered == 39 && badPushes.Load() >= 6
	})
	// Latency rises may lower it too on a loaded machine: only the
	// decreases on a 429, 503 or timeout are the parked key's.
	m.mu.Lock()
	lim := m.limits["ck"]
	m.mu.Unlock()
	lim.mu.Lock()
	overloads := lim.overloads
	lim.mu.Unlock()
	if st := lim.status(); overloads > 1 {
		t.Errorf("after %d pushes of the parked key: %d decreases on its 503s (%+v), want at most 1 (its first answer)", badPushes.Load(), overloads, st)
	}
}

// Settings: only off or aimd, naming the key; aimd needs max-in-flight 2
// or more; the default is off and Settings writes it out.
func TestAdaptiveConcurrencySettings(t *testing.T) {
	h := Host{Protocol: HTTP, Address: "localhost", Port: 8081}
	for _, tc := range []struct {
		d    *Dispatcher
		want string
	}{
		{New("a", h, MustPattern("t")).WithMaxInFlight(4).WithAdaptiveConcurrency("gradient"), `adaptive-concurrency: must be "off" or "aimd"; got "gradient"`},
		{New("a", h, MustPattern("t")).WithAdaptiveConcurrency(AdaptiveAIMD), `adaptive-concurrency: "aimd" needs max-in-flight 2 or more`},
		{New("a", h, MustPattern("t")).WithMaxInFlight(1).WithOrdering(OrderNone).WithAdaptiveConcurrency(AdaptiveAIMD), `adaptive-concurrency: "aimd" needs max-in-flight 2 or more`},
	} {
		err := tc.d.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate: %v; want %q", err, tc.want)
		}
	}
	for _, d := range []*Dispatcher{
		New("a", h, MustPattern("t")).WithMaxInFlight(2).WithAdaptiveConcurrency(AdaptiveAIMD),
		New("a", h, MustPattern("t")).WithAdaptiveConcurrency(AdaptiveOff),
	} {
		if err := d.Validate(); err != nil {
			t.Errorf("Validate %s: %v", d.AdaptiveConcurrency(), err)
		}
	}
	if got := New("a", h, MustPattern("t")).WithAdaptiveConcurrency(AdaptiveOff).Settings().AdaptiveConcurrency; got != "" {
		t.Errorf("off: Settings shows %q, want it left out", got)
	}
	s := Settings{Name: "a", Host: "http://localhost:8081", Patterns: []string{"t"}, AdaptiveConcurrency: "AIMD"}
	if err := s.Validate("mmmq.broker.dispatchers[0]"); err == nil || !strings.Contains(err.Error(), "mmmq.broker.dispatchers[0].adaptive-concurrency") {
		t.Errorf("Settings.Validate: %v; want the key named", err)
	}
}

// Ordering none, aimd, backoff-initial an hour: a 429 without
// Retry-After lowers the limit and its message goes again within it, no
// backoff of the topic, while the limit was above 1 (every message is
// delivered at once); at the floor 1 a 429 backs off as without aimd (a
// consumer answering only 429 gets 3 pushes, then the hour's wait); a 429
// with Retry-After waits at least what it asked for. Without aimd the
// first 429 stops the topic for the hour (the negative control).
func TestAIMDOverloadWithoutRetryAfterIsNotABackoff(t *testing.T) {
	opts := testOptions()
	opts.BackoffInitial, opts.BackoffMax = time.Hour, time.Hour
	run := func(t *testing.T, mode AdaptiveConcurrency, maxInFlight int, respond func(n int64, r received, w http.ResponseWriter) bool) (*Manager, *consumer, *memTopic) {
		var n atomic.Int64
		c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
			if respond(n.Add(1), r, w) {
				return
			}
			answer(w, ACK)
		})
		tp := newMemTopic(t, t.TempDir(), "co")
		tp.publish(8)
		m := startWith(t, NewHTTPSender(opts), opts, []*memTopic{tp},
			New("co", c.host(t), MustPattern("co")).WithMaxInFlight(maxInFlight).WithOrdering(OrderNone).WithAdaptiveConcurrency(mode))
		return m, c, tp
	}
	first3 := func(n int64, _ received, w http.ResponseWriter) bool {
		if n <= 3 {
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	}
	t.Run("aimd", func(t *testing.T) {
		m, c, _ := run(t, AdaptiveAIMD, 4, first3)
		waitCommitted(t, m, "co", "co", 8)
		if n := len(c.requests()); n != 11 {
			t.Errorf("%d pushes, want 11 (8 + the 3 answered 429)", n)
		}
		if st, _ := m.ConcurrencyStatus("co"); st.Decreases == 0 {
			t.Errorf("no decrease after three 429s: %+v", st)
		}
	})
	t.Run("off", func(t *testing.T) {
		m, _, _ := run(t, AdaptiveOff, 4, first3)
		eventually(t, "the topic backing off", func() bool { return status(m, "co", "co").Backoff })
		time.Sleep(100 * time.Millisecond)
		if st := status(m, "co", "co"); st.Committed == 8 || !st.Backoff {
			t.Errorf("without aimd: %+v, want the topic waiting out its hour", st)
		}
	})
	t.Run("floor", func(t *testing.T) {
		m, c, _ := run(t, AdaptiveAIMD, 2, func(_ int64, _ received, w http.ResponseWriter) bool {
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		})
		eventually(t, "the topic backing off at limit 1", func() bool { return status(m, "co", "co").Backoff })
		time.Sleep(200 * time.Millisecond)
		st, _ := m.ConcurrencyStatus("co")
		if n := len(c.requests()); n != 3 || st.Limit != 1 {
			t.Errorf("%d pushes, limit %+v; want 3 (two at limit 2, one at 1) and limit 1, then the backoff", n, st)
		}
	})
	t.Run("retry-after", func(t *testing.T) {
		opts.BackoffInitial, opts.BackoffMax = time.Millisecond, 5*time.Second
		var mu sync.Mutex
		var first, again time.Time
		offset := int64(-1)
		m, _, _ := run(t, AdaptiveAIMD, 4, func(n int64, r received, w http.ResponseWriter) bool {
			mu.Lock()
			defer mu.Unlock()
			if n == 1 {
				first, offset = time.Now(), r.Offset
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusTooManyRequests)
				return true
			}
			if r.Offset == offset {
				again = time.Now()
			}
			return false
		})
		waitCommitted(t, m, "co", "co", 8)
		mu.Lock()
		defer mu.Unlock()
		if again.IsZero() || again.Sub(first) < time.Second {
			t.Errorf("the message answered 429 with Retry-After: 1 was sent again after %v, want at least 1s", again.Sub(first))
		}
		t.Logf("resent %v after its 429 with Retry-After: 1", again.Sub(first).Round(time.Millisecond))
	})
}
