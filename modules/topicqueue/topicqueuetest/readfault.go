package topicqueuetest

import (
	"io/fs"
	"path/filepath"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// ReadFault is a topic registry over an in-memory filesystem whose topics
// keep one entry per segment file (a segment over 1 byte is full, so every
// append opens a new one), with a read fault that can be aimed at one
// offset: while FailAt holds o >= 0, every read of o's segment file fails
// with EIO (a *fs.PathError wrapping syscall.EIO) and nothing else does.
// FailAt starts at -1 (off); Fired counts the reads failed so far. Build it
// with NewReadFault; the caller closes Registry.
type ReadFault struct {
	Registry *topicqueue.Registry
	FailAt   atomic.Int64
	Fired    atomic.Int64
}

// NewReadFault returns the registry (root "/data") with the fault off.
func NewReadFault(log *zap.Logger) *ReadFault {
	mem := vfs.NewMem()
	f := &ReadFault{}
	f.FailAt.Store(-1)
	f.Registry = topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: mem, Logger: log, SegmentMaxBytes: 1}})
	mem.SetHook(func(op vfs.Op, name string) error {
		o := f.FailAt.Load()
		if op != vfs.OpRead || o < 0 || filepath.Base(name) != storage.SegmentName(o)+storage.SegmentExt {
			return nil
		}
		f.Fired.Add(1)
		return &fs.PathError{Op: "read", Path: name, Err: syscall.EIO}
	})
	return f
}
