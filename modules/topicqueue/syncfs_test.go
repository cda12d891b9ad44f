package topicqueue

import (
	"context"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
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
	for i, lvl := range []storage.AckLevel{storage.Durable, storage.Durable, storage.Written} {
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
	if _, err := reg2.OpenAll(config.OnCorruptionFail, zap.NewNop()); err != nil {
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
	if _, err := reg3.OpenAll(config.OnCorruptionFail, zap.NewNop()); err != nil {
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
