package storage

import (
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Retention: deleting whole sealed segments from the head of the log.
//
//	ApplyRetention ─ per head segment, oldest first, while one is due:
//	  1. publish the segment list without it ....... readers no longer find it;
//	                                                  StartOffset moves to the next base
//	  2. evict its files from the segment cache ..... a reader pinning them keeps
//	                                                  reading the unlinked files
//	  3. remove <base>.idx ........................ (hook BetweenSegmentUnlinks)
//	  4. remove <base>.mmm
//	  5. fsync the topic directory
//
// A crash after 3 leaves a first segment with one of its two files: repair
// finishes the deletion (see the package doc). The directory is fsynced
// after every segment, so at most the first remaining segment is ever in
// that state, whatever a power loss keeps of unsynced directory entries.
// The active segment is never deleted.

// retentionState is the log's retention bookkeeping. mu serialises
// ApplyRetention calls and Close. pending is a segment already taken out of
// the segment list whose files could not be removed (or whose removal could
// not be made durable): it is the first on disk, so the next call finishes
// it before deleting anything else; otherwise a later segment could go
// while an earlier one stays, a gap that repair refuses.
type retentionState struct {
	mu      sync.Mutex
	pending *segment
}

// ApplyRetention deletes, oldest first, the head segments that policy p
// says are due at time now, stopping at the first one that is not due, at
// the active segment (never deleted), and at the segment holding keepFrom
// (the lowest offset a reader still needs; contract.KeepAll for none); the
// due segments keepFrom kept are counted in the result's HeldBytes. It is safe to
// call concurrently with appends and reads; calls are serialised. A read
// of a deleted offset fails with contract.ErrOffsetExpired (wrapped in a
// *contract.OffsetExpiredError), also when it raced with the deletion.
//
// A segment whose newest entry has no readable timestamp (a corrupt entry,
// or a message written without one) is not past MaxAge: its age is unknown,
// so only MaxBytes can delete it.
//
// Errors: contract.ErrClosed; an I/O error removing a file or syncing the topic
// directory (the segment stays out of the log and its removal is retried
// first by the next call; nothing after it is deleted meanwhile).
func (l *Log) ApplyRetention(p contract.RetentionPolicy, now time.Time, keepFrom int64) (contract.RetentionResult, error) {
	l.ret.mu.Lock()
	defer l.ret.mu.Unlock()
	res := contract.RetentionResult{StartOffset: l.StartOffset()}
	if l.closed.Load() {
		return res, contract.ErrClosed
	}
	if s := l.ret.pending; s != nil {
		if err := l.removeSegmentFiles(s); err != nil {
			return res, err
		}
		l.ret.pending = nil
	}
	if !p.Enabled() {
		return res, nil
	}
	segs := *l.segs.Load()
	total := l.diskBytes(segs)
	for i := 0; i+1 < len(segs); i++ { // segs[len-1] is the active segment
		s, next := segs[i], segs[i+1].base
		if l.closed.Load() {
			break
		}
		segBytes := s.size + s.count*IndexEntrySize
		due := p.MaxBytes > 0 && total > p.MaxBytes
		if !due && p.MaxAge > 0 {
			due = l.pastMaxAge(next-1, now.Add(-p.MaxAge))
		}
		if !due {
			break
		}
		if next > keepFrom {
			// Due, but a reader has not read past it: kept, and counted,
			// as is every later segment the policy finds due.
			res.HeldBytes += segBytes
			total -= segBytes
			continue
		}
		if err := l.deleteHead(s); err != nil {
			res.StartOffset = l.StartOffset()
			return res, err
		}
		total -= segBytes
		res.Segments++
		res.Entries += s.count
		res.Bytes += segBytes
	}
	res.StartOffset = l.StartOffset()
	if res.Segments > 0 {
		l.log.Info("retention deleted segments", zap.Int("segments", res.Segments),
			zap.Int64("entries", res.Entries), zap.Int64("bytes", res.Bytes),
			zap.Int64("start-offset", res.StartOffset))
	}
	return res, nil
}

// diskBytes is the size of the .mmm and .idx files of segs, the active
// segment's as far as written (its visible index entries).
func (l *Log) diskBytes(segs []*segment) int64 {
	total := l.size.Load() // every .mmm, the active one's unsynced bytes included
	active := segs[len(segs)-1]
	for _, s := range segs[:len(segs)-1] {
		total += s.count * IndexEntrySize
	}
	if n := l.hw.Load() - active.base; n > 0 {
		total += n * IndexEntrySize
	}
	return total
}

// pastMaxAge reports whether the entry at offset (a sealed segment's
// newest) carries a timestamp before cutoff.
func (l *Log) pastMaxAge(offset int64, cutoff time.Time) bool {
	payload, err := l.Read(offset)
	if err != nil {
		l.log.Warn("retention: cannot read the newest entry of a segment; its age is unknown, keeping it",
			zap.Int64("offset", offset), zap.Error(err))
		return false
	}
	ts, ok := contract.MessageTimestamp(payload)
	return ok && ts < cutoff.UnixMilli()
}

// deleteHead deletes s, the first segment of the log (see the steps at the
// top of this file).
func (l *Log) deleteHead(s *segment) error {
	l.segsMu.Lock()
	cur := *l.segs.Load()
	if len(cur) < 2 || cur[0] != s {
		l.segsMu.Unlock()
		return fmt.Errorf("retention: segment %d is no longer the first sealed segment", s.base)
	}
	rest := append([]*segment(nil), cur[1:]...)
	l.segs.Store(&rest)
	l.segsMu.Unlock()
	l.size.Add(-s.size)
	l.cache.drop([]*segment{s})
	err := l.removeSegmentFiles(s)
	// A reader that found s in the old list may have reopened its files
	// between the first drop and the unlinks: drop them again so they do
	// not sit in the cache (its pin, if any, still reads them to the end).
	l.cache.drop([]*segment{s})
	if err != nil {
		l.ret.pending = s
		return err
	}
	return nil
}

// removeSegmentFiles removes s's .idx, then its .mmm, then fsyncs the
// topic directory. A file already gone is fine (a retried removal).
func (l *Log) removeSegmentFiles(s *segment) error {
	if err := l.fs.Remove(s.idxPath); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("retention: remove %s: %w", filepath.Base(s.idxPath), err)
	}
	if h := l.opts.Hooks; h != nil && h.BetweenSegmentUnlinks != nil {
		h.BetweenSegmentUnlinks()
	}
	if err := l.fs.Remove(s.mmmPath); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("retention: remove %s: %w", filepath.Base(s.mmmPath), err)
	}
	if err := l.fs.SyncDir(l.dir); err != nil {
		return fmt.Errorf("retention: sync topic dir %s: %w", l.dir, err)
	}
	return nil
}
