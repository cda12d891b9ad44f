package storage

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/mmmq/mmmq/modules/contract"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Checkpoint file layout (on-disk format, do not change):
//
//	checkpoints/<name>.checkpoint
//	+----------------------------+
//	| int64 big-endian next offset |  exactly 8 bytes, overwritten in place
//	+----------------------------+
//
// The value is the next offset the owner (a dispatcher or a consumer group)
// will read. A commit overwrites bytes 0..7 and fsyncs before returning, so a
// crash leaves either the old or the new value (an aligned 8-byte write does
// not tear on the filesystems we support; a torn or garbled file is detected
// on open and restarts from the first offset: at-least-once, never skip).
const (
	// CheckpointDir is the sub-directory of a topic holding checkpoints.
	CheckpointDir = "checkpoints"
	// CheckpointExt is the file extension of a checkpoint.
	CheckpointExt  = ".checkpoint"
	checkpointSize = 8
)

// Checkpoint is one durable "next offset" of a topic. Safe for concurrent use.
//
// It holds no file descriptor between calls: OpenCheckpoint reads the file
// and closes it, and every Commit opens, writes, fsyncs and closes it. A
// broker with one checkpoint per (dispatcher or group, topic) over 10,000
// topics would otherwise keep 10,000 files open; the open and close cost a
// few microseconds next to the fsync every commit pays anyway (see
// BenchmarkCheckpointCommit). RecordFinished opens and closes
// <name>.finished the same way (finished.go).
type Checkpoint struct {
	fs     vfs.FS
	dir    string // <topic>/checkpoints
	path   string
	name   string
	mu     sync.Mutex
	exists bool // the file exists (seen at open, or created by a commit)
	offset int64
	size   int64 // file size seen at open; fixed to 8 on first commit
	closed bool
	log    *zap.Logger
	hooks  *Hooks // test-only injection (Hooks.SkipFinishedSync, SkipDeliveriesSync); nil in production

	// The finished offsets (finished.go), guarded by mu.
	fin            []contract.OffsetRange   // recorded, at or past offset: ascending, disjoint, non-adjacent
	dlv            []contract.DeliveryCount // delivery counts (deliveries.go), at or past offset, none finished: ascending, one per offset
	finExists      bool                     // <name>.finished exists
	finSize        int64                    // its size in bytes
	finBroken      bool                     // a write failed: its state on disk is unknown, rewrite it whole
	finRec         FinishedRecovery         // what OpenCheckpoint did to it
	finCheckSize   int64                    // maybeCompact looks again once the file reaches this size …
	finCheckRanges int                      // … or the ranges plus counts fall to this many
	compactBytes   int64                    // FinishedCompactBytes; tests lower it

	mode string // the content of <name>.mode once read or written (groupmode.go); "" when not known
}

// topicDir is the topic directory holding the checkpoints directory.
func (c *Checkpoint) topicDir() string { return filepath.Dir(c.dir) }

// OpenCheckpoint opens <topicDir>/checkpoints/<name>.checkpoint and returns
// it with its offset decided as follows (logEnd = the topic's high watermark):
//
//	file missing                 → 0 (a new name replays from offset 0)
//	shorter/longer than 8 bytes  → 0, logged as an error (at-least-once: never skip)
//	negative value               → 0, logged as an error
//	value > logEnd               → logEnd, logged as a warning
//
// Then it reads <name>.finished, the offsets finished past that one, when
// present (see FinishedRecovery for what its recovery may do: cut a torn
// last append, set a damaged file aside, drop ranges at or past logEnd).
// The checkpoint file is not modified until the first Commit. Errors: an
// invalid name, or an I/O error reading either file or recovering the
// .finished one.
func OpenCheckpoint(fsys vfs.FS, topicDir, name string, logEnd int64, log *zap.Logger) (*Checkpoint, error) {
	if err := contract.ValidCheckpointName(name); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	c := &Checkpoint{
		fs:           fsys,
		dir:          filepath.Join(topicDir, CheckpointDir),
		name:         name,
		log:          log,
		compactBytes: FinishedCompactBytes,
	}
	c.path = filepath.Join(c.dir, name+CheckpointExt)
	if err := c.readOffset(logEnd); err != nil {
		return nil, err
	}
	if err := c.loadFinished(logEnd); err != nil {
		return nil, err
	}
	return c, nil
}

// readOffset reads the checkpoint file at open (see OpenCheckpoint).
func (c *Checkpoint) readOffset(logEnd int64) error {
	log := c.log
	f, err := c.fs.Open(c.path)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open checkpoint %s: %w%s", c.path, err, fdHint(err))
	}
	defer f.Close()
	c.exists = true
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("stat checkpoint %s: %w", c.path, err)
	}
	c.size = size
	if size != checkpointSize {
		log.Error("checkpoint file has the wrong size; restarting from the first offset (messages will be redelivered)",
			zap.String("file", c.path), zap.Int64("size", size), zap.Int("want-size", checkpointSize))
		return nil
	}
	var buf [checkpointSize]byte
	if _, err := f.ReadAt(buf[:], 0); err != nil {
		return fmt.Errorf("read checkpoint %s: %w", c.path, err)
	}
	v := int64(binary.BigEndian.Uint64(buf[:]))
	switch {
	case v < 0:
		log.Error("checkpoint value is negative; restarting from the first offset (messages will be redelivered)",
			zap.String("file", c.path), zap.Int64("value", v))
	case v > logEnd:
		log.Warn("checkpoint is beyond the end of the log; clamping to the end",
			zap.String("file", c.path), zap.Int64("value", v), zap.Int64("log-end", logEnd))
		c.offset = logEnd
	default:
		c.offset = v
	}
	return nil
}

// Name is the checkpoint's owner name.
func (c *Checkpoint) Name() string { return c.name }

// Path is the checkpoint file path.
func (c *Checkpoint) Path() string { return c.path }

// Exists reports whether the checkpoint has a file: false for a reader
// that never committed on this topic (a new dispatcher's start position
// then applies).
func (c *Checkpoint) Exists() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.exists
}

// Offset is the last committed next offset (0 for a new checkpoint).
func (c *Checkpoint) Offset() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// Commit durably stores next: it overwrites the 8 bytes in place and fsyncs
// before returning. The first commit of a new checkpoint creates the file
// and fsyncs the directory. Then the finished offsets below next are
// forgotten (Finished), and the .finished file is removed once none is
// left, or compacted (finished.go). A commit that moves the offset back
// first rewrites the .finished file to hold only Finished's ranges. On
// error the stored value is unknown to the caller and Offset keeps the
// previous value. After Close it returns an error wrapping
// contract.ErrClosed.
func (c *Checkpoint) Commit(next int64) error {
	if next < 0 {
		return fmt.Errorf("commit checkpoint %s: negative offset %d", c.name, next)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("commit checkpoint %s: %w", c.name, contract.ErrClosed)
	}
	if next < c.offset && (c.finExists || c.finBroken) {
		// The file may hold stale ranges and delivery counts below the
		// old offset that a lower one would bring back: keep only the
		// live ones.
		if err := c.rewriteFinished(c.fin, c.dlv); err != nil {
			return fmt.Errorf("commit checkpoint %s: %w", c.name, err)
		}
	}
	if err := c.commit(next); err != nil {
		return err
	}
	c.afterCommit()
	return nil
}

// commit stores next in the checkpoint file.
func (c *Checkpoint) commit(next int64) error {
	if !c.exists {
		if err := c.create(next); err != nil {
			return err
		}
		c.exists, c.size, c.offset = true, checkpointSize, next
		return nil
	}
	f, err := c.fs.OpenRW(c.path)
	if err != nil {
		return fmt.Errorf("open checkpoint %s: %w%s", c.path, err, fdHint(err))
	}
	defer f.Close()
	if c.size > checkpointSize {
		if err := f.Truncate(checkpointSize); err != nil {
			return fmt.Errorf("truncate checkpoint %s: %w", c.path, err)
		}
	}
	if err := c.write(f, next); err != nil {
		return err
	}
	c.size, c.offset = checkpointSize, next
	return nil
}

// create makes the file of a checkpoint that had none, holding next, and
// fsyncs it, the checkpoints directory and the topic directory.
func (c *Checkpoint) create(next int64) error {
	if err := c.fs.MkdirAll(c.dir); err != nil {
		return fmt.Errorf("create checkpoint dir %s: %w", c.dir, err)
	}
	f, err := c.fs.Create(c.path)
	if err != nil {
		return fmt.Errorf("create checkpoint %s: %w%s", c.path, err, fdHint(err))
	}
	defer f.Close()
	if err := c.write(f, next); err != nil {
		return err
	}
	if err := c.fs.SyncDir(c.dir); err != nil {
		return fmt.Errorf("sync checkpoint dir %s: %w", c.dir, err)
	}
	if err := c.fs.SyncDir(filepath.Dir(c.dir)); err != nil {
		return fmt.Errorf("sync topic dir %s: %w", filepath.Dir(c.dir), err)
	}
	return nil
}

func (c *Checkpoint) write(f vfs.File, next int64) error {
	var buf [checkpointSize]byte
	binary.BigEndian.PutUint64(buf[:], uint64(next))
	if _, err := f.WriteAt(buf[:], 0); err != nil {
		return fmt.Errorf("write checkpoint %s: %w", c.path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync checkpoint %s: %w", c.path, err)
	}
	return nil
}

// Close marks the checkpoint closed (it holds no file between calls). It
// does not commit; a later Commit returns contract.ErrClosed (it never re-creates
// the file).
func (c *Checkpoint) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// RemoveCheckpoint closes the checkpoint name of this topic if it is open
// and removes its files (<name>.checkpoint, <name>.finished with its
// delivery counts, <name>.mode and a leftover <name>.finished.tmp or
// <name>.mode.tmp), durably (the checkpoints directory is fsynced). A
// checkpoint that does not exist is no error. A <name>.finished.corrupt
// that recovery set aside is left for the operator. The admin API's
// ?delete-checkpoints=true uses it: a reader created again under that name
// starts from offset 0.
func (l *Log) RemoveCheckpoint(name string) error {
	if err := contract.ValidCheckpointName(name); err != nil {
		return err
	}
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if c, ok := l.checkpoints[name]; ok {
		_ = c.Close()
		delete(l.checkpoints, name)
	}
	dir := filepath.Join(l.dir, CheckpointDir)
	removed := false
	for _, p := range []string{
		filepath.Join(dir, name+CheckpointExt),
		filepath.Join(dir, name+FinishedExt),
		filepath.Join(dir, name+FinishedExt+vfs.TmpExt),
		filepath.Join(dir, name+ModeExt),
		filepath.Join(dir, name+ModeExt+vfs.TmpExt),
	} {
		if err := l.fs.Remove(p); err != nil {
			if vfs.IsNotExist(err) {
				continue
			}
			return fmt.Errorf("remove checkpoint %s: %w", p, err)
		}
		removed = true
	}
	if !removed {
		return nil
	}
	if err := l.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
