package dispatcher

import (
	"context"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
)

// pushLog is a PushSender that records every message pushed (offset and
// arrival time, in arrival order) and ACKs it, or NACKs it while nack
// says so.
type pushLog struct {
	mu     sync.Mutex
	offs   []int64
	at     []time.Time
	pushes []int // messages per push
	nack   atomic.Bool
}

func (p *pushLog) Send(ctx context.Context, d Delivery) (Outcome, error) {
	a, err := p.Push(ctx, Push{Messages: []Delivery{d}})
	if err != nil {
		return "", err
	}
	return a.Outcomes[0], nil
}

func (p *pushLog) Push(_ context.Context, ps Push) (Answer, error) {
	now := time.Now()
	o := ACK
	if p.nack.Load() {
		o = NACK
	}
	out := make([]Outcome, len(ps.Messages))
	p.mu.Lock()
	p.pushes = append(p.pushes, len(ps.Messages))
	for i, d := range ps.Messages {
		p.offs = append(p.offs, d.Offset)
		p.at = append(p.at, now)
		out[i] = o
	}
	p.mu.Unlock()
	return Answer{Status: 200, Outcomes: out}, nil
}

// since returns the offsets and arrival times recorded from index i on.
func (p *pushLog) since(i int) ([]int64, []time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.offs[i:]), slices.Clone(p.at[i:])
}

func (p *pushLog) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.offs)
}

// perSecond is the arrival rate of the sorted arrival times at, in
// messages per second: the messages after the first over the time from
// the first to the last (the first one is the bucket's one token).
func perSecond(at []time.Time) float64 { return perSecondAfter(at, 1) }

// perSecondAfter is perSecond when the first push carried first messages
// (a batch: the bucket's tokens at the start).
func perSecondAfter(at []time.Time, first int) float64 {
	if len(at) <= first {
		return 0
	}
	return float64(len(at)-first) / at[len(at)-1].Sub(at[0]).Seconds()
}

// busiestSecond is the most arrivals of at in any window of one second
// starting at an arrival.
func busiestSecond(at []time.Time) int {
	most := 0
	for i := range at {
		j := i
		for j < len(at) && at[j].Sub(at[i]) < time.Second {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// paced splits the arrivals offs/at into those of offsets in [from,
// until) and the others.
func paced(offs []int64, at []time.Time, from, until int64) (in, out []time.Time) {
	for i, o := range offs {
		if o >= from && o < until {
			in = append(in, at[i])
		} else {
			out = append(out, at[i])
		}
	}
	return in, out
}

// wantInOrder fails unless offs is exactly from, from+1, ..., to-1.
func wantInOrder(t *testing.T, what string, offs []int64, from, to int64) {
	t.Helper()
	want := make([]int64, 0, to-from)
	for o := from; o < to; o++ {
		want = append(want, o)
	}
	if !slices.Equal(offs, want) {
		t.Errorf("%s: offsets pushed = %v, want %d..%d once each, in order", what, offs, from, to-1)
	}
}

// startPub starts a Manager for ds over src with sender and pub as its
// Publisher, and stops it at cleanup.
func startPub(t *testing.T, src Source, sender Sender, pub Publisher, opts Options, ds ...*Dispatcher) *Manager {
	t.Helper()
	set, err := SetOf(ds...)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(set, src, sender, opts, zaptest.NewLogger(t))
	if pub != nil {
		m.SetPublisher(pub)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m) })
	return m
}

// all is a seek's topic filter that takes every topic.
func all(string) bool { return true }

// to returns a seek target of offset off on every topic.
func to(off int64) func(Topic) (int64, error) { return func(Topic) (int64, error) { return off, nil } }

// A seek with a rate replays the backlog (new position .. the high
// watermark as of the seek) at most rate pushes per second, measured from
// the consumer's arrival times, then delivers what came after the target
// at the normal speed; every message is delivered once, in order. The same
// seek without a rate replays faster than the bound (the negative control:
// the check can fail). With the dispatcher's own rate-limit stricter than
// the replay rate, the stricter holds.
func TestSeekAtRatePacesTheReplayThenNormalSpeed(t *testing.T) {
	const (
		rate    = 50.0
		backlog = 150 // 3 s at the rate
		after   = 60  // published after the seek: not paced
		slack   = 1.05
	)
	run := func(t *testing.T, seekRate float64, d *Dispatcher) (in, out []time.Time, m *Manager) {
		tp := newMemTopic(t, t.TempDir(), "t.a")
		tp.publish(backlog)
		p := &pushLog{}
		opts := testOptions()
		m = startWith(t, p, opts, []*memTopic{tp}, d)
		waitCommitted(t, m, d.name, "t.a", backlog)
		mark := p.count()
		res, err := m.SeekAt(d.name, all, to(0), seekRate)
		if err != nil {
			t.Fatal(err)
		}
		if seekRate > 0 {
			if len(res) != 1 || res[0].Replay == nil || *res[0].Replay != (Replay{Rate: seekRate, From: 0, Until: backlog}) {
				t.Fatalf("seek result = %+v, want a replay at %v from 0 until %d", res, seekRate, backlog)
			}
			if st := status(m, d.name, "t.a"); st.Replay == nil || st.Replay.Until != backlog {
				t.Errorf("status during the replay: replay %+v, want until %d", st.Replay, backlog)
			}
		} else if res[0].Replay != nil {
			t.Fatalf("seek without a rate set a replay: %+v", res[0].Replay)
		}
		tp.publish(after)
		waitCommitted(t, m, d.name, "t.a", backlog+after)
		offs, at := p.since(mark)
		wantInOrder(t, "after the seek", offs, 0, backlog+after)
		in, out = paced(offs, at, 0, backlog)
		if st := status(m, d.name, "t.a"); st.Replay != nil {
			t.Errorf("status once the target is reached: replay %+v, want none", st.Replay)
		}
		return in, out, m
	}

	t.Run("paced", func(t *testing.T) {
		in, out, _ := run(t, rate, New("d", testHost(t), MustPattern("t.*")))
		got, busiest := perSecond(in), busiestSecond(in)
		t.Logf("replay: %d messages in %s: %.1f/s (rate %v), busiest second %d; after the target: %d messages at %.0f/s",
			len(in), in[len(in)-1].Sub(in[0]), got, rate, busiest, len(out), perSecond(out))
		if got > rate*slack {
			t.Errorf("replay arrivals %.1f/s, want at most %v/s + 5%%", got, rate)
		}
		if float64(busiest) > rate*slack+1 {
			t.Errorf("busiest second of the replay: %d messages, want at most %v + 5%% + 1", busiest, rate)
		}
		// After the target the replay no longer paces: far above the
		// rate (an ACK-at-once sender; generous on this machine).
		if got := perSecond(out); got < 3*rate {
			t.Errorf("after the target %.0f/s, want the normal speed (well above the replay's %v/s)", got, rate)
		}
	})
	t.Run("control-no-rate", func(t *testing.T) {
		in, _, _ := run(t, 0, New("d", testHost(t), MustPattern("t.*")))
		got := perSecond(in)
		t.Logf("replay without a rate: %d messages at %.0f/s", len(in), got)
		if got <= rate*slack {
			t.Errorf("without a rate the replay went %.1f/s: the bound could not fail", got)
		}
	})
	t.Run("two-topics,batch,max-in-flight=4", func(t *testing.T) {
		// One bucket for the call: the two topics together at most the
		// rate; a batch holds at most a tenth of a second's worth (5).
		const per = 60
		d := New("d", testHost(t), MustPattern("t.*")).WithMaxInFlight(4).WithBatch(Batch{MaxMessages: 50})
		a, b := newMemTopic(t, t.TempDir(), "t.a"), newMemTopic(t, t.TempDir(), "t.b")
		a.publish(per)
		b.publish(per)
		p := &pushLog{}
		m := startWith(t, p, testOptions(), []*memTopic{a, b}, d)
		waitCommitted(t, m, "d", "t.a", per)
		waitCommitted(t, m, "d", "t.b", per)
		mark, pushMark := p.count(), len(p.pushes)
		res, err := m.SeekAt("d", all, to(0), rate)
		if err != nil || len(res) != 2 {
			t.Fatalf("seek: %+v, %v", res, err)
		}
		eventually(t, "both replays to end", func() bool {
			return status(m, "d", "t.a").Replay == nil && status(m, "d", "t.b").Replay == nil &&
				status(m, "d", "t.a").Committed == per && status(m, "d", "t.b").Committed == per
		})
		offs, at := p.since(mark)
		if len(offs) < 2*per {
			t.Fatalf("%d messages pushed after the seek, want %d", len(offs), 2*per)
		}
		slices.SortFunc(at, func(x, y time.Time) int { return x.Compare(y) })
		p.mu.Lock()
		pushes := slices.Clone(p.pushes[pushMark:])
		p.mu.Unlock()
		got := perSecondAfter(at, pushes[0])
		t.Logf("two topics: %d messages in %d pushes (largest %d) at %.1f/s (rate %v)", len(at), len(pushes), slices.Max(pushes), got, rate)
		if got > rate*slack {
			t.Errorf("two topics together %.1f/s, want at most %v/s + 5%%", got, rate)
		}
		if mx := slices.Max(pushes); mx > 5 {
			t.Errorf("a batch of %d messages during the replay, want at most 5 (rate/10)", mx)
		}
	})
	t.Run("rate-limit-stricter", func(t *testing.T) {
		const rl = 25.0
		d := New("d", testHost(t), MustPattern("t.*")).WithRateLimit(rl, 1)
		tp := newMemTopic(t, t.TempDir(), "t.a")
		tp.publish(50)
		p := &pushLog{}
		m := startWith(t, p, testOptions(), []*memTopic{tp}, d)
		waitCommitted(t, m, "d", "t.a", 50)
		mark := p.count()
		if _, err := m.SeekAt("d", all, to(0), rate); err != nil {
			t.Fatal(err)
		}
		waitCommitted(t, m, "d", "t.a", 50)
		eventually(t, "the replay to end", func() bool { return status(m, "d", "t.a").Replay == nil })
		offs, at := p.since(mark)
		wantInOrder(t, "after the seek", offs, 0, 50)
		got := perSecond(at)
		t.Logf("replay at %v/s under rate-limit %v/s: %.1f/s", rate, rl, got)
		if got > rl*slack {
			t.Errorf("replay arrivals %.1f/s, want at most the rate-limit %v/s + 5%% (the stricter)", got, rl)
		}
	})
}

// A redrive with a rate republishes at once and paces the delivery of the
// redriven backlog by the dispatcher's worker of the original topic: at
// most rate pushes per second of the offsets it published (from the
// topic's end as it began to its end as it ended), then the normal speed;
// every redriven message delivered once, in order, after the others.
func TestRedriveAtRatePacesTheRedrivenBacklog(t *testing.T) {
	const (
		rate  = 50.0
		n     = 120 // dead letters: 2.4 s at the rate
		after = 60
		slack = 1.05
	)
	tp := newMemTopic(t, t.TempDir(), "order.new")
	tp.publish(n)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.topics[tp.name] = tp
	p := &pushLog{}
	p.nack.Store(true) // every message NACKed: dead letters
	opts := testOptions().WithMaxResends(0)
	d := New("d", testHost(t), MustPattern("order.*"))
	m := startPub(t, src, p, pub, opts, d)
	waitCommitted(t, m, "d", "order.new", n)
	if got := len(pub.published("dead-letter.d")); got != n {
		t.Fatalf("dead letters = %d, want %d", got, n)
	}
	p.nack.Store(false)
	mark := p.count()
	start := time.Now()
	res, err := m.RedriveAt(context.Background(), "d", -1, -1, rate)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	want := []TopicReplay{{Topic: "order.new", Replay: Replay{Rate: rate, From: n, Until: 2 * n}}}
	if len(res.Redriven) != n || !slices.Equal(res.Replay, want) {
		t.Fatalf("redrive: %d redriven, replay %+v; want %d, %+v", len(res.Redriven), res.Replay, n, want)
	}
	tp.publish(after)
	waitCommitted(t, m, "d", "order.new", 2*n+after)
	offs, at := p.since(mark)
	wantInOrder(t, "after the redrive", offs, n, 2*n+after)
	in, out := paced(offs, at, n, 2*n)
	got := perSecond(in)
	t.Logf("redrive of %d took %s; delivery of the redriven: %.1f/s (rate %v), busiest second %d; after: %d at %.0f/s",
		n, took, got, rate, busiestSecond(in), len(out), perSecond(out))
	if got > rate*slack {
		t.Errorf("redriven arrivals %.1f/s, want at most %v/s + 5%%", got, rate)
	}
	if b := busiestSecond(in); float64(b) > rate*slack+1 {
		t.Errorf("busiest second of the redriven backlog: %d, want at most %v + 5%% + 1", b, rate)
	}
	if got := perSecond(out); got < 3*rate {
		t.Errorf("after the redriven backlog %.0f/s, want the normal speed", got)
	}
	if st := status(m, "d", "order.new"); st.Replay != nil {
		t.Errorf("status after the backlog: replay %+v, want none", st.Replay)
	}
}

// The replay rate through the live changes: shown in the status with its
// target; kept across a pause and a resume (still pacing); cleared by a
// later seek without a rate; dropped with the dispatcher. A bad rate is a
// 400 naming "rate" and moves nothing.
func TestReplayRateStatusPauseResumeAndClear(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t.a")
	tp.publish(10)
	p := &pushLog{}
	d := New("d", testHost(t), MustPattern("t.*"))
	m := startWith(t, p, testOptions(), []*memTopic{tp}, d)
	waitCommitted(t, m, "d", "t.a", 10)

	for _, bad := range []float64{-1, math.NaN(), math.Inf(1), MaxReplayRate + 1} {
		_, err := m.SeekAt("d", all, to(3), bad)
		var ce *contract.InputError
		if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest || !strings.Contains(err.Error(), `"rate"`) {
			t.Errorf("seek at rate %v: %v, want a 400 naming \"rate\"", bad, err)
		}
		if _, err := m.RedriveAt(context.Background(), "d", -1, -1, bad); err == nil || !strings.Contains(err.Error(), `"rate"`) {
			t.Errorf("redrive at rate %v: %v, want a 400 naming \"rate\"", bad, err)
		}
	}
	if st := status(m, "d", "t.a"); st.Committed != 10 || st.Replay != nil {
		t.Fatalf("after the refused seeks: %+v", st)
	}

	// One token per 1000 s: the first push goes, the next waits.
	mark := p.count()
	if _, err := m.SeekAt("d", all, to(2), 0.001); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first replayed push", func() bool { return p.count() == mark+1 })
	wantReplay := Replay{Rate: 0.001, From: 2, Until: 10}
	if st := status(m, "d", "t.a"); st.Replay == nil || *st.Replay != wantReplay {
		t.Fatalf("status replay = %+v, want %+v", st.Replay, wantReplay)
	}
	if err := m.Pause("d"); err != nil {
		t.Fatal(err)
	}
	ds, err := m.DispatcherStatus("d")
	if err != nil || len(ds) != 1 || ds[0].Replay == nil || *ds[0].Replay != wantReplay {
		t.Fatalf("paused status = %+v, %v; want replay %+v", ds, err, wantReplay)
	}
	if err := m.Resume("d"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker to run again", func() bool { return status(m, "d", "t.a").Running })
	time.Sleep(100 * time.Millisecond)
	if st := status(m, "d", "t.a"); st.Replay == nil || *st.Replay != wantReplay {
		t.Errorf("after the resume: replay %+v, want %+v", st.Replay, wantReplay)
	}
	if got := p.count(); got > mark+2 {
		t.Errorf("after the resume %d pushes of the replay, want at most 2 (the bucket is empty)", got-mark)
	}

	// A later seek without a rate clears it: everything goes at once.
	res, err := m.SeekAt("d", all, to(5), 0)
	if err != nil || len(res) != 1 || res[0].Replay != nil {
		t.Fatalf("seek without a rate: %+v, %v", res, err)
	}
	if st := status(m, "d", "t.a"); st.Replay != nil {
		t.Errorf("status after a seek without a rate: replay %+v", st.Replay)
	}
	waitCommitted(t, m, "d", "t.a", 10)

	// Removed with the dispatcher: one of the same name starts without it.
	if _, err := m.SeekAt("d", all, to(0), 0.001); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Remove("d"); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(New("d", testHost(t), MustPattern("t.*"))); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, m, "d", "t.a", 10)
	if st := status(m, "d", "t.a"); st.Replay != nil {
		t.Errorf("a dispatcher added again under the name has replay %+v", st.Replay)
	}
}

// A seek to the high watermark ("latest") with a rate has nothing to
// replay: no replay is set.
func TestSeekAtRateToTheEndSetsNoReplay(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t.a")
	tp.publish(4)
	m := startWith(t, &pushLog{}, testOptions(), []*memTopic{tp}, New("d", testHost(t), MustPattern("t.*")))
	waitCommitted(t, m, "d", "t.a", 4)
	res, err := m.SeekAt("d", all, func(t Topic) (int64, error) { return t.HighWatermark(), nil }, 10)
	if err != nil || len(res) != 1 || res[0].Replay != nil {
		t.Fatalf("seek to the end at a rate: %+v, %v; want no replay", res, err)
	}
	if st := status(m, "d", "t.a"); st.Replay != nil {
		t.Errorf("status replay %+v, want none", st.Replay)
	}
}

// A redrive in several calls (as one goes on from "next"): a call with a
// rate while an earlier call's replay is not reached keeps that backlog
// paced (its range starts where the earlier one did); a call without a
// rate clears it.
func TestRedriveAtRateInCallsKeepsTheEarlierBacklog(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "order.new")
	tp.publish(4)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.topics[tp.name] = tp
	p := &pushLog{}
	p.nack.Store(true)
	m := startPub(t, src, p, pub, testOptions().WithMaxResends(0), New("d", testHost(t), MustPattern("order.*")))
	waitCommitted(t, m, "d", "order.new", 4)
	if err := m.Pause("d"); err != nil {
		t.Fatal(err)
	}
	res, err := m.RedriveAt(context.Background(), "d", 0, 2, 10)
	if err != nil || len(res.Replay) != 1 || res.Replay[0].Replay != (Replay{Rate: 10, From: 4, Until: 6}) {
		t.Fatalf("first call: %+v, %v", res.Replay, err)
	}
	res, err = m.RedriveAt(context.Background(), "d", 2, -1, 20)
	if err != nil || len(res.Replay) != 1 || res.Replay[0].Replay != (Replay{Rate: 20, From: 4, Until: 8}) {
		t.Fatalf("second call: %+v, %v; want the range of both calls at the second's rate", res.Replay, err)
	}
	ds, _ := m.DispatcherStatus("d")
	if len(ds) != 1 || ds[0].Replay == nil || *ds[0].Replay != (Replay{Rate: 20, From: 4, Until: 8}) {
		t.Fatalf("paused status: %+v", ds)
	}
	if res, err = m.RedriveAt(context.Background(), "d", 0, 1, 0); err != nil || res.Replay != nil {
		t.Fatalf("a call without a rate: %+v, %v", res.Replay, err)
	}
	if ds, _ = m.DispatcherStatus("d"); ds[0].Replay != nil {
		t.Errorf("after a redrive without a rate: replay %+v, want none", ds[0].Replay)
	}
}
