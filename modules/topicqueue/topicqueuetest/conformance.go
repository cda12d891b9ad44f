package topicqueuetest

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Conformance describes a storage backend to RunLogConformance.
type Conformance struct {
	// Open opens topic's log, creating the topic when it does not exist;
	// the suite gives every subtest a topic of its own and closes what it
	// opens. Opening a topic again after its log was closed reopens it.
	Open func(t *testing.T, topic string) contract.Log
	// MaxRecordBytes is the backend's maximum record size, as it was
	// configured: an append of one byte more must fail with
	// contract.ErrRecordTooLarge.
	MaxRecordBytes int
	// Volatile: a log opened again after Close starts empty (an in-memory
	// fake that forgets a closed topic); otherwise it must have every
	// message and committed checkpoint it had (the local engine, JetStream).
	Volatile bool
	// Delete, when set, deletes topic (its log closed) through the
	// backend's contract.TopicDeleter; the suite then checks that the topic
	// opened again is empty and, for an Incarnationer, a new incarnation.
	Delete func(t *testing.T, topic string)
}

// RunLogConformance runs, as subtests of t, the contract.Log behaviour that
// everything above the storage seam relies on, against the backend c
// describes: append and read order, stored messages read back byte for
// byte (their id, ordering key and headers), offsets and the high watermark, reads
// out of range, empty and too-large records, Notify, checkpoints (commit,
// load, and, for the optional capabilities, list and remove), Close →
// contract.ErrClosed, reopen, the incarnation id (Incarnationer) and
// deletion. Optional capabilities (modules/contract/capabilities.go) are
// tested when the log has them.
func RunLogConformance(t *testing.T, c Conformance) {
	t.Run("AppendReadOrder", func(t *testing.T) { conformAppendRead(t, c) })
	t.Run("StoredMessages", func(t *testing.T) { conformStoredMessages(t, c) })
	t.Run("OutOfRange", func(t *testing.T) { conformOutOfRange(t, c) })
	t.Run("RecordSize", func(t *testing.T) { conformRecordSize(t, c) })
	t.Run("Notify", func(t *testing.T) { conformNotify(t, c) })
	t.Run("Checkpoints", func(t *testing.T) { conformCheckpoints(t, c) })
	t.Run("Close", func(t *testing.T) { conformClose(t, c) })
	t.Run("Reopen", func(t *testing.T) { conformReopen(t, c) })
	if c.Delete != nil {
		t.Run("Delete", func(t *testing.T) { conformDelete(t, c) })
	}
}

// conformTopic is a topic name of the subtest's own.
func conformTopic(t *testing.T) string {
	name := strings.ToLower(regexp.MustCompile(`[^A-Za-z0-9]+`).ReplaceAllString(t.Name(), "-"))
	return "conform." + strings.Trim(name, "-")
}

func conformOpen(t *testing.T, c Conformance, topic string) contract.Log {
	t.Helper()
	l := c.Open(t, topic)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

func msg(i int) []byte {
	return []byte(`{"topic":{"name":"t"},"content":` + string(rune('0'+i%10)) + `}`)
}

func mustAppend(t *testing.T, l contract.Log, p []byte) int64 {
	t.Helper()
	off, err := l.Append(context.Background(), p, contract.Durable)
	if err != nil {
		t.Fatalf("Append: %v", err)
	}
	return off
}

func conformAppendRead(t *testing.T, c Conformance) {
	l := conformOpen(t, c, conformTopic(t))
	if hw, so := l.HighWatermark(), l.StartOffset(); hw != 0 || so != 0 {
		t.Fatalf("new log: HighWatermark %d, StartOffset %d; want 0, 0", hw, so)
	}
	for i := range 3 {
		if off := mustAppend(t, l, msg(i)); off != int64(i) {
			t.Fatalf("Append #%d = offset %d; want %d", i, off, i)
		}
	}
	first, err := l.AppendBatch(context.Background(), [][]byte{msg(3), msg(4)}, contract.Durable)
	if err != nil || first != 3 {
		t.Fatalf("AppendBatch = %d, %v; want 3, nil", first, err)
	}
	if hw := l.HighWatermark(); hw != 5 {
		t.Fatalf("HighWatermark = %d; want 5", hw)
	}
	for i := range 5 {
		p, err := l.Read(int64(i))
		if err != nil || string(p) != string(msg(i)) {
			t.Fatalf("Read(%d) = %q, %v; want %q", i, p, err, msg(i))
		}
	}
	es, err := l.ReadBatch(1, 3)
	if err != nil || len(es) != 3 {
		t.Fatalf("ReadBatch(1, 3) = %d entries, %v; want 3", len(es), err)
	}
	for i, e := range es {
		if e.Offset != int64(1+i) || string(e.Payload) != string(msg(1+i)) {
			t.Fatalf("ReadBatch(1, 3)[%d] = offset %d %q; want %d %q", i, e.Offset, e.Payload, 1+i, msg(1+i))
		}
	}
	if es, err := l.ReadBatch(5, 10); err != nil || len(es) != 0 {
		t.Fatalf("ReadBatch at the high watermark = %d entries, %v; want none", len(es), err)
	}
	if st := l.Stats(); st.NextOffset != 5 {
		t.Fatalf("Stats().NextOffset = %d; want 5", st.NextOffset)
	}
	if off, err := l.OffsetAt(time.Now().Add(time.Hour)); err != nil || off != 5 {
		t.Fatalf("OffsetAt(an hour from now) = %d, %v; want the high watermark 5", off, err)
	}
}

// conformStoredMessages: stored message JSON as the publish path writes
// it (contract.EncodeKeyedMessage: with and without an ordering key, with
// headers and non-ASCII text) is read back byte for byte, by Read and
// ReadBatch, so its members (id, key, headers) come back unchanged.
func conformStoredMessages(t *testing.T, c Conformance) {
	l := conformOpen(t, c, conformTopic(t))
	now := time.UnixMilli(1767225600000)
	var want [][]byte
	for _, m := range []struct{ id, key string }{{"evt-1", "customer 7/é"}, {"", ""}, {"", "k-\u2028"}} {
		b, err := contract.EncodeKeyedMessage("conform.t", []byte(`{"n":"é\u0000"}`), m.id, m.key, map[string]string{"h": "v"}, now)
		if err != nil {
			t.Fatal(err)
		}
		if got := contract.MessageKey(b); got != m.key {
			t.Fatalf("MessageKey of the encoded message = %q, want %q", got, m.key)
		}
		want = append(want, b)
	}
	mustAppend(t, l, want[0])
	if _, err := l.AppendBatch(context.Background(), want[1:], contract.Durable); err != nil {
		t.Fatalf("AppendBatch: %v", err)
	}
	es, err := l.ReadBatch(0, len(want))
	if err != nil || len(es) != len(want) {
		t.Fatalf("ReadBatch(0, %d) = %d entries, %v", len(want), len(es), err)
	}
	for i, e := range es {
		p, err := l.Read(int64(i))
		if err != nil || string(p) != string(want[i]) || string(e.Payload) != string(want[i]) {
			t.Fatalf("offset %d: Read %q, %v; ReadBatch %q; want %q", i, p, err, e.Payload, want[i])
		}
	}
	if k := contract.MessageKey(es[0].Payload); k != "customer 7/é" {
		t.Fatalf("key read back = %q", k)
	}
}

func conformOutOfRange(t *testing.T, c Conformance) {
	l := conformOpen(t, c, conformTopic(t))
	mustAppend(t, l, msg(0))
	for _, off := range []int64{1, 7, -1} {
		if _, err := l.Read(off); !errors.Is(err, contract.ErrOutOfRange) {
			t.Errorf("Read(%d) error = %v; want one wrapping contract.ErrOutOfRange", off, err)
		}
	}
}

func conformRecordSize(t *testing.T, c Conformance) {
	l := conformOpen(t, c, conformTopic(t))
	if _, err := l.Append(context.Background(), []byte("{"), contract.Durable); !errors.Is(err, contract.ErrEmptyRecord) {
		t.Errorf("Append of %d byte (< MinPayloadBytes %d) error = %v; want contract.ErrEmptyRecord", 1, contract.MinPayloadBytes, err)
	}
	if c.MaxRecordBytes <= 0 {
		t.Fatalf("Conformance.MaxRecordBytes = %d; the suite needs the backend's limit", c.MaxRecordBytes)
	}
	big := []byte(`"` + strings.Repeat("x", c.MaxRecordBytes-1) + `"`) // MaxRecordBytes+1 bytes
	if _, err := l.Append(context.Background(), big, contract.Durable); !errors.Is(err, contract.ErrRecordTooLarge) {
		t.Errorf("Append of %d bytes (limit %d) error = %v; want contract.ErrRecordTooLarge", len(big), c.MaxRecordBytes, err)
	}
	if hw := l.HighWatermark(); hw != 0 {
		t.Errorf("HighWatermark after refused appends = %d; want 0 (nothing written)", hw)
	}
}

func conformNotify(t *testing.T, c Conformance) {
	l := conformOpen(t, c, conformTopic(t))
	ch := l.Notify(0)
	select {
	case <-ch:
		t.Fatal("Notify(0) of an empty log is closed before anything was appended")
	default:
	}
	mustAppend(t, l, msg(0))
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify(0) not closed 10 s after offset 0 was appended")
	}
	select {
	case <-l.Notify(0):
	default:
		t.Fatal("Notify(0) with offset 0 stored is not closed")
	}
	ch = l.Notify(1)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Notify(1) not closed 10 s after Close")
	}
}

func conformCheckpoints(t *testing.T, c Conformance) {
	l := conformOpen(t, c, conformTopic(t))
	for range 3 {
		mustAppend(t, l, msg(0))
	}
	cp, err := l.OpenCheckpoint("group-a")
	if err != nil {
		t.Fatalf("OpenCheckpoint: %v", err)
	}
	if cp.Name() != "group-a" || cp.Offset() != 0 {
		t.Fatalf("new checkpoint: Name %q, Offset %d; want group-a, 0", cp.Name(), cp.Offset())
	}
	if e, ok := cp.(contract.CheckpointExister); ok && e.Exists() {
		t.Fatal("a checkpoint never committed Exists")
	}
	if err := cp.Commit(2); err != nil {
		t.Fatalf("Commit(2): %v", err)
	}
	if cp.Offset() != 2 {
		t.Fatalf("Offset after Commit(2) = %d", cp.Offset())
	}
	if e, ok := cp.(contract.CheckpointExister); ok && !e.Exists() {
		t.Fatal("a committed checkpoint does not Exist")
	}
	again, err := l.OpenCheckpoint("group-a")
	if err != nil || again.Offset() != 2 {
		t.Fatalf("OpenCheckpoint again = offset %v, %v; want 2", offsetOf(again), err)
	}
	if _, err := l.OpenCheckpoint("group-b"); err != nil { // opened, never committed: not listed
		t.Fatalf("OpenCheckpoint(group-b): %v", err)
	}
	if cl, ok := l.(contract.CheckpointLister); ok {
		names, err := cl.Checkpoints()
		if err != nil || !slices.Equal(names, []string{"group-a"}) {
			t.Fatalf("Checkpoints() = %q, %v; want [group-a] (group-b was never committed)", names, err)
		}
	}
	if r, ok := l.(contract.CheckpointRemover); ok {
		if err := r.RemoveCheckpoint("group-a"); err != nil {
			t.Fatalf("RemoveCheckpoint: %v", err)
		}
		if err := r.RemoveCheckpoint("never-there"); err != nil {
			t.Fatalf("RemoveCheckpoint of a checkpoint that does not exist: %v; want nil", err)
		}
		if cl, ok := l.(contract.CheckpointLister); ok {
			if names, err := cl.Checkpoints(); err != nil || len(names) != 0 {
				t.Fatalf("Checkpoints() after RemoveCheckpoint = %q, %v; want none", names, err)
			}
		}
		cp, err := l.OpenCheckpoint("group-a")
		if err != nil || cp.Offset() != 0 {
			t.Fatalf("OpenCheckpoint after RemoveCheckpoint = offset %v, %v; want 0", offsetOf(cp), err)
		}
	}
}

func offsetOf(cp contract.Checkpoint) any {
	if cp == nil {
		return nil
	}
	return cp.Offset()
}

func conformClose(t *testing.T, c Conformance) {
	l := c.Open(t, conformTopic(t))
	mustAppend(t, l, msg(0))
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := l.Append(context.Background(), msg(1), contract.Durable); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("Append after Close error = %v; want contract.ErrClosed", err)
	}
	if _, err := l.AppendBatch(context.Background(), [][]byte{msg(1)}, contract.Durable); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("AppendBatch after Close error = %v; want contract.ErrClosed", err)
	}
	if _, err := l.ReadBatch(0, 1); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("ReadBatch after Close error = %v; want contract.ErrClosed", err)
	}
	if _, err := l.OpenCheckpoint("late"); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("OpenCheckpoint after Close error = %v; want contract.ErrClosed", err)
	}
	if cl, ok := l.(contract.CheckpointLister); ok {
		if _, err := cl.Checkpoints(); !errors.Is(err, contract.ErrClosed) {
			t.Errorf("Checkpoints after Close error = %v; want contract.ErrClosed", err)
		}
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v; want nil", err)
	}
}

var incarnationRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func incarnationOf(t *testing.T, l contract.Log) (string, bool) {
	t.Helper()
	i, ok := l.(contract.Incarnationer)
	if !ok {
		return "", false
	}
	id := i.Incarnation()
	if !incarnationRE.MatchString(id) {
		t.Fatalf("Incarnation() = %q; want 32 lower-case hex digits", id)
	}
	return id, true
}

func conformReopen(t *testing.T, c Conformance) {
	topic := conformTopic(t)
	l := c.Open(t, topic)
	mustAppend(t, l, msg(0))
	mustAppend(t, l, msg(1))
	cp, err := l.OpenCheckpoint("group-a")
	if err != nil {
		t.Fatalf("OpenCheckpoint: %v", err)
	}
	if err := cp.Commit(1); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	inc, hasInc := incarnationOf(t, l)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	l = conformOpen(t, c, topic)
	if c.Volatile {
		if hw := l.HighWatermark(); hw != 0 {
			t.Fatalf("volatile backend: HighWatermark after reopen = %d; want 0", hw)
		}
		return
	}
	if hw := l.HighWatermark(); hw != 2 {
		t.Fatalf("HighWatermark after reopen = %d; want 2", hw)
	}
	if p, err := l.Read(1); err != nil || string(p) != string(msg(1)) {
		t.Fatalf("Read(1) after reopen = %q, %v", p, err)
	}
	if cp, err := l.OpenCheckpoint("group-a"); err != nil || cp.Offset() != 1 {
		t.Fatalf("checkpoint after reopen = offset %v, %v; want 1", offsetOf(cp), err)
	}
	if off := mustAppend(t, l, msg(2)); off != 2 {
		t.Fatalf("Append after reopen = offset %d; want 2", off)
	}
	if hasInc {
		if again, _ := incarnationOf(t, l); again != inc {
			t.Fatalf("Incarnation after reopen = %s; want %s (the same topic)", again, inc)
		}
	}
}

func conformDelete(t *testing.T, c Conformance) {
	topic := conformTopic(t)
	l := c.Open(t, topic)
	mustAppend(t, l, msg(0))
	inc, hasInc := incarnationOf(t, l)
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c.Delete(t, topic)
	l = conformOpen(t, c, topic)
	if hw := l.HighWatermark(); hw != 0 {
		t.Fatalf("HighWatermark of the topic created again after Delete = %d; want 0", hw)
	}
	if hasInc {
		if again, _ := incarnationOf(t, l); again == inc {
			t.Fatalf("Incarnation after Delete and create = %s, the deleted topic's", again)
		}
	}
}
