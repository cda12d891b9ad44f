package dispatcher

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// faultTopic is a real log whose reads can fail at one offset
// (topicqueuetest.ReadFault: FailAt, Fired).
type faultTopic struct {
	*topicqueuetest.ReadFault
	q *topicqueue.TopicQueue
}

// newFaultTopic stores n stored messages in topic name, one per segment,
// and installs the read fault (off until failAt is set). The registry is
// closed at cleanup, after the managers started later have stopped.
func newFaultTopic(t *testing.T, name string, n int) *faultTopic {
	t.Helper()
	rf := topicqueuetest.NewReadFault(zaptest.NewLogger(t))
	reg := rf.Registry
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	q, err := reg.GetOrCreate(name)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := q.Log().Append(context.Background(), storedMessage(name, i), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	if st := q.Stats(); st.Segments != n {
		t.Fatalf("%d segments for %d messages, want one each", st.Segments, n)
	}
	ft := &faultTopic{ReadFault: rf, q: q}
	return ft
}

// A read error (EIO) on a real log is retried with backoff, never skipped:
// the worker stays at the unreadable offset with its checkpoint unchanged,
// sends nothing past it, and once reads work it delivers that offset and
// the rest, in order.
func TestReadErrorRetriesWithoutSkipping(t *testing.T) {
	const topic = "read.eio"
	ft := newFaultTopic(t, topic, 5)
	ft.FailAt.Store(2)
	c := newConsumer(t, nil)
	m := startManager(t, newMemSource(ft.q), testOptions(), New("d", c.host(t), MustPattern(topic)))

	// Three failed reads of offset 2, or the worker moving past it.
	eventually(t, "three read attempts at offset 2", func() bool {
		return ft.Fired.Load() >= 3 || status(m, "d", topic).Next > 2
	})
	st := status(m, "d", topic)
	if st.Next != 2 || st.Committed != 2 || st.Skipped != 0 || !st.Running {
		t.Fatalf("status while offset 2 is unreadable = %+v, want next 2, committed 2, nothing skipped, running", st)
	}
	wantOffsets(t, "offsets while offset 2 is unreadable", c.requests(), 0, 1)

	ft.FailAt.Store(-1)
	waitCommitted(t, m, "d", topic, 5)
	wantOffsets(t, "offsets", c.requests(), 0, 1, 2, 3, 4)
	if st := status(m, "d", topic); st.Skipped != 0 || st.Delivered != 5 {
		t.Errorf("status = %+v, want 5 delivered, nothing skipped", st)
	}
}

// A bit flipped in a message of a real segment file (media damage the
// startup recovery does not look for: it checks the last entry only) is
// found by its CRC when the dispatcher reads it: that one offset is logged
// and skipped, its neighbours are delivered, and the checkpoint moves past
// it.
func TestBitFlipInSegmentSkipsOneOffset(t *testing.T) {
	const topic = "flip.topic"
	root := t.TempDir()
	reg := topicqueue.New(topicqueue.Options{Root: root, Storage: storage.Options{Logger: zaptest.NewLogger(t)}})
	q, err := reg.GetOrCreate(topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := q.Log().Append(context.Background(), storedMessage(topic, i), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}

	seg := filepath.Join(root, topic, storage.SegmentName(0)+storage.SegmentExt)
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, storedMessage(topic, 2))
	if i < 0 || bytes.Count(raw, storedMessage(topic, 2)) != 1 {
		t.Fatal("message 2 not found once in the segment file")
	}
	i += bytes.Index(storedMessage(topic, 2), []byte(`"m-2"`)) + 1
	raw[i] ^= 0x20 // "m-2" becomes "M-2": still valid JSON, one bit off
	if err := os.WriteFile(seg, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	reg = topicqueue.New(topicqueue.Options{Root: root, Storage: storage.Options{Logger: zaptest.NewLogger(t)}})
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	q, err = reg.Open(topic)
	if err != nil {
		t.Fatalf("open after the bit flip: %v (recovery must not look at old entries)", err)
	}

	m, c, logs := startObserved(t, q, topic, zapcore.ErrorLevel)

	waitCommitted(t, m, "d", topic, 5)
	wantOffsets(t, "offsets", c.requests(), 0, 1, 3, 4)
	if st := status(m, "d", topic); st.Skipped != 1 || st.Delivered != 4 {
		t.Errorf("status = %+v, want 4 delivered, 1 skipped", st)
	}
	wantCheckpoint(t, filepath.Join(root, topic), "d", 5)
	skipped := logs.FilterMessage("corrupt entry skipped; it is not delivered").All()
	if len(skipped) != 1 || skipped[0].ContextMap()["offset"] != int64(2) {
		t.Fatalf("corruption log entries = %+v, want one naming offset 2", skipped)
	}
	if f := skipped[0].ContextMap()["file"]; f != seg {
		t.Errorf("corruption logged for file %v, want %s", f, seg)
	}
}

// A dispatcher whose checkpoint is below the topic's log start offset
// (retention deleted what it had not read) continues from the start
// offset: it logs one warning with the number of messages it never saw,
// counts them in Expired, and delivers everything from there on, in order.
func TestBelowStartOffsetContinuesFromIt(t *testing.T) {
	const topic = "retained.topic"
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir(), Storage: storage.Options{Logger: zaptest.NewLogger(t), SegmentMaxBytes: 512}})
	t.Cleanup(func() {
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	q, err := reg.GetOrCreate(topic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 40; i++ {
		if _, err := q.Log().Append(context.Background(), storedMessage(topic, i), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	res, err := q.Log().(*storage.Log).ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), contract.KeepAll)
	if err != nil || res.StartOffset == 0 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	start := res.StartOffset

	m, c, logs := startObserved(t, q, topic, zapcore.WarnLevel)

	waitCommitted(t, m, "d", topic, 40)
	var want []int64
	for o := start; o < 40; o++ {
		want = append(want, o)
	}
	wantOffsets(t, "offsets", c.requests(), want...)
	if st := status(m, "d", topic); st.Expired != uint64(start) || st.Skipped != 0 || st.Delivered != uint64(40-start) {
		t.Errorf("status = %+v, want %d expired, %d delivered", st, start, 40-start)
	}
	if got := m.RetentionSkipped(); got != uint64(start) {
		t.Errorf("RetentionSkipped = %d, want %d", got, start)
	}
	warned := logs.FilterMessage("messages deleted by retention before this dispatcher read them; continuing from the log start offset").All()
	if len(warned) != 1 || warned[0].ContextMap()["never-delivered"] != start || warned[0].ContextMap()["start-offset"] != start {
		t.Fatalf("warnings = %+v, want one naming %d messages never delivered", warned, start)
	}
}

// startObserved starts dispatcher "d" over q's topic, pushing to a new test
// consumer, with its log at level and above also recorded in logs; it is
// stopped at cleanup.
func startObserved(t *testing.T, q *topicqueue.TopicQueue, topic string, level zapcore.Level) (*Manager, *consumer, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(level)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	c := newConsumer(t, nil)
	set, err := SetOf(New("d", c.host(t), MustPattern(topic)))
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	sender := NewHTTPSender(opts)
	m := NewManager(set, newMemSource(q), sender, opts, log)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sender.CloseIdleConnections)
	t.Cleanup(func() { stopManager(t, m) })
	return m, c, logs
}
