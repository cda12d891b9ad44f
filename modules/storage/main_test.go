package storage

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// long enables the long randomized crash rounds (make crash): -long or
// MMMQ_LONG=1.
var long = flag.Bool("long", false, "run the long randomized crash and power-loss rounds")

func isLong() bool { return *long || os.Getenv("MMMQ_LONG") == "1" }

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testDir is the topic directory used with MemFS: a top-level directory, so
// that createTopic's SyncDir of the parent makes it durable.
const testDir = "orders"

func openMem(t testing.TB, fsys *vfs.MemFS, o Options) *Log {
	t.Helper()
	o.FS = fsys
	if o.Logger == nil {
		if tt, ok := t.(*testing.T); ok {
			o.Logger = zaptest.NewLogger(tt)
		}
	}
	l, err := Open(testDir, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// payload returns a distinct JSON message of roughly n bytes (at least 2).
func payload(i int, n int) []byte {
	s := fmt.Sprintf(`{"i":%d,"p":"`, i)
	pad := n - len(s) - 2
	if pad < 0 {
		pad = 0
	}
	return []byte(s + string(bytes.Repeat([]byte{'x'}, pad)) + `"}`)
}

func mustAppend(t testing.TB, l *Log, p []byte) int64 {
	t.Helper()
	off, err := l.Append(context.Background(), p, contract.Durable)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return off
}

// readAll reads [StartOffset, hw) with ReadBatch and fails on any error or gap.
func readAll(t testing.TB, l *Log, max int) []Entry {
	t.Helper()
	hw := l.HighWatermark()
	var out []Entry
	for off := l.StartOffset(); off < hw; {
		es, err := l.ReadBatch(off, max)
		if err != nil {
			t.Fatalf("read batch at %d (hw %d): %v", off, hw, err)
		}
		if len(es) == 0 {
			t.Fatalf("read batch at %d (hw %d): no entries", off, hw)
		}
		for _, e := range es {
			if e.Offset != off {
				t.Fatalf("read batch: offset %d, want %d", e.Offset, off)
			}
			out = append(out, Entry{Offset: e.Offset, Payload: bytes.Clone(e.Payload)})
			off++
		}
	}
	return out
}

func asCorruption(t testing.TB, err error) *contract.CorruptionError {
	t.Helper()
	var ce *contract.CorruptionError
	if !errors.As(err, &ce) {
		t.Fatalf("want *contract.CorruptionError, got %T: %v", err, err)
	}
	if !errors.Is(err, contract.ErrCorrupt) {
		t.Fatalf("errors.Is(%v, contract.ErrCorrupt) = false", err)
	}
	return ce
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitHighWatermark waits until l's high watermark is at least hw (offset
// hw-1 is readable), with Notify, and fails the test if Notify wakes it
// while the watermark is still below hw: the log closed first, or Notify
// broke its promise.
// requirePayloads fails the test unless got holds payload(i, size) at
// index i, for every i (offsets from 0).
func requirePayloads(t testing.TB, got []Entry, size int) {
	t.Helper()
	for i, e := range got {
		if !bytes.Equal(e.Payload, payload(i, size)) {
			t.Fatalf("offset %d = %q, want %q", i, e.Payload, payload(i, size))
		}
	}
}

func waitHighWatermark(t testing.TB, l *Log, hw int64) {
	t.Helper()
	<-l.Notify(hw - 1)
	if got := l.HighWatermark(); got < hw {
		t.Fatalf("waiting for high watermark %d: woken at %d (log closed: %v, failed: %v)", hw, got, l.closed.Load(), l.Err())
	}
}

// gate holds the writer inside a hook (a Hooks func or a MemFS hook calls
// wait) until the test opens it. newGate opens it in t.Cleanup, so a test
// that fails while the writer is held ends and reports its failure instead
// of hanging until the test binary times out.
type gate struct {
	entered chan struct{} // gets a value when a hook starts waiting (at most one pending)
	release chan struct{}
	once    sync.Once
}

func newGate(t testing.TB) *gate {
	g := &gate{entered: make(chan struct{}, 1), release: make(chan struct{})}
	t.Cleanup(g.open)
	return g
}

// wait is called from a hook: it reports on entered and blocks until open.
func (g *gate) wait() {
	select {
	case g.entered <- struct{}{}:
	default:
	}
	<-g.release
}

// open lets every current and later wait return. It may be called more
// than once.
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

// closeAtEnd closes l in t.Cleanup after opening gates. Tests that hold the
// writer use it instead of defer l.Close(): deferred calls run before
// cleanups, so a deferred Close would wait forever for a writer that a
// failed test left held.
func closeAtEnd(t testing.TB, l *Log, gates ...*gate) {
	t.Cleanup(func() {
		for _, g := range gates {
			g.open()
		}
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
}

// queueDurable queues payloads as one DURABLE AppendBatch would, with done
// (buffered, capacity 1) as the answer channel, and does not wait. Until
// someone receives from done, len(done) tells whether the writer has
// answered, which a test can check while the writer is held in a hook
// without depending on when an appending goroutine gets to run.
func queueDurable(t *testing.T, l *Log, done chan result, payloads ...[]byte) {
	t.Helper()
	r := &request{n: len(payloads), level: contract.Durable, first: -1, done: done}
	for _, p := range payloads {
		r.data = AppendEntry(r.data, p)
	}
	l.mu.Lock()
	if l.failed != nil || l.closing {
		l.mu.Unlock()
		t.Fatalf("queue: log failed (%v) or closing", l.failed)
	}
	l.pending = append(l.pending, r)
	l.pendingBytes += int64(len(r.data))
	l.mu.Unlock()
	l.signal()
}
