package vfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrLocked is what every *LockedError wraps, so errors.Is(err, ErrLocked)
// tells a held lock from an I/O failure of FS.Lock.
var ErrLocked = errors.New("vfs: file is locked")

// LockedError is returned by FS.Lock when the lock on Name is already held,
// by another process (OS) or by an earlier Lock not yet closed (either
// implementation). Holder is the holder's pid as written into the lock
// file, "unknown" when the file holds none.
type LockedError struct {
	Name   string // the lock file, as passed to Lock
	Holder string // pid of the holder, or "unknown"
}

// Error says which file is locked and by whom.
func (e *LockedError) Error() string {
	return fmt.Sprintf("vfs: %s is locked (pid %s)", e.Name, e.Holder)
}

// Unwrap returns ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// holderOf turns the first bytes of a lock file into a LockedError.Holder:
// the trimmed text, or "unknown" when empty.
func holderOf(b []byte) string {
	if h := strings.TrimSpace(string(b)); h != "" {
		return h
	}
	return "unknown"
}

// memLocks is the lock table of one MemFS: cleaned names currently locked.
type memLocks struct {
	mu   sync.Mutex
	held map[string]bool
}

// Lock implements FS with an in-process lock: a second Lock of the same
// name (however spelled: names are cleaned as for every MemFS call) fails
// with a *LockedError naming this process's pid until the first one's
// Closer is closed. Unlike OS it neither creates nor writes the file, so
// the namespace and what Crash keeps are unchanged; like OS it fails when
// the parent directory is missing ("open lock file <name>: ... ENOENT") or
// name is a directory. Locks are not carried over by Crash: a crashed
// process holds none. The hook is not called.
func (m *MemFS) Lock(name string) (io.Closer, error) {
	m.mu.RLock()
	dir, base, errno := m.parent(name)
	if errno == 0 && dir == nil {
		errno = syscall.EISDIR // the root
	}
	if errno == 0 {
		if n, ok := dir.children[base]; ok && n.dir {
			errno = syscall.EISDIR
		}
	}
	m.mu.RUnlock()
	if errno != 0 {
		return nil, fmt.Errorf("open lock file %s: %w", name, &fs.PathError{Op: "open", Path: name, Err: errno})
	}
	key := strings.Join(split(name), "/")
	m.locks.mu.Lock()
	defer m.locks.mu.Unlock()
	if m.locks.held[key] {
		return nil, &LockedError{Name: name, Holder: strconv.Itoa(os.Getpid())}
	}
	if m.locks.held == nil {
		m.locks.held = map[string]bool{}
	}
	m.locks.held[key] = true
	return &memLock{locks: &m.locks, key: key}, nil
}

// memLock is a held MemFS lock; Close releases it once.
type memLock struct {
	locks *memLocks
	key   string
	once  sync.Once
}

// Close releases the lock. Closing twice is a no-op.
func (l *memLock) Close() error {
	l.once.Do(func() {
		l.locks.mu.Lock()
		delete(l.locks.held, l.key)
		l.locks.mu.Unlock()
	})
	return nil
}
