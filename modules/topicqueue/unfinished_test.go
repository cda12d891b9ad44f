package topicqueue

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// A publish that creates a topic on a full disk fails and leaves nothing:
// no directory that a restart would have to create again (needing space)
// or would show as an empty topic nobody published to.
func TestFailedCreationLeavesNothing(t *testing.T) {
	for _, failing := range []string{storage.IncarnationFile + ".tmp", storage.SegmentName(0) + storage.IndexExt} {
		t.Run(failing, func(t *testing.T) {
			fsys := vfs.NewMem()
			fsys.SetHook(func(op vfs.Op, name string) error {
				if op == vfs.OpCreate && filepath.Base(name) == failing {
					return &fs.PathError{Op: "create", Path: name, Err: syscall.ENOSPC}
				}
				return nil
			})
			reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
			defer reg.Close()
			if _, err := reg.GetOrCreate("new.t"); !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("create on a full disk: %v, want ENOSPC", err)
			}
			if _, err := fsys.List("/data/new.t"); !vfs.IsNotExist(err) {
				t.Fatalf("the failed creation left its directory behind (%v)", err)
			}
		})
	}
}

// Startup removes a topic directory a failed or interrupted creation left
// (here: only an empty incarnation.tmp, as a full disk leaves it) instead of
// creating it again — which needs free space and, on a full disk, stopped
// the whole broker — and opens the other topics.
func TestStartupRemovesUnfinishedTopic(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	if _, err := reg.GetOrCreate("good.t"); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	if err := fsys.MkdirAll("/data/left.t"); err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile("/data/left.t/"+storage.IncarnationFile+".tmp", nil, true); err != nil {
		t.Fatal(err)
	}
	fsys.SetHook(func(op vfs.Op, name string) error { // the disk is full
		if op == vfs.OpCreate {
			return &fs.PathError{Op: "create", Path: name, Err: syscall.ENOSPC}
		}
		return nil
	})
	reg = New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	rep, err := reg.OpenAll(config.OnCorruptionFail, zap.NewNop())
	if err != nil {
		t.Fatalf("startup on a full disk with a leftover directory: %v", err)
	}
	if rep.Topics != 1 {
		t.Fatalf("%d topics opened, want 1 (good.t)", rep.Topics)
	}
	if _, err := fsys.List("/data/left.t"); !vfs.IsNotExist(err) {
		t.Fatalf("the leftover directory is still there (%v)", err)
	}
	var names []string
	for _, q := range reg.List() {
		names = append(names, q.Name())
	}
	if got := strings.Join(names, ","); got != "good.t" {
		t.Fatalf("topics %q, want good.t only", got)
	}
}
