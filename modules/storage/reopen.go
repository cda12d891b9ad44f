package storage

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Errors of Reopen.
var (
	// ErrNotFailed is returned by Reopen of a log that has not failed:
	// there is nothing to recover (HTTP 409 TOPIC_NOT_FAILED).
	ErrNotFailed = contract.NewError(contract.CodeTopicNotFailed, "storage: topic has not failed; there is nothing to reopen")
	// ErrReopening is returned by Append, and by a second Reopen, while
	// Reopen runs (HTTP 409 TOPIC_BUSY, with Retry-After): nothing was
	// queued; retry shortly.
	ErrReopening = contract.NewError(contract.CodeTopicBusy, "storage: topic is being reopened")
)

// Reopen brings a failed log (Err() != nil) back into service without a
// restart and returns its high watermark, the one it had when it failed:
//
//  1. Appends are refused with ErrReopening while it runs; the writer is
//     between batches (it holds no file).
//  2. The active segment's files are closed, and its .idx and .mmm are cut
//     back to the last durable state known in memory — the index entries
//     the last successful index fsync covered (the high watermark in
//     commit mode; possibly fewer in lazy mode, whose later entries repair
//     indexes again from the segment) and the byte size the last successful
//     segment fsync covered — and fsynced.
//     Whatever the failed batch left beyond it is thrown away, even when
//     it looks complete: after a failed fsync the page cache may hold bytes
//     the disk never got (fsyncgate), so they are never trusted, never
//     fsynced again and never acknowledged.
//  3. Repair, the startup recovery of this one topic, checks the
//     directory; it must find exactly the high watermark.
//  4. The log accepts appends again, from the high watermark on.
//
// Readers, Notify waiters and checkpoints are untouched: everything below
// the high watermark stays readable throughout, and the high watermark
// never moves back, so dispatch workers and consumer groups go on as if
// nothing happened. Appends the failure refused (or WRITTEN and ACCEPTED
// ones of the failed batch, which promised no durability) are not there.
//
// Errors: ErrNotFailed for a healthy log, ErrReopening while another
// Reopen runs, contract.ErrClosed, or the error that stopped recovery (cutting a
// file, repair refusing the topic, a different high watermark) wrapped
// together with the original failure: the log then stays failed, and
// Reopen may be called again once the cause is fixed.
func (l *Log) Reopen() (int64, error) {
	l.mu.Lock()
	switch {
	case l.closing:
		l.mu.Unlock()
		return -1, contract.ErrClosed
	case l.reopening:
		l.mu.Unlock()
		return -1, fmt.Errorf("reopen topic %s: %w", l.topic, ErrReopening)
	case l.failed == nil:
		l.mu.Unlock()
		return -1, fmt.Errorf("reopen topic %s: %w", l.topic, ErrNotFailed)
	}
	l.reopening = true
	failure := l.failed
	l.mu.Unlock()

	l.wmu.Lock()
	defer l.wmu.Unlock()
	hw := l.hw.Load()
	err := l.recoverAt(hw)
	l.mu.Lock()
	l.reopening = false
	if err == nil {
		l.failed = nil
	}
	l.mu.Unlock()
	if err != nil {
		l.log.Error("reopen failed; the topic stays failed", zap.Int64("high-watermark", hw), zap.Error(err))
		return -1, fmt.Errorf("reopen topic %s: %w; it stays failed: %w", l.topic, err, failure)
	}
	l.log.Info("topic reopened after its failure", zap.Int64("high-watermark", hw),
		zap.String("cause", Cause(failure)), zap.NamedError("failure", failure))
	return hw, nil
}

// recoverAt is steps 2 and 3 of Reopen: it cuts the active segment back
// to hw, runs repair and installs the segments it keeps. l.wmu is held.
func (l *Log) recoverAt(hw int64) error {
	w := &l.w
	active := w.active
	count := hw - active.base
	if count < 0 || count > active.count || w.durable > active.size || w.idxSynced > count {
		return fmt.Errorf("inconsistent state: high watermark %d, active segment %d with %d entries (%d index entries synced, %d bytes durable of %d)",
			hw, active.base, active.count, w.idxSynced, w.durable, active.size)
	}
	// The failed writer's read-write pair is not used again; a reader
	// still pinning it keeps it until its read ends.
	l.cache.drop([]*segment{active})
	// No chunk may write zeros after the cut, which takes the zero tail.
	l.preWait()
	l.preDropHeld()
	// The index first: at no moment does an index entry point past the
	// data (the order repair relies on).
	if err := cutFile(l.fs, active.idxPath, w.idxSynced*IndexEntrySize); err != nil {
		return fmt.Errorf("cut index back to %d entries: %w", w.idxSynced, err)
	}
	if err := cutFile(l.fs, active.mmmPath, w.durable); err != nil {
		return fmt.Errorf("cut segment back to %d bytes: %w", w.durable, err)
	}
	segs, rep, err := repairDir(l.fs, l.dir, l.topic, l.opts, true)
	if err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	if len(segs) == 0 || rep.Entries != hw {
		return fmt.Errorf("recovery found %d entries, %d were visible before the failure; files left as they are, run mmmq verify", rep.Entries, hw)
	}
	// Sealed segments keep their objects (and cached files): repair found
	// them as they were. The rest are repair's.
	old := *l.segs.Load()
	for i, s := range segs {
		if i < len(old) && old[i] != active && old[i].base == s.base && old[i].count == s.count && old[i].size == s.size {
			segs[i] = old[i]
		}
	}
	var total int64
	for _, s := range segs {
		total += s.size
	}
	l.segs.Store(&segs)
	l.size.Store(total)
	w.init(l)
	if !rep.Clean() {
		l.log.Warn("reopen: recovery changed the topic", zap.Strings("actions", rep.Actions))
	}
	return nil
}

// cutFile truncates the file at path to size bytes and fsyncs it. A file
// shorter than size is an error: it would mean durable bytes are gone.
func cutFile(fsys vfs.FS, path string, size int64) error {
	f, err := fsys.OpenRW(path)
	if err != nil {
		return err
	}
	cur, err := f.Size()
	switch {
	case err != nil:
	case cur < size:
		err = fmt.Errorf("%s is %d bytes, shorter than its durable %d", path, cur, size)
	default:
		err = truncSync(f, size)
	}
	return errors.Join(err, f.Close())
}
