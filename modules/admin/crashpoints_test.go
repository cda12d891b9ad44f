package admin

import (
	"fmt"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// memDataRoot is a MemFS with a durable /data directory.
func memDataRoot(t *testing.T) *vfs.MemFS {
	t.Helper()
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data"); err != nil {
		t.Fatal(err)
	}
	if err := mem.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return mem
}

// crashPoints runs save and returns the file system as a power loss would
// leave it before each of save's file-system operations (at least 4:
// create, write, sync, rename, directory sync of a replace), and each
// operation's name.
func crashPoints(t *testing.T, mem *vfs.MemFS, save func() error) ([]*vfs.MemFS, []string) {
	t.Helper()
	var (
		mu      sync.Mutex
		crashes []*vfs.MemFS
		ops     []string
	)
	mem.SetHook(func(op vfs.Op, name string) error {
		c := mem.Crash(vfs.CrashOptions{})
		mu.Lock()
		crashes = append(crashes, c)
		ops = append(ops, fmt.Sprintf("before %s %s", op, name))
		mu.Unlock()
		return nil
	})
	if err := save(); err != nil {
		t.Fatal(err)
	}
	mem.SetHook(nil)
	if len(crashes) < 4 {
		t.Fatalf("Save made %d file-system operations (%v), want at least create, write, sync, rename, syncdir", len(crashes), ops)
	}
	return crashes, ops
}
