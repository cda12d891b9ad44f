//go:build !linux

package vfs

import (
	"errors"
	"fmt"
)

// SyncFS implements FSSyncer: syncfs(2) is Linux only; elsewhere the
// caller syncs file by file.
func (OS) SyncFS(dir string) error {
	return fmt.Errorf("sync filesystem of %s: %w", dir, errors.ErrUnsupported)
}
