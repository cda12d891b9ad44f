package topicqueue

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// LockFile is the file in the data root that one broker process holds an
// exclusive lock on for its whole life: two brokers on one data directory
// would both write the same segments and one would run recovery under the
// other, cutting acknowledged data.
const LockFile = ".lock"

// ErrRootInUse is returned by LockRootFS when another process holds the lock.
var ErrRootInUse = errors.New("topicqueue: data directory in use by another mmmq process")

// LockRootFS creates root (durably) on fsys if needed and takes the exclusive,
// non-blocking lock on root/.lock through fsys.Lock: on the real filesystem
// a flock(2) that also records this process's pid in the file, on a MemFS an
// in-process lock. The lock is released by release or when the process dies
// (kill -9 included), so a crashed broker never blocks its restart. Errors:
// ErrRootInUse, wrapped with the lock file and the holder's pid ("unknown"
// when the file holds none), or an I/O error.
func LockRootFS(fsys vfs.FS, root string) (release func() error, err error) {
	if err := storage.MkdirDurable(fsys, root); err != nil {
		return nil, err
	}
	path := filepath.Join(root, LockFile)
	l, err := fsys.Lock(path)
	var held *vfs.LockedError
	if errors.As(err, &held) {
		return nil, fmt.Errorf("%w: %s is locked (pid %s); stop that broker or use another mmmq.broker.storage.root-dir",
			ErrRootInUse, path, held.Holder)
	}
	if err != nil {
		return nil, err
	}
	return l.Close, nil
}
