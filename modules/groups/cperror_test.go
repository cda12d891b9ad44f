package groups

import (
	"context"
	"errors"
	"io/fs"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// CheckpointError (retention's keep-unconsumed) reports a group whose
// checkpoint could not be read when a consumer tried to use it: from that
// moment (not for a since after it), until the group opens, and not after
// its topic is deleted.
func TestCheckpointErrorUntilTheGroupOpens(t *testing.T) {
	mem := vfs.NewMem()
	reg, c, q := newMemCoordinator(t, mem)
	if _, err := q.Log().Append(context.Background(), []byte(`{"n":0}`), contract.Durable); err != nil {
		t.Fatal(err)
	}
	// g's checkpoint is on disk (offset 0), not yet open.
	cpFile := "/data/" + testTopic + "/checkpoints/g" + storage.CheckpointExt
	if err := mem.WriteFile(cpFile, make([]byte, 8), true); err != nil {
		t.Fatal(err)
	}
	var failing atomic.Bool
	failing.Store(true)
	mem.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpRead && name == cpFile && failing.Load() {
			return &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
		}
		return nil
	})
	before := time.Now()
	if err := c.CheckpointError(testTopic, time.Time{}); err != nil {
		t.Fatalf("before any use: %v", err)
	}
	if _, err := c.Acquire(testTopic, "g"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Acquire: %v, want EIO", err)
	}
	if err := c.CheckpointError(testTopic, before); !errors.Is(err, syscall.EIO) {
		t.Fatalf("CheckpointError after the failed Acquire: %v, want the EIO", err)
	}
	if err := c.CheckpointError(testTopic, time.Now().Add(time.Second)); err != nil {
		t.Fatalf("CheckpointError since after the failure: %v, want nil (idle)", err)
	}
	if err := c.CheckpointError("other", before); err != nil {
		t.Fatalf("another topic: %v", err)
	}
	if _, ok := c.Holding(testTopic, before); ok {
		t.Fatal("a group that never opened is in Holding")
	}
	failing.Store(false)
	if _, err := c.Acquire(testTopic, "g"); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckpointError(testTopic, before); err != nil {
		t.Fatalf("after the group opened: %v, want nil", err)
	}

	// A failure, then the topic is deleted: forgotten.
	cpFile2 := "/data/" + testTopic + "/checkpoints/g2" + storage.CheckpointExt
	if err := mem.WriteFile(cpFile2, make([]byte, 8), true); err != nil {
		t.Fatal(err)
	}
	mem.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpRead && name == cpFile2 {
			return &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
		}
		return nil
	})
	if _, err := c.Acquire(testTopic, "g2"); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Acquire g2: %v, want EIO", err)
	}
	if err := c.CheckpointError(testTopic, before); !errors.Is(err, syscall.EIO) {
		t.Fatalf("g2: %v, want the EIO", err)
	}
	if err := reg.Delete(testTopic); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckpointError(testTopic, before); err != nil {
		t.Fatalf("after the topic was deleted: %v, want nil", err)
	}
}
