package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
)

// TestBatchIntervalCommitPolicy: batches do not add commits to the
// interval policy. 25 messages in batches of 5, committed every 10: the
// start offset, then 10, 20 and 25 when idle, 4 commits, as without
// batches (TestIntervalCommitPolicy). The window holds exactly one batch
// (its capacity is the larger of the read batch, 4, and the batch, 5):
// when the answer came, the worker used to look for new messages before
// it removed the finished ones from the window, found it full, saw
// nothing to send and committed as if idle after every batch (6 commits).
func TestBatchIntervalCommitPolicy(t *testing.T) {
	c := newConsumer(t, nil)
	policy := CommitPolicy{Mode: Interval, Interval: time.Hour, MaxCount: 10}
	d := New("d", c.host(t), MustPattern("t")).WithCommitPolicy(policy).WithBatch(Batch{MaxMessages: 5})
	tp, m := deliverOne(t, "t", 25, testOptions(), d)
	waitCommitted(t, m, "d", "t", 25)
	if st := status(m, "d", "t"); st.Commits != 4 || st.Delivered != 25 {
		t.Errorf("status = %+v, want 4 commits, 25 delivered", st)
	}
	if n := len(c.requests()); n != 5 {
		t.Errorf("%d pushes, want 5 batches of 5", n)
	}
	wantCheckpoint(t, tp.dir, "d", 25)
}

// batchOffsets returns the "offset" members of a batch push body.
func batchOffsets(t *testing.T, body string) []int64 {
	t.Helper()
	var ms []struct {
		Offset *int64 `json:"offset"`
	}
	if err := json.Unmarshal([]byte(body), &ms); err != nil {
		t.Errorf("batch body: %v", err)
		return nil
	}
	out := make([]int64, len(ms))
	for i, m := range ms {
		if m.Offset == nil {
			t.Errorf("batch element %d has no offset", i)
			return nil
		}
		out[i] = *m.Offset
	}
	return out
}

// TestWindowDeadLetterPoison: with up to 4 batches of up to 3 messages in
// flight, a consumer that NACKs offset 4 on every attempt (per-offset
// results) and ACKs the rest. Offset 4 is sent 4 times, dead-lettered once
// (the mmmq-dl-* headers, a fresh id), every other offset is ACKed, and the
// checkpoint reaches 10.
func TestWindowDeadLetterPoison(t *testing.T) {
	var mu sync.Mutex
	sent := map[int64]int{}
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		type result struct {
			Offset          int64  `json:"offset"`
			Acknowledgement string `json:"acknowledgement"`
		}
		var res []result
		mu.Lock()
		for _, off := range batchOffsets(t, r.Body) {
			sent[off]++
			o := ACK
			if off == 4 {
				o = NACK
			}
			res = append(res, result{off, string(o)})
		}
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"results": res})
	})
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(4).WithBatch(Batch{MaxMessages: 3})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(10)
	set, err := SetOf(d)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	sender := NewHTTPSender(opts)
	m := NewManager(set, src, sender, opts, zaptest.NewLogger(t))
	m.SetPublisher(pub)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopManager(t, m); sender.CloseIdleConnections() })
	waitCommitted(t, m, "d", "t", 10)
	mu.Lock()
	defer mu.Unlock()
	for off := int64(0); off < 10; off++ {
		want := 1
		if off == 4 {
			want = 4
		}
		if sent[off] != want {
			t.Errorf("offset %d sent %d times, want %d", off, sent[off], want)
		}
	}
	stored := pub.published("dead-letter.d")
	if len(stored) != 1 || len(pub.seen) != 1 {
		t.Fatalf("dead letters %q (topics %v), want one in dead-letter.d", stored, pub.seen)
	}
	var dl struct {
		ID      string            `json:"id"`
		Content json.RawMessage   `json:"content"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(stored[0], &dl); err != nil {
		t.Fatal(err)
	}
	h := dl.Headers
	if h[HeaderDLTopic] != "t" || h[HeaderDLOffset] != "4" || h[HeaderDLAttempts] != "4" || h[HeaderDLReason] != ReasonNACKs ||
		h[HeaderDLOriginalID] != "m-4" || h[HeaderDLDispatcher] != "d" || dl.ID == "" || dl.ID == "m-4" || string(dl.Content) != `{"n":4,"id":"inner"}` {
		t.Errorf("dead letter %s", stored[0])
	}
	if st := status(m, "d", "t"); st.DeadLettered != 1 || st.Exhausted != 1 || st.Delivered != 9 || st.Nacked != 4 {
		t.Errorf("status = %+v, want 1 dead-lettered, 9 delivered, 4 NACKs", st)
	}
}

// TestWindowCommitsOnlyTheFinishedPrefix: with up to 4 pushes in flight
// and the consumer holding its answer to offset 0, offsets 1..3 are ACKed
// and counted but the checkpoint stays at 0, and nothing more is sent,
// until offset 0 is ACKed; then it moves to the end.
func TestWindowCommitsOnlyTheFinishedPrefix(t *testing.T) {
	release := make(chan struct{})
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Offset == 0 {
			select {
			case <-release:
			case <-req.Context().Done():
				return
			}
		}
		answer(w, ACK)
	})
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(4)
	tp, m := deliverOne(t, "t", 10, testOptions(), d)
	eventually(t, "offsets 1..3 ACKed", func() bool { return status(m, "d", "t").Delivered == 3 })
	if st := status(m, "d", "t"); st.Committed != 0 || st.Next != 0 {
		t.Errorf("with offset 0 unanswered: committed %d, next %d, want 0, 0", st.Committed, st.Next)
	}
	wantCheckpoint(t, tp.dir, "d", 0)
	// The window (4 messages: the larger of the read batch, 4, and
	// max-in-flight times the batch, 4) is full until offset 0 is done:
	// nothing past offset 3 is read or sent.
	// (The push of offset 0 may reach the consumer after 1..3 answered.)
	eventually(t, "offset 0 pushed", func() bool { return len(c.requests()) >= 4 })
	got := offsets(c.requests())
	slices.Sort(got)
	if !slices.Equal(got, []int64{0, 1, 2, 3}) {
		t.Errorf("pushes with offset 0 unanswered: %v, want offsets 0..3 only", got)
	}
	close(release)
	waitCommitted(t, m, "d", "t", 10)
	wantCheckpoint(t, tp.dir, "d", 10)
}
