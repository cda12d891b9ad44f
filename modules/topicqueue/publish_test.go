package topicqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// dedupEnv is a registry with an idempotent-publish window over an
// in-memory filesystem, with a settable clock.
type dedupEnv struct {
	t   *testing.T
	fs  *vfs.MemFS
	now atomic.Int64 // Unix ns
	reg *Registry
}

func newDedupEnv(t *testing.T, fsys *vfs.MemFS) *dedupEnv {
	t.Helper()
	e := &dedupEnv{t: t, fs: fsys}
	e.now.Store(time.Now().UnixNano())
	e.open()
	return e
}

// open (re)opens the registry over the same filesystem: a restart.
func (e *dedupEnv) open() {
	e.t.Helper()
	log := zaptest.NewLogger(e.t)
	tr := dedup.New(dedup.Options{Window: 2 * time.Minute, Logger: log, Now: func() time.Time { return time.Unix(0, e.now.Load()) }})
	e.reg = New(Options{Root: "/data", Storage: storage.Options{FS: e.fs, Logger: log, SegmentMaxBytes: 1024}, Dedup: tr})
	reg := e.reg
	e.t.Cleanup(func() { reg.Close() })
	if _, err := e.reg.OpenAll("fail", log); err != nil {
		e.t.Fatal(err)
	}
}

// msg is a stored message of topic with producer id (or a generated one
// when id is "").
func msg(t *testing.T, topic, id, content string) Message {
	t.Helper()
	b, err := contract.EncodeMessage(topic, []byte(content), id, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return Message{Stored: b, ID: id}
}

func (e *dedupEnv) publish(topic string, level contract.AckLevel, msgs ...Message) []Published {
	e.t.Helper()
	out := make([]Published, len(msgs))
	if _, err := e.reg.PublishMessages(context.Background(), topic, msgs, level, out); err != nil {
		e.t.Fatal(err)
	}
	return out
}

// contents reads topic back: the content of every stored message.
func (e *dedupEnv) contents(topic string) []string {
	e.t.Helper()
	q, ok := e.reg.Get(topic)
	if !ok {
		e.t.Fatalf("no topic %s", topic)
	}
	var es []storage.Entry
	for from := q.StartOffset(); from < q.HighWatermark(); from = es[len(es)-1].Offset + 1 {
		more, err := q.ReadBatch(from, 1000) // up to a segment's end
		if err != nil || len(more) == 0 {
			e.t.Fatalf("read from %d: %d entries, %v", from, len(more), err)
		}
		es = append(es, more...)
	}
	var out []string
	for _, en := range es {
		s := string(en.Payload)
		i := strings.Index(s, `"content":`) + len(`"content":`)
		out = append(out, s[i:strings.Index(s, `,"id"`)])
	}
	return out
}

// TestPublishSameIDOnce is the rule end to end over the real storage: the
// same producer id twice stores one message and answers its offset with
// Duplicate, across a restart too; after the window it is stored again;
// generated ids and other topics are never duplicates.
func TestPublishSameIDOnce(t *testing.T) {
	e := newDedupEnv(t, vfs.NewMem())
	first := e.publish("t", contract.Durable, msg(t, "t", "", `"pre"`), msg(t, "t", "a", `"a1"`))
	again := e.publish("t", contract.Durable, msg(t, "t", "a", `"a2"`))
	if again[0] != (Published{Offset: first[1].Offset, Duplicate: true}) {
		t.Fatalf("same id again: %+v, want the first offset %d as a duplicate", again[0], first[1].Offset)
	}
	if got := e.publish("u", contract.Durable, msg(t, "u", "a", `"u"`)); got[0].Duplicate {
		t.Fatalf("same id on another topic: %+v", got)
	}
	if got := e.publish("t", contract.Durable, msg(t, "t", "", `"gen"`)); got[0].Duplicate || got[0].Offset != 2 {
		t.Fatalf("generated id: %+v", got)
	}

	e.reg.Close()
	e.open() // a restart: the window is rebuilt from the log
	if got := e.publish("t", contract.Durable, msg(t, "t", "a", `"a3"`)); got[0] != (Published{Offset: first[1].Offset, Duplicate: true}) {
		t.Fatalf("after a restart: %+v", got)
	}
	e.now.Add(int64(3 * time.Minute)) // past the 2m window
	if got := e.publish("t", contract.Durable, msg(t, "t", "a", `"a4"`)); got[0].Duplicate || got[0].Offset != 3 {
		t.Fatalf("after the window: %+v, want stored at 3", got)
	}
	if got := strings.Join(e.contents("t"), ","); got != `"pre","a1","gen","a4"` {
		t.Fatalf("topic t holds %s", got)
	}
}

// TestPublishBatchAndAccepted: a repeated id inside one batch is stored
// once and the repeat marked Duplicate with the first one's offset; an
// ACCEPTED duplicate answers Duplicate without an offset.
func TestPublishBatchAndAccepted(t *testing.T) {
	e := newDedupEnv(t, vfs.NewMem())
	got := e.publish("t", contract.Durable, msg(t, "t", "x", `1`), msg(t, "t", "y", `2`), msg(t, "t", "x", `3`), msg(t, "t", "", `4`))
	want := []Published{{0, false}, {1, false}, {0, true}, {2, false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("batch: %+v, want %+v", got, want)
	}
	if got := e.publish("t", contract.Accepted, msg(t, "t", "y", `5`), msg(t, "t", "z", `6`)); fmt.Sprint(got) != fmt.Sprint([]Published{{-1, true}, {-1, false}}) {
		t.Fatalf("ACCEPTED: %+v", got)
	}
	// z was accepted; its duplicate at DURABLE waits for it and answers
	// its offset once it is durable.
	if got := e.publish("t", contract.Durable, msg(t, "t", "z", `7`)); got[0] != (Published{Offset: 3, Duplicate: true}) {
		t.Fatalf("DURABLE duplicate of an ACCEPTED message: %+v", got)
	}
	if got := strings.Join(e.contents("t"), ","); got != "1,2,4,6" {
		t.Fatalf("topic holds %s", got)
	}
}

// TestPublishAfterReopenForgetsLostOffsets: a WRITTEN publish answered
// before a failed index fsync is cut by the reopen; the window must not
// answer its id as a duplicate of an offset that no longer holds it.
func TestPublishAfterReopenForgetsLostOffsets(t *testing.T) {
	fsys := vfs.NewMem()
	e := newDedupEnv(t, fsys)
	e.publish("t", contract.Durable, msg(t, "t", "a", `1`))
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, storage.IndexExt) {
			return errors.New("injected EIO")
		}
		return nil
	})
	if got := e.publish("t", contract.Written, msg(t, "t", "b", `2`)); got[0] != (Published{Offset: 1}) {
		t.Fatalf("WRITTEN before the failure: %+v", got)
	}
	fsys.SetHook(nil)
	q, _ := e.reg.Get("t")
	for deadline := time.Now().Add(10 * time.Second); q.Stats().Failed == ""; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the topic did not fail")
		}
	}
	// Before the reopen, a retry of b is refused with the failure, not
	// answered as a duplicate of an offset the reopen will cut.
	out1 := make([]Published, 1)
	if _, err := e.reg.PublishMessages(context.Background(), "t", []Message{msg(t, "t", "b", `2`)}, contract.Written, out1); !errors.Is(err, storage.ErrFailed) {
		t.Fatalf("retry of b on the failed topic: %+v %v, want the topic's failure", out1, err)
	}
	if hw, err := e.reg.Reopen("t"); err != nil || hw != 1 {
		t.Fatalf("reopen: %d %v", hw, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := make([]Published, 2)
	if _, err := e.reg.PublishMessages(ctx, "t", []Message{msg(t, "t", "b", `3`), msg(t, "t", "a", `4`)}, contract.Durable, out); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out) != fmt.Sprint([]Published{{1, false}, {0, true}}) {
		t.Fatalf("after reopen: %+v, want b stored again at 1 and a still a duplicate of 0", out)
	}
}

// TestPublishAfterDeleteIsNew: a topic deleted and created again starts
// with an empty window.
func TestPublishAfterDeleteIsNew(t *testing.T) {
	e := newDedupEnv(t, vfs.NewMem())
	e.publish("t", contract.Durable, msg(t, "t", "", `0`), msg(t, "t", "a", `1`))
	if err := e.reg.Delete("t"); err != nil {
		t.Fatal(err)
	}
	if got := e.publish("t", contract.Durable, msg(t, "t", "a", `2`)); got[0] != (Published{Offset: 0}) {
		t.Fatalf("after delete: %+v", got)
	}
}
