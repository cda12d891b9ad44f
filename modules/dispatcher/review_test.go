package dispatcher

// Tests written while reviewing the delivery window (loop.go) and the
// worker life cycle. Each one states the rule it checks.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/mmmq/mmmq/modules/storage"
)

// README ("More than one message at a time"): "NACKed messages are resent
// (then dead-lettered) on their own." A message NACKed inside a batch must
// not be resent together with first sends of later messages: a poison
// message would otherwise drag them into its NACKs, abnormal answers and
// backoffs.
func TestBatchNackedMessageResentAlone(t *testing.T) {
	var mu sync.Mutex
	var pushes [][]int64
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		var msgs []struct{ Offset int64 }
		if err := json.Unmarshal([]byte(r.Body), &msgs); err != nil {
			t.Errorf("batch body %s: %v", r.Body, err)
		}
		var offs []int64
		var results []map[string]any
		for _, m := range msgs {
			offs = append(offs, m.Offset)
			ack := "ACK"
			if m.Offset == 1 {
				ack = "NACK" // poison: 4 attempts, then the dead letter
			}
			results = append(results, map[string]any{"offset": m.Offset, "acknowledgement": ack})
		}
		mu.Lock()
		pushes = append(pushes, offs)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
	})
	opts := testOptions()
	opts.BatchSize = 64 // the whole topic fits in the window
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(12)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	m := startWithPublisher(t, src, pub, opts, New("d", c.host(t), MustPattern("t")).WithBatch(Batch{MaxMessages: 4}))
	waitCommitted(t, m, "d", "t", 12)

	mu.Lock()
	defer mu.Unlock()
	sends := 0
	for _, p := range pushes {
		for _, o := range p {
			if o != 1 {
				continue
			}
			sends++
			if sends > 1 && !reflect.DeepEqual(p, []int64{1}) {
				t.Errorf("resend %d of NACKed offset 1 went in push %v, want it alone (pushes %v)", sends-1, p, pushes)
			}
		}
	}
	if sends != 4 {
		t.Errorf("offset 1 sent %d times, want 4 (pushes %v)", sends, pushes)
	}
}

// Source: "with a plain Source, workers end only when the topic's log
// closes"; Manager.ended starts the worker of a topic re-created under the
// same name only once the old worker has ended. A worker whose window is
// full (a backlog of at least BatchSize messages) does not watch the topic
// at all: with a consumer that keeps answering abnormally it never commits,
// so it never learns that the topic closed, pushes the closed topic's
// messages for ever, and the re-created topic is never delivered.
func TestClosedTopicEndsWorkerWhenWindowIsFull(t *testing.T) {
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if strings.Contains(r.Body, `"again"`) {
			answer(w, ACK)
			return
		}
		http.Error(w, "down", http.StatusServiceUnavailable) // the old topic: abnormal for ever
	})
	root := t.TempDir()
	tp := newMemTopic(t, root, "t")
	tp.publish(10) // BatchSize 4 (testOptions): the window is full
	src := newMemSource(tp)
	m := startManager(t, src, testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "abnormal answers", func() bool { return status(m, "d", "t").Abnormal >= 2 })

	tp.close()
	again := newMemTopic(t, root, "t")
	again.appendStored([]byte(`{"topic":{"name":"t"},"content":"again","id":"a0","timestamp":1,"headers":{}}`))
	src.add(again)

	deadline := time.Now().Add(3 * time.Second)
	for {
		st := status(m, "d", "t")
		if st.Running && st.Committed == 1 && st.Delivered == 1 {
			return // the old worker ended and the new topic's worker delivered
		}
		if time.Now().After(deadline) {
			t.Fatalf("3 s after its topic closed the old worker still runs (status %+v); the re-created topic is not delivered", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readCountingTopic records how far the worker has read ahead.
type readCountingTopic struct {
	*memTopic
	maxRead atomic.Int64 // one past the highest offset returned by ReadBatch
}

func (rt *readCountingTopic) ReadBatch(from int64, max int) ([]storage.Entry, error) {
	es, err := rt.memTopic.ReadBatch(from, max)
	if n := len(es); n > 0 {
		for end := es[n-1].Offset + 1; ; {
			cur := rt.maxRead.Load()
			if end <= cur || rt.maxRead.CompareAndSwap(cur, end) {
				break
			}
		}
	}
	return es, err
}

// No unbounded memory growth: the window holds up to
// max(BatchSize, maxInFlight*MaxMessages) messages whatever their size, so
// with batch max-bytes small next to max-messages it reads (and keeps in
// memory) far more than can ever be in flight: with the limits
// (max-in-flight 1024, max-messages 10000) that is 10,240,000 messages per
// worker although at most 1024 pushes of max-bytes each can be outstanding.
// Here 2 pushes of at most 1 KiB (about 7 messages each) can be in flight,
// but the worker reads 2000 messages ahead while the consumer is stuck.
func TestWindowReadAheadBoundedByBatchBytes(t *testing.T) {
	started := make(chan struct{}, 16)
	c := newConsumer(t, func(_ received, _ http.ResponseWriter, req *http.Request) {
		started <- struct{}{}
		<-req.Context().Done() // stuck until the worker gives up
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(3000)
	rt := &readCountingTopic{memTopic: tp}
	opts := testOptions()
	opts.BatchSize = 16
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(2).WithBatch(Batch{MaxMessages: 1000, MaxBytes: 1024})
	startManager(t, newMemSource(rt), opts, d)
	<-started
	<-started
	time.Sleep(200 * time.Millisecond) // let the worker read what it wants to
	// 2 pushes in flight of ~7 messages (1 KiB) each, plus one read batch
	// (16) and a batch's worth in reserve would be ~50; allow 100.
	t.Logf("read ahead: %d", rt.maxRead.Load())
	if got := rt.maxRead.Load(); got > 100 {
		t.Errorf("the worker read %d messages ahead of its checkpoint with 2 pushes of at most 1 KiB in flight; want at most 100", got)
	}
}

// WorkerStatus.Backoff: "true while the current message is being retried
// after an abnormal response". With max-in-flight > 1 a normal answer to
// another push clears it while the worker still waits out the backoff of
// the head message (and the state then says "delivering", NextRetry zero).
// The commit and dead-letter retries (commit, exhaust) clear it the same
// way when they end: the flag is shared by three waits.
func TestBackoffStatusKeptWhileHeadWaits(t *testing.T) {
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Offset == 0 {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		time.Sleep(100 * time.Millisecond) // answered after offset 0's 503
		answer(w, ACK)
	})
	opts := testOptions()
	opts.BackoffInitial, opts.BackoffMax = 5*time.Second, 5*time.Second
	_, m := deliverOne(t, "t", 2, opts, New("d", c.host(t), MustPattern("t")).WithMaxInFlight(2))
	eventually(t, "offset 1 ACKed", func() bool { return status(m, "d", "t").Delivered == 1 })
	time.Sleep(50 * time.Millisecond)
	st := status(m, "d", "t")
	if n := len(c.requestsFor("t", "d")); n != 2 {
		return // the normal answer ended the wait: then not backing off is right
	}
	// Offset 0 still waits out its 5 s backoff: the status must say so.
	if !st.Backoff || st.State != StateBackoff || st.NextRetry.IsZero() {
		t.Errorf("status while offset 0 waits out its backoff: Backoff %v, State %q, NextRetry %v; want true, %q, set",
			st.Backoff, st.State, st.NextRetry, StateBackoff)
	}
}

// Stop during a dead-letter retry: the worker stops promptly, the
// checkpoint stays before the message (it is delivered again after a
// restart), and the status does not count it as exhausted: Exhausted -
// DeadLettered is documented as "logged and skipped (dead letters off)",
// which this message was not.
func TestStopDuringDeadLetterRetry(t *testing.T) {
	c := newConsumer(t, func(_ received, w http.ResponseWriter, _ *http.Request) { answer(w, NACK) })
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(2)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.fail = 1 << 30 // the dead-letter topic cannot be appended to
	var appends atomic.Int32
	pub.before = func(string) { appends.Add(1) }
	m := startWithPublisher(t, src, pub, testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "dead-letter append retried", func() bool { return appends.Load() >= 3 })

	start := time.Now()
	stopManager(t, m)
	if el := time.Since(start); el > time.Second {
		t.Errorf("stop took %s during a dead-letter retry", el)
	}
	wantCheckpoint(t, tp.dir, "d", 0)
	st := status(m, "d", "t")
	if st.Running || st.Committed != 0 || st.DeadLettered != 0 {
		t.Errorf("status = %+v", st)
	}
	if st.Exhausted != st.DeadLettered {
		t.Errorf("Exhausted %d, DeadLettered %d after a stop during the dead-letter retry: the message counts as logged and skipped, but it was neither",
			st.Exhausted, st.DeadLettered)
	}
}

// Matches: "a dead letter cannot loop back to the consumer that refused
// it". It can when the dispatcher's own dead-letter topic matches its
// patterns: a custom dead-letter topic under a pattern it delivers, or the
// default dead-letter.<name> for a dispatcher of "dead-letter.**" (one that
// processes dead letters). Each dead letter is then pushed to the same
// consumer, NACKed 4 times and dead-lettered again, for ever: the
// dead-letter topic grows without bound.
func TestOwnDeadLetterTopicNeverDelivered(t *testing.T) {
	for _, tc := range []struct {
		name, topic, dl string
		d               func(h Host) *Dispatcher
	}{
		{"custom", "t.a", "t.dl", func(h Host) *Dispatcher { return New("d", h, MustPattern("t.*")).WithDeadLetter("t.dl") }},
		{"dead-letter processor", "dead-letter.x", "dead-letter.dlq", func(h Host) *Dispatcher {
			return New("dlq", h, MustPattern("dead-letter.**"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConsumer(t, func(_ received, w http.ResponseWriter, _ *http.Request) { answer(w, NACK) })
			d := tc.d(c.host(t))
			tp := newMemTopic(t, t.TempDir(), tc.topic)
			tp.publish(1)
			src := newMemSource(tp)
			pub := newMemPublisher(t, src)
			m := startWithPublisher(t, src, pub, testOptions(), d)
			waitCommitted(t, m, d.Name(), tc.topic, 1)
			time.Sleep(300 * time.Millisecond)
			if n := len(pub.published(tc.dl)); n != 1 {
				t.Errorf("%d dead letters in %s, want 1: dead letters loop back to the dispatcher that refused them", n, tc.dl)
			}
			if rs := c.requestsFor(tc.dl, d.Name()); len(rs) > 0 {
				t.Errorf("%d pushes of its own dead-letter topic %s to dispatcher %s", len(rs), tc.dl, d.Name())
			}
		})
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// No busy loop: a worker that waits (for data, out a backoff, for a batch
// to fill, for a stuck consumer with a full window, to retry a failed read
// or dead-letter append) uses next to no CPU. Measured on the whole test
// process over 1 s; a spinning worker burns a full core (~1 s).
func TestIdleWorkerUsesNoCPU(t *testing.T) {
	stuck := func(_ received, _ http.ResponseWriter, req *http.Request) { <-req.Context().Done() }
	down := func(_ received, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	nack := func(_ received, w http.ResponseWriter, _ *http.Request) { answer(w, NACK) }
	for _, tc := range []struct {
		name    string
		n       int
		respond func(received, http.ResponseWriter, *http.Request)
		d       func(*Dispatcher) *Dispatcher
		setup   func(*memTopic, *memPublisher)
	}{
		{"waiting for data", 3, nil, nil, nil},
		{"backoff", 3, down, nil, nil},
		{"backoff with 8 in flight and jitter", 40, down, func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(8).WithBackoffJitter(true) }, nil},
		{"batch max-wait", 3, nil, func(d *Dispatcher) *Dispatcher {
			return d.WithBatch(Batch{MaxMessages: 10, MaxWait: time.Hour})
		}, nil},
		{"full window, stuck consumer", 40, stuck, func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(2) }, nil},
		{"window full by bytes, stuck consumer", 200, stuck, func(d *Dispatcher) *Dispatcher {
			return d.WithMaxInFlight(2).WithBatch(Batch{MaxMessages: 100, MaxBytes: 300})
		}, nil},
		{"dead-letter append retry", 3, nack, nil, func(_ *memTopic, p *memPublisher) { p.fail = 1 << 30 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConsumer(t, tc.respond)
			opts := testOptions()
			opts.BackoffInitial, opts.BackoffMax = time.Hour, time.Hour
			if tc.setup != nil {
				opts.BackoffInitial, opts.BackoffMax = 200*time.Millisecond, 200*time.Millisecond
			}
			d := New("d", c.host(t), MustPattern("t"))
			if tc.d != nil {
				d = tc.d(d)
			}
			tp := newMemTopic(t, t.TempDir(), "t")
			tp.publish(tc.n)
			src := newMemSource(tp)
			pub := newMemPublisher(t, src)
			if tc.setup != nil {
				tc.setup(tp, pub)
			}
			m := startWithPublisher(t, src, pub, opts, d)
			time.Sleep(300 * time.Millisecond)
			before := processCPU()
			time.Sleep(time.Second)
			used := processCPU() - before
			t.Logf("%s: %s CPU in 1 s (status %+v)", tc.name, used, status(m, "d", "t"))
			if used > 150*time.Millisecond {
				t.Errorf("%s: %s CPU in 1 s while waiting: a busy loop", tc.name, used)
			}
		})
	}
}

// A consumer controls the text of an abnormal answer: abnormal() appends
// the raw Location header of a 3xx ("redirect to ... not followed"), and
// Go's HTTP client accepts obs-text (bytes 0x80-0xFF) in header values. That
// text becomes the dead letter's mmmq-dl-last-error header (AbnormalLimit),
// and deadLetter panics ("encoding cannot fail") when EncodeMessage refuses
// a header that is not valid UTF-8: the panic is in a worker goroutine, so
// one misbehaving consumer takes the whole broker down. Shown here end to
// end through the real HTTPSender, recovering the panic so the test binary
// survives (the worker would not).
func TestDeadLetterOfNonUTF8AbnormalAnswerDoesNotPanic(t *testing.T) {
	c := newConsumer(t, func(_ received, w http.ResponseWriter, _ *http.Request) {
		w.Header()["Location"] = []string{"http://elsewhere/\xff\xfe"}
		w.WriteHeader(http.StatusFound)
	})
	d := New("d", c.host(t), MustPattern("t")).WithAbnormalLimit(AbnormalLimit{MaxAttempts: 1})
	payload := storedMessage("t", 0)
	_, err := NewHTTPSender(testOptions()).Push(context.Background(), Push{Messages: []Delivery{{Dispatcher: d, Topic: "t", Offset: 0, Attempt: 1, Body: payload}}})
	if err == nil {
		t.Fatal("a 302 was not abnormal")
	}
	m := &msg{e: storage.Entry{Offset: 0, Payload: payload}, attempts: 1, abnormals: 1, lastStatus: http.StatusFound, lastErr: err.Error()}
	var b []byte
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("deadLetter panicked (a worker goroutine would crash the broker): %v\nlast error %q", p, m.lastErr)
			}
		}()
		b = deadLetter(m, "d", "t", "dead-letter.d", ReasonAbnormal, false)
	}()
	if b != nil && !utf8.Valid(b) {
		t.Errorf("dead letter is not valid UTF-8: %q", b)
	}
}

// The same, end to end: a dispatcher with max-abnormal-attempts 1 whose
// consumer answers a 302 with such a Location kills the process (run in a
// child process, which must deliver and exit normally).
func TestNonUTF8AbnormalAnswerDoesNotCrashTheProcess(t *testing.T) {
	if os.Getenv("MMMQ_REVIEW_CHILD") == "1" {
		c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
			if r.Offset == 0 {
				w.Header()["Location"] = []string{"http://elsewhere/\xff\xfe"}
				w.WriteHeader(http.StatusFound)
				return
			}
			answer(w, ACK)
		})
		tp := newMemTopic(t, t.TempDir(), "t")
		tp.publish(2)
		src := newMemSource(tp)
		pub := newMemPublisher(t, src)
		d := New("d", c.host(t), MustPattern("t")).WithAbnormalLimit(AbnormalLimit{MaxAttempts: 1})
		m := startWithPublisher(t, src, pub, testOptions(), d)
		waitCommitted(t, m, "d", "t", 2)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestNonUTF8AbnormalAnswerDoesNotCrashTheProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "MMMQ_REVIEW_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		i := strings.Index(string(out), "panic:")
		if i < 0 {
			i = max(0, len(out)-2000)
		}
		t.Fatalf("the child process failed (%v): one consumer answer crashes the broker:\n%s", err, truncateUTF8(string(out[i:]), 1500))
	}
}
