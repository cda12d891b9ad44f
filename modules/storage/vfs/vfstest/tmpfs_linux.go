//go:build linux

// Package vfstest holds test helpers for code that runs on the real
// filesystem (vfs.OS) and must see it fill up: MountTmpfs gives a test a
// small filesystem of its own.
package vfstest

import (
	"fmt"
	"syscall"
	"testing"
)

// MountTmpfs mounts a tmpfs of size bytes (rounded up to whole pages by the
// kernel) on a new directory under t.TempDir() and returns the directory;
// it is unmounted when the test ends, after the cleanups registered later
// (files closed, brokers stopped). Mounting needs root (CAP_SYS_ADMIN):
// without it the test fails, saying so — a disk-full test that silently
// ran on the big disk would prove nothing.
func MountTmpfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v (this test needs root, as `make test` has in CI, to create a small filesystem of its own)", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			// Still busy (a file left open): detach it so the directory
			// can be removed, and fail the test that leaked the file.
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			t.Errorf("unmount tmpfs %s: %v", dir, err)
		}
	})
	return dir
}
