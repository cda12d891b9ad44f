//go:build linux

package vfs

import (
	"fmt"
	"math"
	"syscall"
)

// FreeSpace implements FS with statfs(2) on dir: the blocks available to
// an unprivileged process times the block size (Bavail × Bsize), which is
// what df(1) shows as "Avail" and excludes the blocks the filesystem
// reserves for root.
func (OS) FreeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	free := uint64(st.Bavail) * uint64(st.Bsize)
	if st.Bsize > 0 && free/uint64(st.Bsize) != uint64(st.Bavail) || free > math.MaxInt64 {
		return math.MaxInt64, nil
	}
	return int64(free), nil
}

// TotalSpace implements FS with statfs(2) on dir: the filesystem's blocks
// times the block size (what df(1) shows as "Size").
func (OS) TotalSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	total := uint64(st.Blocks) * uint64(st.Bsize)
	if st.Bsize > 0 && total/uint64(st.Bsize) != uint64(st.Blocks) || total > math.MaxInt64 {
		return math.MaxInt64, nil
	}
	return int64(total), nil
}
