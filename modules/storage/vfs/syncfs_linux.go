//go:build linux

package vfs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// SyncFS implements FSSyncer with syncfs(2) on the filesystem holding dir:
// one call makes every file and directory entry written to it durable
// (and, since Linux 5.8, reports a writeback error any of them met).
func (OS) SyncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync filesystem of %s: %w", dir, err)
	}
	err = unix.Syncfs(int(f.Fd()))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync filesystem of %s: %w", dir, err)
	}
	return nil
}
