package dispatcher

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

func TestDeliverInOrderWithHeaders(t *testing.T) {
	root := t.TempDir()
	orders := newMemTopic(t, root, "order.created")
	other := newMemTopic(t, root, "billing.created")
	orders.publish(5)
	other.publish(2)
	c := newConsumer(t, nil)
	d := New("order-dispatcher", c.host(t), MustPattern("order.**"))
	m := startManager(t, newMemSource(orders, other), testOptions(), d)

	eventually(t, "5 commits", func() bool { return status(m, "order-dispatcher", "order.created").Committed == 5 })
	// The idle worker wakes on Notify for messages published later.
	orders.publish(2)
	eventually(t, "7 commits", func() bool { return status(m, "order-dispatcher", "order.created").Committed == 7 })

	reqs := c.requests()
	if got, want := offsets(reqs), []int64{0, 1, 2, 3, 4, 5, 6}; !reflect.DeepEqual(got, want) {
		t.Fatalf("offsets = %v, want %v (billing.created must not be delivered)", got, want)
	}
	for i, r := range reqs {
		want := received{
			Path:          "/mmmq/messages",
			ConsumerID:    "order-dispatcher",
			Topic:         "order.created",
			Offset:        int64(i),
			Attempt:       1,
			MessageID:     "m-" + string(rune('0'+i)),
			ContentType:   "application/json",
			ContentLength: int64(len(storedMessage("order.created", i))),
			Body:          string(storedMessage("order.created", i)),
		}
		if r != want {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, r, want)
		}
	}
	if got := checkpointFile(t, orders.dir, "order-dispatcher"); got != 7 {
		t.Errorf("checkpoint file = %d, want 7", got)
	}
	st := status(m, "order-dispatcher", "order.created")
	if st.Delivered != 7 || st.Commits != 7 || st.Next != 7 || !st.Running {
		t.Errorf("status = %+v", st)
	}
	if len(m.Status()) != 1 {
		t.Errorf("workers = %+v, want only order.created", m.Status())
	}
}

func TestNackResendsThenSkipsAndCommits(t *testing.T) {
	root := t.TempDir()
	tp := newMemTopic(t, root, "order.new")
	tp.publish(3)
	var mu sync.Mutex
	nacksOf0 := 0
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		switch r.Offset {
		case 0: // NACK twice, then ACK: delivered, not exhausted
			mu.Lock()
			nacksOf0++
			n := nacksOf0
			mu.Unlock()
			if n <= 2 {
				answer(w, NACK)
				return
			}
		case 1: // always NACK
			answer(w, NACK)
			return
		}
		answer(w, ACK)
	})
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("order.*")))
	eventually(t, "commit 3", func() bool { return status(m, "d", "order.new").Committed == 3 })

	var attempts []int
	for _, r := range c.requests() {
		if r.Offset == 1 {
			attempts = append(attempts, r.Attempt)
		}
	}
	// Seed 000: at most 3 resends, so 4 attempts in all.
	if want := []int{1, 2, 3, 4}; !reflect.DeepEqual(attempts, want) {
		t.Errorf("attempts of offset 1 = %v, want %v", attempts, want)
	}
	if got, want := offsets(c.requests()), []int64{0, 0, 0, 1, 1, 1, 1, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
	st := status(m, "d", "order.new")
	if st.Delivered != 2 || st.Nacked != 6 || st.Exhausted != 1 || st.Abnormal != 0 {
		t.Errorf("status = %+v", st)
	}
	if got := checkpointFile(t, tp.dir, "d"); got != 3 {
		t.Errorf("checkpoint file = %d, want 3", got)
	}
}

func TestAbnormalBacksOffWithoutReordering(t *testing.T) {
	root := t.TempDir()
	tp := newMemTopic(t, root, "pay.done")
	tp.publish(3)
	// Offset 1 answers: 500, 503, NACK, 500, NACK, NACK, ACK. The abnormal
	// answers must not count toward the NACK limit (3 NACKs < 4).
	script := []int{500, 503, 1, 500, 1, 1, 0}
	var mu sync.Mutex
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Offset != 1 {
			answer(w, ACK)
			return
		}
		mu.Lock()
		step := script[0]
		if len(script) > 1 {
			script = script[1:]
		}
		mu.Unlock()
		switch step {
		case 0:
			answer(w, ACK)
		case 1:
			answer(w, NACK)
		default:
			http.Error(w, "down", step)
		}
	})
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("pay.*")))
	eventually(t, "commit 3", func() bool { return status(m, "d", "pay.done").Committed == 3 })

	if got, want := offsets(c.requests()), []int64{0, 1, 1, 1, 1, 1, 1, 1, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
	for i, r := range c.requests()[1:8] {
		if r.Attempt != i+1 {
			t.Errorf("attempt header of send %d = %d, want %d", i+1, r.Attempt, i+1)
		}
	}
	st := status(m, "d", "pay.done")
	if st.Delivered != 3 || st.Abnormal != 3 || st.Nacked != 3 || st.Exhausted != 0 || st.Backoff {
		t.Errorf("status = %+v", st)
	}
	// After the normal answers the backoff starts again from its initial value.
	stopManager(t, m)
	m.mu.Lock()
	w := m.workers[workerKey{"d", "pay.done"}]
	m.mu.Unlock()
	if got := w.bo.NextBackOff(); got != testOptions().BackoffInitial {
		t.Errorf("next backoff after a normal answer = %s, want %s (reset)", got, testOptions().BackoffInitial)
	}
}

func TestRedirectIsNotFollowed(t *testing.T) {
	root := t.TempDir()
	tp := newMemTopic(t, root, "r")
	tp.publish(1)
	var mu sync.Mutex
	sends := 0
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/elsewhere" {
			answer(w, ACK)
			return
		}
		mu.Lock()
		sends++
		n := sends
		mu.Unlock()
		if n <= 2 {
			http.Redirect(w, req, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		answer(w, ACK)
	})
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("r")))
	eventually(t, "commit 1", func() bool { return status(m, "d", "r").Committed == 1 })
	for _, r := range c.requests() {
		if r.Path != "/mmmq/messages" {
			t.Errorf("redirect followed to %s", r.Path)
		}
	}
	if st := status(m, "d", "r"); st.Abnormal != 2 || st.Delivered != 1 {
		t.Errorf("status = %+v, want 2 abnormal, 1 delivered", st)
	}
}

func TestHugeResponseBodyIsAbnormal(t *testing.T) {
	root := t.TempDir()
	tp := newMemTopic(t, root, "big")
	tp.publish(1)
	var mu sync.Mutex
	sends := 0
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		sends++
		n := sends
		mu.Unlock()
		if n == 1 {
			// Valid JSON saying ACK, but over the cap.
			w.Write([]byte(`{"acknowledgement":"ACK","pad":"` + strings.Repeat("x", 4096) + `"}`))
			return
		}
		answer(w, ACK)
	})
	opts := testOptions()
	opts.MaxResponseBytes = 1024
	m := startManager(t, newMemSource(tp), opts, New("d", c.host(t), MustPattern("big")))
	eventually(t, "commit 1", func() bool { return status(m, "d", "big").Committed == 1 })
	if st := status(m, "d", "big"); st.Abnormal != 1 || st.Delivered != 1 {
		t.Errorf("status = %+v, want 1 abnormal then delivered", st)
	}
}

func TestHangingConsumerTimesOutOtherTopicsFlow(t *testing.T) {
	root := t.TempDir()
	slow := newMemTopic(t, root, "a.slow")
	fast := newMemTopic(t, root, "a.fast")
	slow.publish(1)
	fast.publish(20)
	release := make(chan struct{})
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Topic == "a.slow" {
			select {
			case <-release:
			case <-req.Context().Done():
				return
			}
		}
		answer(w, ACK)
	})
	d := New("d", c.host(t), MustPattern("a.*")).WithTimeout(50 * time.Millisecond)
	m := startManager(t, newMemSource(slow, fast), testOptions(), d)

	eventually(t, "fast topic delivered while slow hangs", func() bool { return status(m, "d", "a.fast").Committed == 20 })
	eventually(t, "slow attempt timed out", func() bool { return status(m, "d", "a.slow").Abnormal >= 2 })
	if st := status(m, "d", "a.slow"); st.Committed != 0 || st.Delivered != 0 {
		t.Fatalf("slow status = %+v, want nothing committed", st)
	}
	close(release)
	eventually(t, "slow delivered after release", func() bool { return status(m, "d", "a.slow").Committed == 1 })
}

func TestRestartResumesFromCheckpoint(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	d := New("d1", c.host(t), MustPattern("t"))

	tp := newMemTopic(t, root, "t")
	tp.publish(5)
	m := startManager(t, newMemSource(tp), testOptions(), d)
	eventually(t, "commit 5", func() bool { return status(m, "d1", "t").Committed == 5 })
	stopManager(t, m)
	tp.close()
	first := len(c.requests())

	// "Restart": a new topic object over the same directory, more messages.
	tp2 := newMemTopic(t, root, "t")
	tp2.publish(8)
	m2 := startManager(t, newMemSource(tp2), testOptions(), d)
	eventually(t, "commit 8", func() bool { return status(m2, "d1", "t").Committed == 8 })
	if got, want := offsets(c.requests()[first:]), []int64{5, 6, 7}; !reflect.DeepEqual(got, want) {
		t.Errorf("after restart offsets = %v, want %v (no acknowledged message resent)", got, want)
	}
}

func TestNewDispatcherNameReplaysFromZero(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	tp := newMemTopic(t, root, "t")
	tp.publish(4)
	m := startManager(t, newMemSource(tp), testOptions(), New("old", c.host(t), MustPattern("t")))
	eventually(t, "old commit 4", func() bool { return status(m, "old", "t").Committed == 4 })
	stopManager(t, m)

	m2 := startManager(t, newMemSource(tp), testOptions(),
		New("old", c.host(t), MustPattern("t")), New("new", c.host(t), MustPattern("**")))
	eventually(t, "new commit 4", func() bool { return status(m2, "new", "t").Committed == 4 })
	if got, want := offsets(c.requestsFor("t", "new")), []int64{0, 1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("new dispatcher offsets = %v, want %v", got, want)
	}
	if got := len(c.requestsFor("t", "old")); got != 4 {
		t.Errorf("old dispatcher got %d requests, want 4 (none after restart)", got)
	}
}

func TestTopicAddedAfterStart(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	src := newMemSource()
	m := startManager(t, src, testOptions(), New("d", c.host(t), MustPattern("news.**")))
	if len(m.Status()) != 0 {
		t.Fatalf("workers before any topic: %+v", m.Status())
	}
	world := newMemTopic(t, root, "news.world.europe")
	src.add(world)
	src.add(newMemTopic(t, root, "sports"))
	world.publish(3)
	eventually(t, "commit 3", func() bool { return status(m, "d", "news.world.europe").Committed == 3 })
	// The same topic handed over twice never gets a second worker.
	src.add(world)
	world.publish(1)
	eventually(t, "commit 4", func() bool { return status(m, "d", "news.world.europe").Committed == 4 })
	if got, want := offsets(c.requests()), []int64{0, 1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
	if n := len(m.Status()); n != 1 {
		t.Errorf("workers = %d, want 1", n)
	}
}

func TestTopicRecreatedGetsNewWorker(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	tp := newMemTopic(t, root, "t")
	tp.publish(2)
	src := newMemSource(tp)
	m := startManager(t, src, testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "commit 2", func() bool { return status(m, "d", "t").Committed == 2 })
	tp.close()
	eventually(t, "worker ended", func() bool { return !status(m, "d", "t").Running })

	again := newMemTopic(t, root, "t")
	again.publish(3)
	src.add(again)
	eventually(t, "commit 3", func() bool { s := status(m, "d", "t"); return s.Running && s.Committed == 3 })
	if got, want := offsets(c.requests()), []int64{0, 1, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
}

func TestCorruptEntrySkipped(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	tp := newMemTopic(t, root, "t")
	tp.publish(7)
	tp.setCorrupt(0, 2, 3, 6)
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "commit 7", func() bool { return status(m, "d", "t").Committed == 7 })
	if got, want := offsets(c.requests()), []int64{1, 4, 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
	if st := status(m, "d", "t"); st.Skipped != 4 || st.Delivered != 3 {
		t.Errorf("status = %+v", st)
	}
	if got := checkpointFile(t, tp.dir, "d"); got != 7 {
		t.Errorf("checkpoint file = %d, want 7", got)
	}
}

func TestIntervalCommitPolicy(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	tp := newMemTopic(t, root, "t")
	tp.publish(25)
	policy := CommitPolicy{Mode: Interval, Interval: time.Hour, MaxCount: 10}
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("t")).WithCommitPolicy(policy))
	eventually(t, "commit 25", func() bool { return status(m, "d", "t").Committed == 25 })
	// 10, 20, then 25 when idle: 3 commits instead of 25.
	if st := status(m, "d", "t"); st.Commits != 3 || st.Delivered != 25 {
		t.Errorf("status = %+v, want 3 commits", st)
	}
	if got := checkpointFile(t, tp.dir, "d"); got != 25 {
		t.Errorf("checkpoint file = %d, want 25", got)
	}
}

func TestIntervalCommitCrashAndStop(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Offset == 15 {
			<-req.Context().Done() // hang until the attempt is abandoned
			return
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, root, "t")
	tp.publish(20)
	policy := CommitPolicy{Mode: Interval, Interval: time.Hour, MaxCount: 10}
	d := New("d", c.host(t), MustPattern("t")).WithCommitPolicy(policy)
	m := startManager(t, newMemSource(tp), testOptions(), d)
	eventually(t, "hang at 15", func() bool {
		rs := c.requests()
		return len(rs) > 0 && rs[len(rs)-1].Offset == 15
	})
	// What a crash now would leave on disk: the commit at 10.
	crash := checkpointFile(t, tp.dir, "d")
	if crash != 10 {
		t.Fatalf("checkpoint while hanging = %d, want 10", crash)
	}
	// A graceful stop commits what was ACKed (up to 15), not the hanging one.
	stopManager(t, m)
	if got := checkpointFile(t, tp.dir, "d"); got != 15 {
		t.Errorf("checkpoint after stop = %d, want 15", got)
	}

	// Restart from the crash image: redelivery starts at the committed
	// point (10), never before it.
	crashRoot := t.TempDir()
	img := newMemTopic(t, crashRoot, "t")
	img.publish(20)
	cpDir := filepath.Join(img.dir, "checkpoints")
	if err := os.MkdirAll(cpDir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tp.dir, "checkpoints", "d.checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	b = append(b[:0:0], 0, 0, 0, 0, 0, 0, 0, 10)
	if err := os.WriteFile(filepath.Join(cpDir, "d.checkpoint"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	c2 := newConsumer(t, nil)
	m2 := startManager(t, newMemSource(img), testOptions(), New("d", c2.host(t), MustPattern("t")).WithCommitPolicy(policy))
	eventually(t, "commit 20", func() bool { return status(m2, "d", "t").Committed == 20 })
	if got := offsets(c2.requests()); got[0] != 10 || len(got) != 10 {
		t.Errorf("redelivered offsets = %v, want 10..19", got)
	}
}

func TestStopDuringHangingAttempt(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Offset == 2 {
			<-req.Context().Done()
			return
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, root, "t")
	tp.publish(5)
	// Default 30 s per-attempt timeout: only Stop can end the attempt.
	opts := testOptions()
	opts.DefaultTimeout = 0
	m := startManager(t, newMemSource(tp), opts, New("d", c.host(t), MustPattern("t")))
	eventually(t, "hang at 2", func() bool { return len(c.requests()) == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if got := checkpointFile(t, tp.dir, "d"); got != 2 {
		t.Errorf("checkpoint = %d, want 2 (the abandoned attempt is not committed)", got)
	}
	if st := status(m, "d", "t"); st.Running || st.Committed != 2 || st.Abnormal != 0 {
		t.Errorf("status = %+v", st)
	}
	if n := len(c.requests()); n != 3 {
		t.Errorf("requests = %d, want 3", n)
	}
}

// A failed checkpoint commit holds delivery back and is retried with
// backoff; nothing after it is delivered until it succeeds, nothing is
// skipped, and the worker keeps running.
func TestCommitFailureRetriesWithoutSkipping(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	tp := newMemTopic(t, root, "t")
	ffs := &faultFS{}
	ffs.failSync.Store(true)
	tp.fs = ffs
	tp.publish(3)
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "commit retried in backoff", func() bool { st := status(m, "d", "t"); return st.Backoff })
	st := status(m, "d", "t")
	if !st.Running || st.Committed != 0 || st.Commits != 0 {
		t.Errorf("status while failing = %+v", st)
	}
	if got, want := offsets(c.requests()), []int64{0}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v (no delivery past an uncommitted message)", got, want)
	}
	ffs.failSync.Store(false)
	eventually(t, "all committed after the fault clears", func() bool { return status(m, "d", "t").Committed == 3 })
	if got, want := offsets(c.requests()), []int64{0, 1, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("offsets = %v, want %v", got, want)
	}
}

func TestManagerLifecycleErrors(t *testing.T) {
	set, err := SetOf()
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(set, newMemSource(), NewHTTPSender(Options{}), Options{}, zaptest.NewLogger(t))
	if err := m.Stop(context.Background()); err != nil {
		t.Errorf("stop before start: %v", err)
	}
	m = NewManager(set, newMemSource(), NewHTTPSender(Options{}), Options{}, zaptest.NewLogger(t))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err == nil {
		t.Error("second start succeeded")
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Error(err)
	}
}

func TestOptionsDefaults(t *testing.T) {
	got := Options{}.WithDefaults()
	want := Options{MaxResends: 3, BackoffInitial: time.Second, BackoffMax: time.Minute, DefaultTimeout: 30 * time.Second,
		MaxResponseBytes: 64 << 10, DefaultPath: "/mmmq/messages", BatchSize: 256}
	if got != want {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	if o := (Options{MaxResends: -1}).WithDefaults(); o.MaxResends != 0 {
		t.Errorf("MaxResends -1 → %d, want 0", o.MaxResends)
	}
	b := NewManager(nil, nil, nil, Options{}, nil).newBackoff()
	var seq []time.Duration
	for i := 0; i < 8; i++ {
		seq = append(seq, b.NextBackOff())
	}
	wantSeq := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i := range wantSeq {
		if seq[i] != wantSeq[i]*time.Second {
			t.Fatalf("backoff sequence = %v, want 1s doubling capped at 60s", seq)
		}
	}
}
