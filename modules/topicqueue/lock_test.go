package topicqueue

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestLockRoot: on the real filesystem and on a MemFS, a second LockRootFS of
// a locked data root fails with ErrRootInUse and the operator's message
// (lock file, holder pid, what to do), and succeeds once the first lock is
// released. The root is created when missing.
func TestLockRoot(t *testing.T) {
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		root string
	}{
		{"os", vfs.OS{}, filepath.Join(t.TempDir(), "data")},
		{"mem", vfs.NewMem(), "/data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release, err := LockRootFS(tc.fs, tc.root)
			if err != nil {
				t.Fatalf("first lock: %v", err)
			}
			_, err = LockRootFS(tc.fs, tc.root)
			if !errors.Is(err, ErrRootInUse) {
				t.Fatalf("second lock: %v, want ErrRootInUse", err)
			}
			want := "topicqueue: data directory in use by another mmmq process: " + filepath.Join(tc.root, LockFile) +
				" is locked (pid " + strconv.Itoa(os.Getpid()) + "); stop that broker or use another mmmq.broker.storage.root-dir"
			if err.Error() != want {
				t.Errorf("message\n got %s\nwant %s", err, want)
			}
			if err := release(); err != nil {
				t.Fatalf("release: %v", err)
			}
			again, err := LockRootFS(tc.fs, tc.root)
			if err != nil {
				t.Fatalf("lock after release: %v", err)
			}
			if err := again(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
