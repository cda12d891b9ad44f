package schedule

import (
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Group commit, in the storage engine's writer shape: every record write
// (a schedule, a cancel, a mover step's moving and delivered records, a
// topic deletion's dropped records) goes into the current batch under
// s.mu; one flusher goroutine takes the batch, fsyncs each file it wrote
// (and the directory when it made a file) once, and answers every waiter
// of the batch with one shared error. After an fsync error the store is
// failed: every waiter of that batch and every later one gets the error
// (an fsync is never retried, then trusted).

// slowFsync is the duration above which one batch's fsyncs are logged.
const slowFsync = time.Second

// added is a scheduled record of a batch: made visible once fsynced.
type added struct {
	bucket int64
	e      entry
}

// commitBatch is the records written since the flusher last took a batch.
type commitBatch struct {
	files   map[int64]vfs.File // files written, open until the fsync
	bytes   map[int64]int64    // bytes written to each (at most maxGroupBytes, see waitRoom)
	newFile bool               // a file was created: fsync the directory
	added   []added
	done    chan struct{} // closed once the batch is fsynced or failed
	err     error         // set before done is closed
}

// wait blocks until the batch is fsynced; the error is the batch's.
func (cb *commitBatch) wait() error {
	<-cb.done
	return cb.err
}

// write appends rec at the end of bucket's file (created when missing)
// into the current batch and returns the batch and where rec starts.
// Nothing is durable before the batch's wait returns nil. A write error
// fails the store; after Stop (or a failure) nothing is written. s.mu is
// held.
func (s *Scheduler) write(bucket int64, rec []byte) (*commitBatch, int64, error) {
	if err := s.usable(); err != nil {
		return nil, 0, err // stopped: the flusher may be gone
	}
	if !s.dirMade {
		if err := s.makeDir(); err != nil {
			return nil, 0, s.fail(err)
		}
	}
	cb := s.batch
	if cb == nil {
		cb = &commitBatch{files: map[int64]vfs.File{}, bytes: map[int64]int64{}, done: make(chan struct{})}
		s.batch = cb
		select {
		case s.flushReq <- struct{}{}:
		default:
		}
	}
	name := s.path(bucket)
	end, exists := s.sizes[bucket]
	f := cb.files[bucket]
	if f == nil {
		var err error
		if exists {
			f, err = s.opts.FS.OpenRW(name)
		} else {
			f, err = s.opts.FS.Create(name)
			cb.newFile = true
		}
		if err != nil {
			return nil, 0, s.fail(fmt.Errorf("open %s: %w", name, err))
		}
		cb.files[bucket] = f
	}
	if _, err := f.WriteAt(rec, end); err != nil {
		return nil, 0, s.fail(fmt.Errorf("write %s: %w", name, err))
	}
	s.sizes[bucket] = end + int64(len(rec))
	cb.bytes[bucket] += int64(len(rec))
	return cb, end, nil
}

// waitRoom waits until the current batch can take n more bytes of
// bucket's file within maxGroupBytes (a larger record goes alone), so
// that what a crash can tear stays within damageWindow of the end (see
// repair.go). s.mu is held, released while waiting; the store must be
// usable (checked again after a wait).
func (s *Scheduler) waitRoom(bucket int64, n int) error {
	for {
		if err := s.usable(); err != nil {
			return err
		}
		cb := s.batch
		if cb == nil || cb.bytes[bucket] == 0 || cb.bytes[bucket]+int64(n) <= maxGroupBytes {
			return nil
		}
		s.mu.Unlock()
		<-cb.done
		s.mu.Lock()
	}
}

// startFlusher launches the flusher unless it runs; s.mu is held.
func (s *Scheduler) startFlusher() {
	if s.flushStop != nil {
		return
	}
	s.flushReq, s.flushStop, s.flushDone = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	go s.flushLoop(s.flushReq, s.flushStop, s.flushDone)
}

// flushLoop is the flusher: it fsyncs each batch as it comes; on stop it
// fsyncs the last one and returns.
func (s *Scheduler) flushLoop(req, stop, done chan struct{}) {
	defer close(done)
	for {
		select {
		case <-req:
			s.flushOnce()
		case <-stop:
			s.flushOnce()
			return
		}
	}
}

// flushOnce fsyncs the current batch and answers its waiters.
func (s *Scheduler) flushOnce() {
	s.mu.Lock()
	cb := s.batch
	s.batch = nil
	err := s.failed
	s.mu.Unlock()
	if cb == nil {
		return
	}
	start := time.Now()
	keys := make([]int64, 0, len(cb.files))
	for b := range cb.files {
		keys = append(keys, b)
	}
	slices.Sort(keys)
	for _, b := range keys {
		f := cb.files[b]
		if err == nil {
			if e := s.sync(f); e != nil {
				err = fmt.Errorf("fsync %s: %w", s.path(b), e)
			}
		}
		f.Close()
	}
	if err == nil && cb.newFile {
		if e := s.syncDir(); e != nil {
			err = fmt.Errorf("fsync %s: %w", s.opts.Dir, e)
		}
	}
	if d := time.Since(start); d > slowFsync {
		s.log.Warn("scheduled messages: slow fsync", zap.Duration("took", d), zap.Int("files", len(keys)))
	}
	s.mu.Lock()
	switch {
	case s.failed != nil:
		err = s.failed
	case err != nil:
		err = s.fail(err)
	default:
		s.visible(cb.added)
	}
	cb.err = err
	s.mu.Unlock()
	close(cb.done)
}
