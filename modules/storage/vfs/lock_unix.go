//go:build unix

package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// Lock implements FS with flock(2): it opens (creating, mode 0o644) name and
// takes an exclusive, non-blocking flock on it. When another open file
// description holds it (another process, or an earlier Lock in this one)
// it returns a *LockedError whose Holder is the pid found in the file.
// Once locked, the file's contents are replaced by this process's pid and a
// newline, so the next refused Lock can name it. The kernel drops the lock
// when the process dies (kill -9 included).
func (OS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", name, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Name: name, Holder: holderOf(b[:n])}
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return osLock{f}, nil
}

// osLock is a held flock; Close unlocks and closes the file.
type osLock struct{ f *os.File }

// Close releases the flock and closes the lock file.
func (l osLock) Close() error {
	err := syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}
