package groups

import (
	"context"
	"fmt"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestAckDurableOnReturnPowerLoss: once Ack has returned, a power loss
// (vfs.MemFS.Crash, keeping only what was fsynced and directory entries
// made durable) finds the group's committed offset: the first ack, which
// creates the checkpoint file, and a later one, which overwrites it in
// place. A kill -9 test cannot show this: the page cache survives it.
func TestAckDurableOnReturnPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	_, c, q := newMemCoordinator(t, mem)
	log := zaptest.NewLogger(t)
	for i := range 5 {
		if _, err := q.Log().Append(context.Background(), fmt.Appendf(nil, `{"n":%d}`, i), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Acquire(testTopic, "g")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(context.Background(), testTopic, "g", s, 5, 0)
	if err != nil {
		t.Fatal(err)
	}
	b.Release()
	for _, ack := range []int64{1, 4} { // the file's creation, then an overwrite
		next, err := c.Ack(testTopic, "g", s, ack)
		if err != nil {
			t.Fatal(err)
		}
		crashed := mem.Crash(vfs.CrashOptions{})
		reg2 := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: crashed, Logger: log}})
		if _, err := reg2.Open(testTopic); err != nil {
			t.Fatal(err)
		}
		got, err := New(reg2, Options{Logger: log}).Committed(testTopic, "g")
		if cerr := reg2.Close(); cerr != nil {
			t.Error(cerr)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got != next {
			t.Fatalf("power loss after Ack(%d) returned %d: committed offset %d, want %d", ack, next, got, next)
		}
	}
}

// newMemCoordinator is a registry rooted at /data on mem with testTopic
// created and a coordinator over it, both closed when the test ends.
func newMemCoordinator(t *testing.T, mem *vfs.MemFS) (*topicqueue.Registry, *Coordinator, *topicqueue.TopicQueue) {
	t.Helper()
	return newCoordinatorOver(t, "/data", storage.Options{FS: mem}, Options{})
}

// newCoordinatorOver is a registry rooted at root with storage options so
// (its logger the test's), testTopic created, and a coordinator with opts
// over it, both closed when the test ends.
func newCoordinatorOver(t *testing.T, root string, so storage.Options, opts Options) (*topicqueue.Registry, *Coordinator, *topicqueue.TopicQueue) {
	t.Helper()
	log := zaptest.NewLogger(t)
	so.Logger, opts.Logger = log, log
	reg := topicqueue.New(topicqueue.Options{Root: root, Storage: so})
	c := New(reg, opts)
	t.Cleanup(func() {
		_ = c.Stop(context.Background())
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	q, err := reg.GetOrCreate(testTopic)
	if err != nil {
		t.Fatal(err)
	}
	return reg, c, q
}
