package topicqueue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestStartupSyncsWhatAKilledProcessLeft: a broker killed with writes in
// the page cache (MemFS.Kill: a DURABLE publish's index entry unsynced
// under index-sync lazy, and a WRITTEN publish not fsynced at all) is
// restarted; startup recovery serves those entries, so it must make them
// durable first — the local backend syncs the whole filesystem once
// (vfs.FSSyncer) and its topics open with FilesystemSynced. A power loss
// right after the restart keeps everything it served.
func TestStartupSyncsWhatAKilledProcessLeft(t *testing.T) {
	fsys := vfs.NewMem()
	opts := storage.Options{FS: fsys, IndexSync: storage.IndexSyncLazy}
	reg := New(Options{Root: "/data", Storage: opts})
	for i, lvl := range []contract.AckLevel{contract.Durable, contract.Durable, contract.Written} {
		if _, _, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(`{"i":` + string(rune('0'+i)) + `}`)}, lvl); err != nil {
			t.Fatal(err)
		}
	}
	killed := fsys.Kill() // the WRITTEN entry and the lazy index are in the page cache only
	reg.Close()

	before := killed.SyncCount()
	opts.FS = killed
	reg2 := New(Options{Root: "/data", Storage: opts})
	defer reg2.Close()
	if _, err := reg2.OpenAll(OnCorruptionFail, zap.NewNop()); err != nil {
		t.Fatal(err)
	}
	q, err := reg2.Open("t")
	if err != nil {
		t.Fatal(err)
	}
	if hw := q.HighWatermark(); hw != 3 {
		t.Fatalf("restart serves %d entries, want 3", hw)
	}
	if killed.SyncCount() != before+1 {
		t.Fatalf("startup made %d syncs, want 1 (one SyncFS, no per-topic fsync)", killed.SyncCount()-before)
	}
	reg3 := New(Options{Root: "/data", Storage: storage.Options{FS: killed.Crash(vfs.CrashOptions{})}})
	defer reg3.Close()
	if _, err := reg3.OpenAll(OnCorruptionFail, zap.NewNop()); err != nil {
		t.Fatalf("after the restart and a power loss: %v", err)
	}
	q3, err := reg3.Open("t")
	if err != nil {
		t.Fatalf("after the restart and a power loss: %v", err)
	}
	if hw := q3.HighWatermark(); hw != 3 {
		t.Fatalf("after the restart and a power loss: %d entries, want the 3 served", hw)
	}
}

// lyingSyncFS is a MemFS whose SyncFS returns nil and makes nothing
// durable, as syncfs(2) does on FUSE; with untrusted set it says so
// instead (errors.ErrUnsupported), as vfs.OS does on FUSE.
type lyingSyncFS struct {
	*vfs.MemFS
	untrusted bool
}

func (f lyingSyncFS) SyncFS(dir string) error {
	if f.untrusted {
		return fmt.Errorf("sync filesystem of %s: syncfs(2) is a no-op on FUSE: %w", dir, errors.ErrUnsupported)
	}
	return nil
}

// TestUntrustedSyncFSFsyncsEachTopic: on a filesystem whose syncfs does
// nothing (FUSE), startup must not take it as done. A broker killed after
// a segment write, before its fsync, is restarted: recovery indexes that
// entry again and serves it (a retry of it would be answered as a DURABLE
// duplicate). When the FS says syncfs is not trusted, the topic's
// recovery fsyncs what it serves, and a power loss after the restart
// keeps the 3 entries; the negative control, a syncfs that returns nil
// and syncs nothing, trusted, loses the entry the restart served.
func TestUntrustedSyncFSFsyncsEachTopic(t *testing.T) {
	served := func(t *testing.T, untrusted bool) (int64, error) {
		fsys := vfs.NewMem()
		// The process is killed after the third publish's segment write,
		// before its fsync: the entry is in the page cache only, and the
		// restart indexes it again and serves it.
		var killed *vfs.MemFS
		var publishes atomic.Int32
		hooks := &storage.Hooks{AfterSegmentWrite: func() {
			if publishes.Load() == 3 && killed == nil {
				killed = fsys.Kill()
			}
		}}
		opts := storage.Options{FS: fsys, IndexSync: storage.IndexSyncLazy, Hooks: hooks}
		reg := New(Options{Root: "/data", Storage: opts})
		for i := range 3 {
			publishes.Add(1)
			if _, _, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(`{"i":` + string(rune('0'+i)) + `}`)}, contract.Durable); err != nil {
				t.Fatal(err)
			}
		}
		reg.Close()
		opts.Hooks = nil
		opts.FS = lyingSyncFS{MemFS: killed, untrusted: untrusted}
		reg2 := New(Options{Root: "/data", Storage: opts})
		if _, err := reg2.OpenAll(OnCorruptionFail, zap.NewNop()); err != nil {
			t.Fatal(err)
		}
		q, err := reg2.Open("t")
		if err != nil || q.HighWatermark() != 3 {
			t.Fatalf("restart: %v, want 3 entries served", err)
		}
		crashed := killed.Crash(vfs.CrashOptions{})
		reg2.Close()
		reg3 := New(Options{Root: "/data", Storage: storage.Options{FS: crashed}})
		defer reg3.Close()
		if _, err := reg3.OpenAll(OnCorruptionFail, zap.NewNop()); err != nil {
			return -1, err
		}
		q3, err := reg3.Open("t")
		if err != nil {
			return -1, err
		}
		return q3.HighWatermark(), nil
	}
	if hw, err := served(t, true); hw != 3 || err != nil {
		t.Fatalf("syncfs untrusted: after the restart and a power loss %d entries (%v), want the 3 served", hw, err)
	}
	// Trusting the lie loses what the restart served, or worse: the
	// index entry recovery wrote for it was fsynced, the segment bytes it
	// points at were not, and the topic is refused.
	hw, err := served(t, false)
	if hw == 3 {
		t.Fatalf("negative control: a syncfs that syncs nothing, trusted, kept all 3 entries through the power loss; the test cannot tell")
	}
	t.Logf("negative control (a no-op syncfs trusted): after the power loss %d entries, %v", hw, err)
}
