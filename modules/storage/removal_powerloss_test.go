package storage

import (
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// rootEntries is the names in dir of fsys, space-separated.
func rootEntries(t *testing.T, fsys *vfs.MemFS, dir string) string {
	t.Helper()
	ents, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name)
	}
	return strings.Join(names, " ")
}

// newTopicDir makes topic under root on fsys, durably: one message and a
// checkpoint "d" at 1, then closes it.
func newTopicDir(t *testing.T, fsys *vfs.MemFS, root, topic string) {
	t.Helper()
	l, err := Open(filepath.Join(root, topic), Options{FS: fsys, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, l, payload(1, 64))
	cp, err := l.Checkpoint("d")
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.Commit(1); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDeletionDurableOnReturn: once DeleteTopicDir has returned, a power
// loss (MemFS.Crash) finds neither the topic nor the directory of its
// deletion (step 4, the last fsync of the data root): a deleted topic
// holds no disk space and leaves no work for the next start. Likewise,
// once FinishDeletions has returned, a power loss finds none of the
// directories it removed.
func TestDeletionDurableOnReturn(t *testing.T) {
	const root = "/data"
	fsys := vfs.NewMem()
	newTopicDir(t, fsys, root, "gone")
	newTopicDir(t, fsys, root, "kept")
	if _, err := DeleteTopicDir(fsys, root, "gone", nil); err != nil {
		t.Fatal(err)
	}
	if got := rootEntries(t, fsys.Crash(vfs.CrashOptions{}), root); got != "kept" {
		t.Fatalf("power loss after DeleteTopicDir returned: data root holds %q, want only \"kept\"", got)
	}

	// An interrupted deletion: the topic renamed aside durably, nothing
	// removed yet.
	aside := filepath.Join(root, DeletingPrefix+"0123456789abcdef")
	if err := fsys.Rename(filepath.Join(root, "kept"), aside); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(root); err != nil {
		t.Fatal(err)
	}
	removed, err := FinishDeletions(fsys, root)
	if err != nil || len(removed) != 1 {
		t.Fatalf("FinishDeletions = %v, %v; want the one directory", removed, err)
	}
	if got := rootEntries(t, fsys.Crash(vfs.CrashOptions{}), root); got != "" {
		t.Fatalf("power loss after FinishDeletions returned: data root holds %q, want nothing", got)
	}
}

// TestRemoveCheckpointDurableOnReturn: once RemoveCheckpoint has
// returned, a power loss finds no file of the checkpoint (the checkpoints
// directory is fsynced), so a reader created again under the name starts
// from offset 0 as promised, not from the removed checkpoint.
func TestRemoveCheckpointDurableOnReturn(t *testing.T) {
	fsys := vfs.NewMem()
	newTopicDir(t, fsys, "/data", "t")
	l, err := Open("/data/t", Options{FS: fsys, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.RemoveCheckpoint("d"); err != nil {
		t.Fatal(err)
	}
	crashed := fsys.Crash(vfs.CrashOptions{})
	if got := rootEntries(t, crashed, "/data/t/"+CheckpointDir); got != "" {
		t.Fatalf("power loss after RemoveCheckpoint returned: checkpoints directory holds %q, want nothing", got)
	}
	cp, err := OpenCheckpoint(crashed, "/data/t", "d", 1, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if cp.Exists() || cp.Offset() != 0 {
		t.Fatalf("checkpoint d after the power loss: exists %v, offset %d; want none at 0", cp.Exists(), cp.Offset())
	}
}
