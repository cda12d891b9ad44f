//go:build linux

package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestOSSyncFS: syncfs(2) on a real directory succeeds, a missing one is an
// error naming it, and CountingFS forwards it (or says it is unsupported).
func TestOSSyncFS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (vfs.OS{}).SyncFS(dir); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	if err := (vfs.OS{}).SyncFS(missing); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
	if err := vfs.NewCounting(vfs.OS{}).SyncFS(dir); err != nil {
		t.Fatalf("counting over OS: %v", err)
	}
	type plain struct{ vfs.FS } // hides OS's SyncFS
	if err := vfs.NewCounting(plain{vfs.OS{}}).SyncFS(dir); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("counting over an FS without SyncFS: %v", err)
	}
}
