package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestLock: on every FS a second Lock of a held name fails at once with a
// *LockedError naming this process, and succeeds again once the first
// lock is closed. A missing parent directory is an I/O error, not ErrLocked.
func TestLock(t *testing.T) {
	osDir := t.TempDir()
	for _, tc := range []struct {
		name string
		fs   vfs.FS
		dir  string
	}{
		{"os", vfs.OS{}, osDir},
		{"mem", vfs.NewMem(), "/"},
		{"counting-os", vfs.NewCounting(vfs.OS{}), t.TempDir()},
		{"counting-mem", vfs.NewCounting(vfs.NewMem()), "/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := filepath.Join(tc.dir, ".lock")
			first, err := tc.fs.Lock(name)
			if err != nil {
				t.Fatalf("first lock: %v", err)
			}
			_, err = tc.fs.Lock(name)
			var le *vfs.LockedError
			if !errors.As(err, &le) || !errors.Is(err, vfs.ErrLocked) {
				t.Fatalf("second lock: %v, want a *LockedError", err)
			}
			if le.Name != name || le.Holder != strconv.Itoa(os.Getpid()) {
				t.Errorf("LockedError %+v, want name %s holder %d", le, name, os.Getpid())
			}
			if err := first.Close(); err != nil {
				t.Fatalf("release: %v", err)
			}
			again, err := tc.fs.Lock(name)
			if err != nil {
				t.Fatalf("lock after release: %v", err)
			}
			if err := again.Close(); err != nil {
				t.Fatal(err)
			}
			_, err = tc.fs.Lock(filepath.Join(tc.dir, "missing", ".lock"))
			if !vfs.IsNotExist(err) || errors.Is(err, vfs.ErrLocked) {
				t.Errorf("lock in a missing directory: %v", err)
			}
		})
	}
}

// TestOSLockWritesPid: the OS lock file holds the holder's pid, which is
// what a refused Lock in another process reports.
func TestOSLockWritesPid(t *testing.T) {
	name := filepath.Join(t.TempDir(), ".lock")
	if err := os.WriteFile(name, []byte("stale contents that are longer than a pid\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := vfs.OS{}.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	b, err := os.ReadFile(name)
	if err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
		t.Fatalf("lock file %q, %v", b, err)
	}
}

// TestMemLockNamesAndCrash: MemFS locks by cleaned name, creates no file,
// and a crashed FS holds no locks.
func TestMemLockNamesAndCrash(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("/data"); err != nil {
		t.Fatal(err)
	}
	if err := m.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	l, err := m.Lock("/data/.lock")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Lock("data/./.lock"); !errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("same name spelled differently: %v", err)
	}
	if ents, _ := m.List("/data"); len(ents) != 0 {
		t.Fatalf("MemFS lock created %v", ents)
	}
	if _, err := m.Lock("/data"); err == nil || errors.Is(err, vfs.ErrLocked) {
		t.Fatalf("lock of a directory: %v", err)
	}
	crashed := m.Crash(vfs.CrashOptions{})
	c, err := crashed.Lock("/data/.lock")
	if err != nil {
		t.Fatalf("lock after crash: %v", err)
	}
	c.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}
