//go:build !linux

package vfs

import (
	"errors"
	"fmt"
)

// ErrFreeSpaceUnsupported is returned by OS.FreeSpace where mmmq has no
// statfs call (every platform but Linux).
var ErrFreeSpaceUnsupported = errors.New("vfs: free space is not reported on this platform")

// FreeSpace implements FS: not supported here (see ErrFreeSpaceUnsupported).
func (OS) FreeSpace(dir string) (int64, error) {
	return 0, fmt.Errorf("statfs %s: %w", dir, ErrFreeSpaceUnsupported)
}

// TotalSpace implements FS: not supported here (see ErrFreeSpaceUnsupported).
func (OS) TotalSpace(dir string) (int64, error) {
	return 0, fmt.Errorf("statfs %s: %w", dir, ErrFreeSpaceUnsupported)
}
