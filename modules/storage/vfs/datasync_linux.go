//go:build linux

package vfs

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// Datasync implements File with fdatasync(2).
func (f osFile) Datasync() error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	// Control holds the descriptor open for the call; it fails only when
	// the file is closed (or closing).
	if err := rc.Control(func(fd uintptr) {
		for {
			if serr = unix.Fdatasync(int(fd)); serr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return &fs.PathError{Op: "datasync", Path: f.Name(), Err: fs.ErrClosed}
	}
	if serr != nil {
		return &fs.PathError{Op: "datasync", Path: f.Name(), Err: serr}
	}
	return nil
}
