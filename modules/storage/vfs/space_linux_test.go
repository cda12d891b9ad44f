//go:build linux

package vfs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/storage/vfs/vfstest"
)

// TestOSFreeSpaceOnTmpfs: OS.FreeSpace is statfs's Bavail × Bsize: on a
// fresh 1 MiB tmpfs it is 1 MiB, it drops by what a file takes and comes
// back when the file is removed; a missing directory is an error naming it.
func TestOSFreeSpaceOnTmpfs(t *testing.T) {
	const size = 1 << 20
	dir := vfstest.MountTmpfs(t, size)
	free0, err := vfs.OS{}.FreeSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if free0 != size {
		t.Fatalf("free space of a fresh %d-byte tmpfs = %d", size, free0)
	}
	name := filepath.Join(dir, "fill")
	if err := os.WriteFile(name, make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	free1, err := vfs.OS{}.FreeSpace(dir)
	if err != nil {
		t.Fatal(err)
	}
	if free1 != free0-256<<10 {
		t.Errorf("after writing 256 KiB: free %d, want %d", free1, free0-256<<10)
	}
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	if free2, err := (vfs.OS{}).FreeSpace(dir); err != nil || free2 != free0 {
		t.Errorf("after removing it: free %d (%v), want %d", free2, err, free0)
	}
	missing := filepath.Join(dir, "missing")
	if _, err := (vfs.OS{}).FreeSpace(missing); err == nil || !vfs.IsNotExist(err) {
		t.Errorf("FreeSpace(missing) = %v, want a not-exist error", err)
	}
}

// TestOSTotalSpaceOnTmpfs: OS.TotalSpace is the filesystem's size
// (Blocks × Bsize), whatever is used; a missing directory is an error.
func TestOSTotalSpaceOnTmpfs(t *testing.T) {
	const size = 1 << 20
	dir := vfstest.MountTmpfs(t, size)
	if err := os.WriteFile(filepath.Join(dir, "fill"), make([]byte, 256<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	if total, err := (vfs.OS{}).TotalSpace(dir); err != nil || total != size {
		t.Fatalf("total space of a %d-byte tmpfs = %d (%v)", size, total, err)
	}
	if _, err := (vfs.OS{}).TotalSpace(filepath.Join(dir, "missing")); err == nil || !vfs.IsNotExist(err) {
		t.Errorf("TotalSpace(missing) = %v, want a not-exist error", err)
	}
}
