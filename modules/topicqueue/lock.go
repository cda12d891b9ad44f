package topicqueue

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// LockFile is the file in the data root that one broker process holds an
// exclusive flock(2) on for its whole life: two brokers on one data
// directory would both write the same segments and one would run recovery
// under the other, cutting acknowledged data.
const LockFile = ".lock"

// ErrRootInUse is returned by LockRoot when another process holds the lock.
var ErrRootInUse = errors.New("topicqueue: data directory in use by another mmmq process")

// LockRoot creates root (durably) if needed and takes an exclusive,
// non-blocking flock on root/.lock, writing this process's pid into it. The
// lock is released by release or when the process dies (kill -9 included),
// so a crashed broker never blocks its restart. Errors: ErrRootInUse (with
// the holder's pid when known), or an I/O error.
func LockRoot(root string) (release func() error, err error) {
	if err := storage.MkdirDurable(vfs.OS{}, root); err != nil {
		return nil, err
	}
	path := filepath.Join(root, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b[:n]))
			if holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is locked (pid %s); stop that broker or use another mmmq.broker.storage.root-dir",
				ErrRootInUse, path, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() error {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}, nil
}
