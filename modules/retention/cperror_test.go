package retention

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestUnreadableCheckpointKeepsTopicWhole: under keep-unconsumed, an EIO
// reading the checkpoint of a reader of topic "held" (a configured
// dispatcher's, or a consumer group's that a consumer just tried to use)
// makes the pass leave "held" alone: no segment of it is deleted, the pass
// logs the error naming the topic, Result.Unreadable and
// CheckpointErrors()["held"] count it, while topic "free" (no reader) is
// trimmed in the same pass. Once the checkpoint reads again, the next pass
// deletes up to the reader's offset and no further.
func TestUnreadableCheckpointKeepsTopicWhole(t *testing.T) {
	for _, reader := range []string{"dispatcher", "group"} {
		t.Run(reader, func(t *testing.T) {
			testUnreadableCheckpoint(t, reader)
		})
	}
}

func testUnreadableCheckpoint(t *testing.T, reader string) {
	const (
		name   = "r1" // the dispatcher's or the group's name
		cpAt   = 25   // its stored checkpoint
		cpFile = "/data/held/checkpoints/" + name + storage.CheckpointExt
	)
	now := time.Now()
	e := newEnv(t, 256)
	held := e.publish("held", 60, now)
	free := e.publish("free", 60, now)
	// The checkpoint is on disk but not open in the topic's log: the
	// first reader to ask for it reads the file.
	var cp [8]byte
	binary.BigEndian.PutUint64(cp[:], cpAt)
	if err := e.fs.WriteFile(cpFile, cp[:], true); err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	var fired atomic.Int64
	failing.Store(true)
	e.fs.SetHook(func(op vfs.Op, n string) error {
		if op == vfs.OpRead && n == cpFile && failing.Load() {
			fired.Add(1)
			return &fs.PathError{Op: "read", Path: n, Err: syscall.EIO}
		}
		return nil
	})

	core, logs := observer.New(zapcore.ErrorLevel)
	log := zap.New(zapcore.NewTee(zaptest.NewLogger(t).Core(), core))
	o := Options{Default: contract.RetentionPolicy{MaxBytes: 1}, KeepUnconsumed: true,
		Now: func() time.Time { return now }, Logger: log}
	var c *groups.Coordinator
	switch reader {
	case "dispatcher":
		set, err := dispatcher.SetOf(dispatcher.New(name, dispatcher.Host{Protocol: dispatcher.HTTP, Address: "localhost", Port: 8081}, dispatcher.MustPattern("held")))
		if err != nil {
			t.Fatal(err)
		}
		o.Dispatchers = set
	case "group":
		c = groups.New(e.reg, groups.Options{Logger: log})
		o.Groups = c
		// A consumer tries to use the group: its checkpoint cannot be
		// read, so the group is not opened (and not in Holding).
		if _, err := c.Acquire("held", name); !errors.Is(err, syscall.EIO) {
			t.Fatalf("Acquire with the checkpoint unreadable: %v, want an EIO error", err)
		}
	}
	ents := e.files("held")
	r := New(e.reg, o)

	res := r.Pass()
	if fired.Load() == 0 {
		t.Fatal("the fault never fired: nothing read the checkpoint")
	}
	if s := held.StartOffset(); s != 0 {
		t.Fatalf("held: start offset %d after a pass with %s's checkpoint unreadable, want 0 (kept whole)", s, reader)
	}
	if got := e.files("held"); got != ents {
		t.Fatalf("held: files changed by a pass with %s's checkpoint unreadable:\nbefore %s\nafter  %s", reader, ents, got)
	}
	if free.StartOffset() == 0 {
		t.Fatal("free: nothing deleted; the pass must go on with the other topics")
	}
	if res.Unreadable != 1 || r.Totals().Unreadable != 1 {
		t.Fatalf("Result.Unreadable = %d, totals %d, want 1", res.Unreadable, r.Totals().Unreadable)
	}
	if got := r.CheckpointErrors(); got["held"] != 1 || len(got) != 1 {
		t.Fatalf("CheckpointErrors = %v, want held:1", got)
	}
	found := logs.FilterMessageSnippet("cannot read a reader's checkpoint").FilterField(zap.String("topic", "held")).All()
	if len(found) != 1 {
		t.Fatalf("%d error logs naming topic held, want 1; all errors: %v", len(found), logs.All())
	}
	if msg := found[0].ContextMap()["error"]; !strings.Contains(msg.(string), name) || !strings.Contains(msg.(string), "input/output error") {
		t.Fatalf("logged error %q: want it to name %s and the EIO", msg, name)
	}

	// A second pass with the fault still there counts again.
	r.Pass()
	if got := r.CheckpointErrors()["held"]; got != 2 {
		t.Fatalf("CheckpointErrors[held] = %d after two failed passes, want 2", got)
	}

	// The disk reads again: the reader holds from its checkpoint.
	failing.Store(false)
	if c != nil {
		if _, err := c.Acquire("held", name); err != nil {
			t.Fatal(err)
		}
	}
	res = r.Pass()
	if s := held.StartOffset(); s == 0 || s > cpAt {
		t.Fatalf("held: start offset %d once the checkpoint reads, want in (0, %d]", s, cpAt)
	}
	if res.Unreadable != 0 || r.CheckpointErrors()["held"] != 2 {
		t.Fatalf("a readable pass: Unreadable %d, CheckpointErrors %v; want 0 and held still 2", res.Unreadable, r.CheckpointErrors())
	}
}

// files lists the names in topic's directory, one string.
func (e *env) files(topic string) string {
	e.t.Helper()
	ents, err := e.fs.List("/data/" + topic)
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for _, de := range ents {
		names = append(names, de.Name)
	}
	return strings.Join(names, " ")
}
