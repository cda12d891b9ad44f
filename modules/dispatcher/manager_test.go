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

	"github.com/mmmq/mmmq/modules/contract"
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

	waitCommitted(t, m, "order-dispatcher", "order.created", 5)
	// The idle worker wakes on Notify for messages published later.
	orders.publish(2)
	waitCommitted(t, m, "order-dispatcher", "order.created", 7)

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
	wantCheckpoint(t, orders.dir, "order-dispatcher", 7)
	st := status(m, "order-dispatcher", "order.created")
	// 8 commits: the new dispatcher's checkpoint written at its start
	// offset, then one per ACK.
	if st.Delivered != 7 || st.Commits != 8 || st.Next != 7 || !st.Running {
		t.Errorf("status = %+v", st)
	}
	if len(m.Status()) != 1 {
		t.Errorf("workers = %+v, want only order.created", m.Status())
	}
}

func TestNackResendsThenSkipsAndCommits(t *testing.T) {
	sendsOf0 := callCounter()
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		switch r.Offset {
		case 0: // NACK twice, then ACK: delivered, not exhausted
			if sendsOf0() <= 2 {
				answer(w, NACK)
				return
			}
		case 1: // always NACK
			answer(w, NACK)
			return
		}
		answer(w, ACK)
	})
	tp, m := deliverOne(t, "order.new", 3, testOptions(), New("d", c.host(t), MustPattern("order.*")))
	waitCommitted(t, m, "d", "order.new", 3)

	var attempts []int
	for _, r := range c.requests() {
		if r.Offset == 1 {
			attempts = append(attempts, r.Attempt)
		}
	}
	// The original Java mmmq: at most 3 resends, so 4 attempts in all.
	if want := []int{1, 2, 3, 4}; !reflect.DeepEqual(attempts, want) {
		t.Errorf("attempts of offset 1 = %v, want %v", attempts, want)
	}
	wantOffsets(t, "offsets", c.requests(), 0, 0, 0, 1, 1, 1, 1, 2)
	st := status(m, "d", "order.new")
	if st.Delivered != 2 || st.Nacked != 6 || st.Exhausted != 1 || st.Abnormal != 0 {
		t.Errorf("status = %+v", st)
	}
	wantCheckpoint(t, tp.dir, "d", 3)
}

func TestAbnormalBacksOffWithoutReordering(t *testing.T) {
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
	_, m := deliverOne(t, "pay.done", 3, testOptions(), New("d", c.host(t), MustPattern("pay.*")))
	waitCommitted(t, m, "d", "pay.done", 3)

	wantOffsets(t, "offsets", c.requests(), 0, 1, 1, 1, 1, 1, 1, 1, 2)
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
	sends := callCounter()
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/elsewhere" {
			answer(w, ACK)
			return
		}
		if sends() <= 2 {
			http.Redirect(w, req, "/elsewhere", http.StatusTemporaryRedirect)
			return
		}
		answer(w, ACK)
	})
	_, m := deliverOne(t, "r", 1, testOptions(), New("d", c.host(t), MustPattern("r")))
	waitCommitted(t, m, "d", "r", 1)
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
	sends := callCounter()
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if sends() == 1 {
			// Valid JSON saying ACK, but over the cap.
			w.Write([]byte(`{"acknowledgement":"ACK","pad":"` + strings.Repeat("x", 4096) + `"}`))
			return
		}
		answer(w, ACK)
	})
	opts := testOptions()
	opts.MaxResponseBytes = 1024
	_, m := deliverOne(t, "big", 1, opts, New("d", c.host(t), MustPattern("big")))
	waitCommitted(t, m, "d", "big", 1)
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

	waitCommitted(t, m, "d", "a.fast", 20) // while a.slow hangs
	eventually(t, "slow attempt timed out", func() bool { return status(m, "d", "a.slow").Abnormal >= 2 })
	if st := status(m, "d", "a.slow"); st.Committed != 0 || st.Delivered != 0 {
		t.Fatalf("slow status = %+v, want nothing committed", st)
	}
	close(release)
	waitCommitted(t, m, "d", "a.slow", 1)
}

func TestRestartResumesFromCheckpoint(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	d := New("d1", c.host(t), MustPattern("t"))

	tp := newMemTopic(t, root, "t")
	tp.publish(5)
	m := startManager(t, newMemSource(tp), testOptions(), d)
	waitCommitted(t, m, "d1", "t", 5)
	stopManager(t, m)
	tp.close()
	first := len(c.requests())

	// "Restart": a new topic object over the same directory, more messages.
	tp2 := newMemTopic(t, root, "t")
	tp2.publish(8)
	m2 := startManager(t, newMemSource(tp2), testOptions(), d)
	waitCommitted(t, m2, "d1", "t", 8)
	// No acknowledged message is sent again.
	wantOffsets(t, "offsets after restart", c.requests()[first:], 5, 6, 7)
}

func TestNewDispatcherNameReplaysFromZero(t *testing.T) {
	c := newConsumer(t, nil)
	tp, m := deliverOne(t, "t", 4, testOptions(), New("old", c.host(t), MustPattern("t")))
	waitCommitted(t, m, "old", "t", 4)
	stopManager(t, m)

	m2 := startManager(t, newMemSource(tp), testOptions(),
		New("old", c.host(t), MustPattern("t")), New("new", c.host(t), MustPattern("**")))
	waitCommitted(t, m2, "new", "t", 4)
	wantOffsets(t, "new dispatcher offsets", c.requestsFor("t", "new"), 0, 1, 2, 3)
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
	waitCommitted(t, m, "d", "news.world.europe", 3)
	// The same topic handed over twice never gets a second worker.
	src.add(world)
	world.publish(1)
	waitCommitted(t, m, "d", "news.world.europe", 4)
	wantOffsets(t, "offsets", c.requests(), 0, 1, 2, 3)
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
	waitCommitted(t, m, "d", "t", 2)
	tp.close()
	eventually(t, "worker ended", func() bool { return !status(m, "d", "t").Running })

	again := newMemTopic(t, root, "t")
	again.publish(3)
	src.add(again)
	eventually(t, "commit 3", func() bool { s := status(m, "d", "t"); return s.Running && s.Committed == 3 })
	wantOffsets(t, "offsets", c.requests(), 0, 1, 2)
}

func TestCorruptEntrySkipped(t *testing.T) {
	c := newConsumer(t, nil)
	tp, m := deliverOne(t, "t", 7, testOptions(), New("d", c.host(t), MustPattern("t")), func(tp *memTopic) {
		tp.setCorrupt(0, 2, 3, 6)
	})
	waitCommitted(t, m, "d", "t", 7)
	wantOffsets(t, "offsets", c.requests(), 1, 4, 5)
	if st := status(m, "d", "t"); st.Skipped != 4 || st.Delivered != 3 {
		t.Errorf("status = %+v", st)
	}
	wantCheckpoint(t, tp.dir, "d", 7)
}

func TestIntervalCommitPolicy(t *testing.T) {
	c := newConsumer(t, nil)
	policy := CommitPolicy{Mode: Interval, Interval: time.Hour, MaxCount: 10}
	tp, m := deliverOne(t, "t", 25, testOptions(), New("d", c.host(t), MustPattern("t")).WithCommitPolicy(policy))
	waitCommitted(t, m, "d", "t", 25)
	// The start offset (a new dispatcher's checkpoint), then 10, 20, and
	// 25 when idle: 4 commits instead of 26.
	if st := status(m, "d", "t"); st.Commits != 4 || st.Delivered != 25 {
		t.Errorf("status = %+v, want 4 commits", st)
	}
	wantCheckpoint(t, tp.dir, "d", 25)
}

func TestIntervalCommitCrashAndStop(t *testing.T) {
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Offset == 15 {
			<-req.Context().Done() // hang until the attempt is abandoned
			return
		}
		answer(w, ACK)
	})
	policy := CommitPolicy{Mode: Interval, Interval: time.Hour, MaxCount: 10}
	tp, m := deliverOne(t, "t", 20, testOptions(), New("d", c.host(t), MustPattern("t")).WithCommitPolicy(policy))
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
	wantCheckpoint(t, tp.dir, "d", 15)

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
	waitCommitted(t, m2, "d", "t", 20)
	if got := offsets(c2.requests()); got[0] != 10 || len(got) != 10 {
		t.Errorf("redelivered offsets = %v, want 10..19", got)
	}
}

func TestStopDuringHangingAttempt(t *testing.T) {
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Offset == 2 {
			<-req.Context().Done()
			return
		}
		answer(w, ACK)
	})
	// Default 30 s per-attempt timeout: only Stop can end the attempt.
	opts := testOptions()
	opts.DefaultTimeout = 0
	tp, m := deliverOne(t, "t", 5, opts, New("d", c.host(t), MustPattern("t")))
	eventually(t, "hang at 2", func() bool { return len(c.requests()) == 3 })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	wantCheckpoint(t, tp.dir, "d", 2) // the abandoned attempt is not committed
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
	c := newConsumer(t, nil)
	ffs := &faultFS{}
	ffs.failSync.Store(true)
	_, m := deliverOne(t, "t", 3, testOptions(), New("d", c.host(t), MustPattern("t")), func(tp *memTopic) { tp.fs = ffs })
	eventually(t, "commit retried in backoff", func() bool { st := status(m, "d", "t"); return st.Backoff })
	st := status(m, "d", "t")
	if !st.Running || st.Committed != 0 || st.Commits != 0 {
		t.Errorf("status while failing = %+v", st)
	}
	// No delivery past an uncommitted checkpoint: a new dispatcher first
	// writes its checkpoint at its start offset, so nothing is sent yet.
	if rs := c.requests(); len(rs) != 0 {
		t.Fatalf("delivered %v while the start checkpoint could not be written", offsets(rs))
	}
	ffs.failSync.Store(false)
	waitCommitted(t, m, "d", "t", 3)
	wantOffsets(t, "offsets", c.requests(), 0, 1, 2)
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
		MaxResponseBytes: 64 << 10, DefaultPath: "/mmmq/messages", BatchSize: 256, StopGrace: 5 * time.Second, UserAgent: "mmmq/" + contract.Version, NodeName: hostName()}
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
