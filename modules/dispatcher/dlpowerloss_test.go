package dispatcher

import (
	"context"
	"encoding/binary"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestDeadLetterDurableBeforeCheckpointPowerLoss: the dead letter of a
// NACKed message is durable (fsynced) in dead-letter.d before the
// dispatcher's checkpoint passes the message, proven by power losses
// (vfs.MemFS.Crash), not by kill -9, which keeps unsynced bytes. The
// dead-letter topic's segment fsync is held: while it is, the publish of
// the dead letter must not return (Hooks.AfterDeadLetter) and no power
// loss may find the checkpoint past offset 0; once released, a power loss
// after the checkpoint reached 2 finds the dead letter in dead-letter.d.
// In "behind-accepted" an ACCEPTED publish to dead-letter.d is being
// written first (its fsync is the one held): a dead letter queued behind
// lower-level traffic waits for its own fsync too.
func TestDeadLetterDurableBeforeCheckpointPowerLoss(t *testing.T) {
	for _, behindAccepted := range []bool{false, true} {
		name := "alone"
		if behindAccepted {
			name = "behind-accepted"
		}
		t.Run(name, func(t *testing.T) { testDeadLetterPowerLoss(t, behindAccepted) })
	}
}

func testDeadLetterPowerLoss(t *testing.T, behindAccepted bool) {
	const (
		dlTopic = "dead-letter.d"
		cpPath  = "/data/t/checkpoints/d" + storage.CheckpointExt
	)
	mem := vfs.NewMem()
	log := zaptest.NewLogger(t)
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: mem, Logger: log}})
	t.Cleanup(func() { _ = reg.Close() })
	for i := range 2 {
		p := []byte(`{"topic":{"name":"t"},"content":` + string(rune('0'+i)) + `}`)
		if _, _, err := reg.Publish(context.Background(), "t", [][]byte{p}, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	// Hold every fsync of the dead-letter topic's segment until release.
	var (
		release = make(chan struct{})
		entered = make(chan struct{}, 1)
		held    atomic.Bool
	)
	held.Store(true)
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})
	mem.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasPrefix(name, "/data/"+dlTopic+"/") && strings.HasSuffix(name, storage.SegmentExt) && held.Load() {
			select {
			case entered <- struct{}{}:
			default:
			}
			<-release
		}
		return nil
	})
	dlOffset := int64(0)
	if behindAccepted {
		if _, _, err := reg.Publish(context.Background(), dlTopic, [][]byte{[]byte(`{"topic":{"name":"dead-letter.d"},"content":"accepted"}`)}, contract.Accepted); err != nil {
			t.Fatal(err)
		}
		dlOffset = 1
	}
	nacked := make(chan struct{}, 16)
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Offset == 0 {
			answer(w, NACK)
			select {
			case nacked <- struct{}{}:
			default:
			}
			return
		}
		answer(w, ACK)
	})
	var returnedWhileHeld atomic.Bool
	opts := testOptions().WithMaxResends(0)
	opts.Hooks = &Hooks{AfterDeadLetter: func(_, _ string, _ int64) {
		if held.Load() {
			returnedWhileHeld.Store(true)
		}
	}}
	m := startWithPublisher(t, RegistrySource(reg), RegistryPublisher(reg), opts, New("d", c.host(t), MustPattern("t")))

	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	wait(nacked, "the NACK of offset 0")
	wait(entered, "the held fsync of "+dlTopic)
	// While the fsync is held, power losses must never find the
	// checkpoint past offset 0 (its dead letter is not durable).
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cp := checkpointIn(t, mem.Crash(vfs.CrashOptions{}), cpPath); cp > 0 {
			t.Fatalf("power loss with the dead letter's fsync held: the checkpoint is durably at %d, past offset 0, whose dead letter is not durable (lost)", cp)
		}
		if returnedWhileHeld.Load() {
			t.Fatal("the dead letter's publish returned while the dead-letter topic's fsync was held: not durable, yet the checkpoint may pass it")
		}
	}
	held.Store(false)
	released = true
	close(release)
	waitCommitted(t, m, "d", "t", 2)

	// Power loss now: the checkpoint is past offset 0, so its dead letter
	// must be there.
	crashed := mem.Crash(vfs.CrashOptions{})
	if cp := checkpointIn(t, crashed, cpPath); cp != 2 {
		t.Fatalf("checkpoint after the power loss = %d, want 2", cp)
	}
	reg2 := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: crashed, Logger: log}})
	t.Cleanup(func() { _ = reg2.Close() })
	q, err := reg2.Open(dlTopic)
	if err != nil {
		t.Fatalf("open %s after the power loss: %v (the dead letter of offset 0 is lost)", dlTopic, err)
	}
	if hw := q.HighWatermark(); hw != dlOffset+1 {
		t.Fatalf("%s holds %d messages after the power loss, want %d (the dead letter of offset 0 lost?)", dlTopic, hw, dlOffset+1)
	}
	b, err := q.Read(dlOffset)
	if err != nil {
		t.Fatal(err)
	}
	dl := parseStored(b)
	if dl.Headers[HeaderDLTopic] != "t" || dl.Headers[HeaderDLOffset] != "0" || dl.Headers[HeaderDLDispatcher] != "d" {
		t.Fatalf("%s offset %d after the power loss = %s, want the dead letter of t/0", dlTopic, dlOffset, b)
	}
}

// checkpointIn is the checkpoint stored at path in fsys, -1 when there is
// no file (8 bytes big-endian, see storage.Checkpoint).
func checkpointIn(t *testing.T, fsys *vfs.MemFS, path string) int64 {
	t.Helper()
	b, err := fsys.ReadFile(path)
	if vfs.IsNotExist(err) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8 {
		t.Fatalf("checkpoint %s: %d bytes, want 8", path, len(b))
	}
	return int64(binary.BigEndian.Uint64(b))
}
