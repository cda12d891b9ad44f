package topicqueue

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
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
	rep, err := reg.OpenAll(OnCorruptionFail, zap.NewNop())
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

// snapshot is every file under dir with its contents, and every directory
// (as "name/"), for checking that nothing changed.
func snapshot(t *testing.T, fsys *vfs.MemFS, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(string)
	walk = func(d string) {
		ents, err := fsys.List(d)
		if err != nil {
			t.Fatalf("list %s: %v", d, err)
		}
		for _, e := range ents {
			p := filepath.Join(d, e.Name)
			if e.IsDir {
				out[p+"/"] = ""
				walk(p)
				continue
			}
			b, err := fsys.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = string(b)
		}
	}
	walk(dir)
	return out
}

// foreignDirs lays out, under /data, directories that no topic creation
// leaves: under valid topic names (a file of someone else's, a nested
// tree, a lone checkpoint, an empty checkpoints directory, a file named
// like a leftover but not one) and under names that are not topics.
func foreignDirs(t *testing.T, fsys *vfs.MemFS) (refused []string) {
	t.Helper()
	files := map[string]string{
		"/data/backup/readme.txt":               "important\n",
		"/data/nested/deep/f":                   "n\n",
		"/data/used/checkpoints/foo.checkpoint": "\x00\x00\x00\x00\x00\x00\x00\x07",
		"/data/odd.t/incarnation.tmp.bak":       "x",
		"/data/.deleting-not-ours/keep":         "k",
		"/data/.deleting-0123456789ABCDEF/keep": "upper-case hex is not a name the broker makes",
		"/data/not a topic/f":                   "f",
		"/data/..x/f":                           "f",
	}
	for name, data := range files {
		if err := fsys.WriteFile(name, []byte(data), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := fsys.MkdirAll("/data/emptycp/checkpoints"); err != nil {
		t.Fatal(err)
	}
	return []string{"backup", "emptycp", "nested", "odd.t", "used"}
}

// Startup never removes a directory that holds anything a topic creation
// does not leave: under a valid topic name it is refused like corruption
// (quarantined here, so the broker serves the rest), left byte for byte
// as it was, and never written into by a publish; under any other name it
// is skipped.
func TestStartupLeavesForeignDirectoriesAlone(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	if _, err := reg.GetOrCreate("good.t"); err != nil {
		t.Fatal(err)
	}
	reg.Close()
	refused := foreignDirs(t, fsys)
	before := snapshot(t, fsys, "/data")

	reg = New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	rep, err := reg.OpenAll(OnCorruptionQuarantine, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Topics != 1 || len(rep.Quarantined) != len(refused) {
		t.Fatalf("opened %d topics, quarantined %v; want good.t open and %v refused", rep.Topics, rep.Quarantined, refused)
	}
	for _, name := range refused {
		var ce *contract.CorruptionError
		if err := rep.Quarantined[name]; !errors.As(err, &ce) || !strings.Contains(ce.Reason, "no topic creation leaves") {
			t.Errorf("%s: %v, want a refusal saying it is not what a creation leaves", name, err)
		}
		if _, err := reg.GetOrCreate(name); !errors.Is(err, ErrQuarantined) {
			t.Errorf("publish to %s: %v, want ErrQuarantined", name, err)
		}
	}
	if !strings.Contains(rep.Quarantined["backup"].Error(), "readme.txt") ||
		!strings.Contains(rep.Quarantined["nested"].Error(), "deep/") ||
		strings.Contains(rep.Quarantined["backup"].Error(), "offset") {
		t.Errorf("refusals should name the unexpected entries and no offset: %v", rep.Quarantined)
	}
	after := snapshot(t, fsys, "/data")
	for p, data := range before {
		if got, ok := after[p]; !ok || got != data {
			t.Errorf("%s changed by startup (present %v)", p, ok)
		}
	}
}

// Under the default policy a foreign directory stops startup, naming it,
// with every file untouched.
func TestStartupForeignDirectoryFailsUntouched(t *testing.T) {
	fsys := vfs.NewMem()
	if err := fsys.WriteFile("/data/backup/readme.txt", []byte("important\n"), true); err != nil {
		t.Fatal(err)
	}
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	_, err := reg.OpenAll(OnCorruptionFail, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), `topic "backup"`) || !strings.Contains(err.Error(), "readme.txt") {
		t.Fatalf("startup: %v, want a refusal naming backup and readme.txt", err)
	}
	if b, err := fsys.ReadFile("/data/backup/readme.txt"); err != nil || string(b) != "important\n" {
		t.Fatalf("readme.txt after startup: %q, %v", b, err)
	}
}

// A publish to a name whose directory holds someone else's files (made
// while the broker runs) is refused and writes nothing into it.
func TestCreateIntoForeignDirectoryRefused(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	if err := fsys.WriteFile("/data/backup/readme.txt", []byte("important\n"), true); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, fsys, "/data")
	var ce *contract.CorruptionError
	if _, err := reg.GetOrCreate("backup"); !errors.As(err, &ce) {
		t.Fatalf("create into a foreign directory: %v, want a refusal", err)
	}
	if after := snapshot(t, fsys, "/data"); len(after) != len(before) || after["/data/backup/readme.txt"] != "important\n" {
		t.Fatalf("the refused creation changed the directory: %v", after)
	}
}

// The states a topic creation interrupted before its incarnation id (and
// so before its first segment) can leave — an empty directory,
// incarnation.tmp empty, torn or whole — are still removed at startup.
func TestStartupRemovesEveryInterruptedCreationState(t *testing.T) {
	for name, tmp := range map[string]*string{
		"empty directory":       nil,
		"empty incarnation.tmp": ptr(""),
		"torn incarnation.tmp":  ptr("0123456789"),
		"whole incarnation.tmp": ptr(contract.NewIncarnation() + "\n"),
	} {
		t.Run(name, func(t *testing.T) {
			fsys := vfs.NewMem()
			if err := fsys.MkdirAll("/data/left.t"); err != nil {
				t.Fatal(err)
			}
			if tmp != nil {
				if err := fsys.WriteFile("/data/left.t/"+storage.IncarnationFile+vfs.TmpExt, []byte(*tmp), true); err != nil {
					t.Fatal(err)
				}
			}
			reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
			defer reg.Close()
			rep, err := reg.OpenAll(OnCorruptionFail, zap.NewNop())
			if err != nil || rep.Topics != 0 {
				t.Fatalf("startup: %+v, %v", rep, err)
			}
			if _, err := fsys.List("/data/left.t"); !vfs.IsNotExist(err) {
				t.Fatalf("the leftover directory is still there (%v)", err)
			}
		})
	}
}

func ptr(s string) *string { return &s }
