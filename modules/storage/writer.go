package storage

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// refusedError is a failure before anything of the batch was written at its
// position — creating the next segment, or opening the active segment's
// files after the cache closed them: the batch fails, the log does not.
type refusedError struct {
	op  string // "rotate", "open active segment"
	err error
}

func (e *refusedError) Error() string { return "storage: " + e.op + ": " + e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// request is one Append or AppendBatch call waiting for the writer.
type request struct {
	data  []byte // encoded entries back to back
	n     int    // number of entries
	level contract.AckLevel
	first int64       // first assigned offset (set by the writer)
	done  chan result // buffered(1), from donePool; nil for ACCEPTED
	// answered is set by the writer once done got its value.
	answered bool
	// budgeted is what this request took from Options.Budget (ACCEPTED
	// requests); the writer returns it after the batch.
	budgeted int64
	// notify, when set (AppendBatchNotify), is called once by the writer
	// with the request's outcome, right after done gets it.
	notify func(first int64, err error)
}

type result struct {
	first int64
	err   error
}

// requestPool recycles requests and their entry buffers. The writer owns a
// request from enqueue on and puts it back after its batch; the caller only
// keeps the done channel.
var requestPool = sync.Pool{New: func() any { return new(request) }}

// donePool recycles done channels. The writer sends exactly once per request
// (finish checks answered), so a channel whose value the caller received is
// empty and unreferenced and can serve another call; one abandoned by a
// caller whose ctx ended still gets the writer's value and is left to the GC.
var donePool = sync.Pool{New: func() any { return make(chan result, 1) }}

// Append appends one message JSON and returns its offset once level is
// reached (a caller is never told more than happened):
//
//	Accepted → returns -1 as soon as the entry is queued (offset not final);
//	           its bytes draw from Options.Budget until it is committed
//	Written  → returns the offset after the segment's write(2) and fsync
//	           and the index's write(2), before the index's fsync: more
//	           than the level promises (an index entry lost to a power
//	           loss is rebuilt from the segment)
//	Durable  → returns the offset after the segment's fsync (and the
//	           index's, in commit mode), when it is visible
//
// Errors: contract.ErrEmptyRecord / contract.ErrRecordTooLarge (nothing written), a
// *LowSpaceError wrapping ErrNoSpace when Options.SpaceGuard refuses
// (nothing queued), contract.ErrQueueFull, contract.ErrOverloaded (ACCEPTED over Options.Budget;
// nothing queued), contract.ErrClosed, an error wrapping ErrFailed and the I/O
// error (its Cause named) once a write or fsync has failed, or ctx.Err() when ctx ends
// first — then the outcome is unknown, as for a lost reply.
func (l *Log) Append(ctx context.Context, payload []byte, level contract.AckLevel) (int64, error) {
	one := [1][]byte{payload}
	return l.AppendBatch(ctx, one[:], level)
}

// AppendBatch appends several message JSONs as one unit: they get
// consecutive offsets and the call returns the first offset when level is
// reached for all of them. They share a group commit (one fsync pair) as
// long as they fit in one: a group writes at most MaxGroupBytes to a
// segment (or one larger entry alone), and a segment rotation ends a group
// too, so a larger batch becomes several group commits, each fsynced
// before the next is written, its entries visible as each one completes,
// and the call answered after the last. Validation is all or nothing: one
// bad payload and nothing is queued; durability is not (a crash between
// two of its group commits keeps the first, as any retried publish may).
func (l *Log) AppendBatch(ctx context.Context, payloads [][]byte, level contract.AckLevel) (int64, error) {
	done, err := l.enqueue(payloads, level, nil)
	if err != nil || done == nil {
		return -1, err
	}
	select {
	case res := <-done:
		donePool.Put(done)
		if res.err != nil {
			return -1, res.err
		}
		return res.first, nil
	case <-ctx.Done():
		// The writer still owns the request and will answer into done,
		// which is buffered; the outcome is unknown to this caller.
		return -1, ctx.Err()
	}
}

// AppendBatchNotify queues payloads as AppendBatch does and returns at
// once: nil when they are queued, or the error that refused them (then
// notify is never called). notify is called exactly once, from the log's
// writer goroutine, when level is reached for every payload (first = the
// first offset, err = nil) or when they failed (first = -1): ACCEPTED
// payloads are reported once they are durable. notify must not block or
// call into the log. The idempotent-publish window uses it to learn the
// outcome of a publish whose caller stopped waiting (a timeout) or never
// waits (ACCEPTED).
func (l *Log) AppendBatchNotify(payloads [][]byte, level contract.AckLevel, notify func(first int64, err error)) error {
	if notify == nil {
		return errors.New("append: nil notify")
	}
	_, err := l.enqueue(payloads, level, notify)
	return err
}

// enqueue validates payloads and queues them for the writer. It returns
// the channel the writer answers into (nil for Accepted or when notify is
// set), or the error that refused them.
func (l *Log) enqueue(payloads [][]byte, level contract.AckLevel, notify func(int64, error)) (chan result, error) {
	if len(payloads) == 0 {
		return nil, fmt.Errorf("append: %w: no payload", contract.ErrEmptyRecord)
	}
	if level < contract.Accepted || level > contract.Durable {
		return nil, fmt.Errorf("append: invalid ack level %d", level)
	}
	total := 0
	for i, p := range payloads {
		if len(p) < contract.MinPayloadBytes {
			return nil, fmt.Errorf("append payload %d: %w: %d bytes, minimum %d", i, contract.ErrEmptyRecord, len(p), contract.MinPayloadBytes)
		}
		if len(p) > l.opts.MaxRecordBytes {
			return nil, fmt.Errorf("append payload %d: %w: %d bytes, maximum %d", i, contract.ErrRecordTooLarge, len(p), l.opts.MaxRecordBytes)
		}
		total += HeaderSize + len(p)
	}
	if err := l.opts.SpaceGuard.Admit(int64(total + len(payloads)*IndexEntrySize)); err != nil {
		// A failed log says so first: it needs an operator, not a wait.
		if failed := l.Err(); failed != nil {
			return nil, failed
		}
		return nil, fmt.Errorf("append to topic %s: %w", l.topic, err)
	}
	r := requestPool.Get().(*request)
	if cap(r.data) < total {
		r.data = make([]byte, 0, total)
	}
	r.data = r.data[:0]
	for _, p := range payloads {
		r.data = AppendEntry(r.data, p)
	}
	r.n, r.level, r.first, r.answered, r.done, r.budgeted = len(payloads), level, -1, false, nil, 0
	r.notify = notify
	var done chan result
	if level != contract.Accepted && notify == nil {
		done = donePool.Get().(chan result)
		r.done = done
	}

	l.mu.Lock()
	var refused error
	switch {
	case l.reopening:
		refused = fmt.Errorf("append to topic %s: %w", l.topic, ErrReopening)
	case l.failed != nil:
		refused = l.failed
	case l.closing:
		refused = contract.ErrClosed
	case l.pendingBytes+int64(total) > l.opts.MaxPendingBytes && len(l.pending) > 0:
		refused = fmt.Errorf("append: %w (%d bytes queued)", contract.ErrQueueFull, l.pendingBytes)
	case level == contract.Accepted && !l.opts.Budget.TryAcquire(int64(total)):
		refused = l.opts.Budget.Overloaded("ACCEPTED append to topic "+l.topic, int64(total))
	case level == contract.Accepted:
		r.budgeted = int64(total)
	}
	if refused != nil {
		l.mu.Unlock()
		if done != nil {
			donePool.Put(done) // never handed to the writer
		}
		r.done, r.notify = nil, nil
		requestPool.Put(r)
		return nil, refused
	}
	l.pending = append(l.pending, r)
	l.pendingBytes += int64(total)
	l.mu.Unlock()
	l.signal()

	return done, nil
}

func (l *Log) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// writerState is owned by the writer goroutine (and by Reopen, which holds
// Log.wmu, so the writer is between batches).
type writerState struct {
	next int64 // next offset to assign (>= hw)
	// durable is the byte size of the active segment's .mmm up to the
	// high watermark: what the last fsync made durable. Reopen cuts the
	// file back to it.
	durable int64
	wbuf    []byte
	ibuf    []byte
	spare   []*request
	active  *segment
	files   *segFiles // active's files, read-write, pinned for one commit; nil between commits
	// idxSynced is the number of the active segment's index entries known
	// fsynced; Reopen cuts the index back to it. In commit mode it is the
	// entry count after every group commit.
	idxSynced int64
	// idxDirty (lazy mode): the active segment's index has entries written
	// and not fsynced, since idxDirtySince; the index timer is armed.
	idxDirty      bool
	idxDirtySince time.Time
	// idxDirtyBytes (lazy mode): the segment bytes whose index entries
	// are written and not fsynced; the index is fsynced once they reach
	// LazyIndexSyncBytes.
	idxDirtyBytes int64
}

func (w *writerState) init(l *Log) {
	segs := *l.segs.Load()
	w.active = segs[len(segs)-1]
	w.next = w.active.base + w.active.count
	w.durable = w.active.size
	w.idxSynced = w.active.count // repair left the index fsynced
	w.idxDirty = false
	l.preReset(w.active) // repair (or Reopen's cut) left no zero tail
}

// flushLoop is the single writer of the log: it takes everything queued,
// commits it as one group (one fsync of .mmm, and in commit mode one of
// .idx, per segment touched), publishes the new high watermark and answers
// the waiters. In lazy mode it also fsyncs the index when the index timer
// fires, and once more before it returns at close.
func (l *Log) flushLoop() {
	defer close(l.flusherDone)
	for {
		select {
		case <-l.wake:
			if closing := l.drain(); closing {
				l.closeErr = errors.Join(l.syncIndexOnClose(), l.trimOnClose())
				l.preStop()
				return
			}
		case <-l.idxTimer.C:
			l.wmu.Lock()
			l.syncIndexIfDue(true)
			l.wmu.Unlock()
		case <-l.preTimerC():
			l.wmu.Lock()
			l.preIdle()
			l.wmu.Unlock()
		}
	}
}

// drain commits everything queued, batch after batch, until the queue is
// empty; it reports whether the log is closing.
func (l *Log) drain() (closing bool) {
	for {
		l.wmu.Lock()
		l.mu.Lock()
		if len(l.pending) == 0 {
			closing := l.closing
			l.mu.Unlock()
			l.wmu.Unlock()
			return closing
		}
		// Double buffering: appenders fill spare while this batch commits.
		batch := l.pending
		l.pending = l.w.spare[:0]
		l.pendingBytes = 0
		failed := l.failed
		l.mu.Unlock()
		if failed == nil {
			if err := l.commit(batch); err != nil {
				var re *refusedError
				if errors.As(err, &re) {
					failed = err
					l.log.Error("batch refused before it was written; the log stays open", zap.String("step", re.op), zap.Error(re.err))
				} else {
					failed = l.fail(err)
					l.cutAfterFailure()
				}
			}
		}
		for _, r := range batch {
			if failed != nil {
				l.finish(r, failed)
			}
			l.opts.Budget.Release(r.budgeted)
			r.done, r.notify, r.budgeted = nil, nil, 0
			requestPool.Put(r)
		}
		clear(batch)
		l.w.spare = batch
		if failed == nil {
			// Under steady load the timer's turn may not come: the
			// interval is also checked between batches.
			l.syncIndexIfDue(false)
		}
		l.wmu.Unlock()
		// The appenders just answered are runnable now; yielding once
		// lets them queue their next entry into the coming batch
		// instead of the one after it, which halves the fsyncs per
		// message under steady concurrency.
		runtime.Gosched()
	}
}

// syncIndexIfDue fsyncs the active segment's lazily written index when it
// has unsynced entries and either force is set (the timer fired) or they
// have waited IndexSyncInterval. A failed index fsync fails the log, as
// any failed fsync does: the entries it covered are durable in the
// segment and come back by repair, but the disk needs an operator.
// l.wmu is held.
func (l *Log) syncIndexIfDue(force bool) {
	w := &l.w
	if !w.idxDirty || (!force && time.Since(w.idxDirtySince) < l.opts.IndexSyncInterval) {
		return
	}
	if l.Err() != nil {
		return
	}
	if err := l.syncActiveIndex(); err != nil {
		l.fail(err)
		l.cutAfterFailure()
	}
}

// syncActiveIndex fsyncs the active segment's index, pinning its files
// (an idle topic's may have been closed by the cache), and marks every
// written entry synced. l.wmu is held.
func (l *Log) syncActiveIndex() error {
	w := &l.w
	files := w.files
	if files == nil {
		f, err := l.cache.pinWritable(l.fs, w.active)
		if err != nil {
			return fmt.Errorf("open active segment to sync its index: %w", err)
		}
		defer f.unpin()
		files = f
	}
	data := l.preIndexData(w.active.count * IndexEntrySize)
	if err := l.sync(files.idx, w.active.idxPath, FileIndex, data); err != nil {
		return err
	}
	w.idxSynced, w.idxDirty = w.active.count, false
	l.idxTimer.Stop()
	return nil
}

// syncIndexOnClose is the last index fsync of a lazy log, run by the
// writer once the queue is drained at close; its error is Close's.
func (l *Log) syncIndexOnClose() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if !l.w.idxDirty || l.Err() != nil {
		return nil
	}
	if err := l.syncActiveIndex(); err != nil {
		l.fail(err)
		l.cutAfterFailure()
		return fmt.Errorf("close topic %s: %w", l.topic, err)
	}
	return nil
}

// trimOnClose cuts the active segment's preallocated tail when the log
// closes (see preTrim), so that a cleanly closed segment ends at its
// last entry; its error is Close's.
func (l *Log) trimOnClose() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.Err() != nil {
		return nil
	}
	if err := l.preTrim(l.w.active, nil); err != nil {
		l.fail(err)
		l.cutAfterFailure()
		return fmt.Errorf("close topic %s: %w", l.topic, err)
	}
	return nil
}

// cutAfterFailure cuts the active segment's files back to their last
// durable state — the index to the entries its last good fsync covered,
// the segment to the bytes its last good fsync covered — right after a
// write or fsync of the log failed. After a failed fsync the page cache
// may hold bytes the disk never got (fsyncgate): without the cut, the
// repair at the next start (after a plain restart, with no power loss)
// would find those bytes valid and index them again, serving entries
// whose publish was answered with an error and that a later power loss
// may take away. It is best effort (the disk is failing): an error is
// logged, and Reopen cuts again. l.wmu is held.
func (l *Log) cutAfterFailure() {
	w := &l.w
	// A chunk being written would write zeros after the cut.
	l.preWait()
	defer l.preDropHeld() // the cut takes the zero tail too
	err := cutFile(l.fs, w.active.idxPath, w.idxSynced*IndexEntrySize)
	if err == nil {
		err = cutFile(l.fs, w.active.mmmPath, w.durable)
	}
	if err != nil {
		l.log.Error("could not cut the failed segment back to its durable state; until Reopen, the next start may index again entries whose write failed",
			zap.String("segment", w.active.mmmPath), zap.Error(err))
	}
}

// fail marks the log failed (fsyncgate: never retry and acknowledge).
func (l *Log) fail(cause error) error {
	err := newFailed(l.topic, cause)
	l.mu.Lock()
	if l.failed == nil {
		l.failed = err
	} else {
		err = l.failed
	}
	l.mu.Unlock()
	l.log.Error("log failed: no more writes are accepted until the topic is reopened",
		zap.String("cause", Cause(cause)), zap.Error(cause))
	return err
}

// finish answers r unless it was already answered. ACCEPTED requests have
// nobody waiting.
func (l *Log) finish(r *request, err error) {
	if r.answered {
		return
	}
	r.answered = true
	if r.notify != nil {
		if err != nil {
			r.notify(-1, err)
		} else {
			r.notify(r.first, nil)
		}
	}
	if r.done == nil {
		return
	}
	if err != nil {
		r.done <- result{first: -1, err: err}
		return
	}
	r.done <- result{first: r.first}
}

// commit writes batch, in order, to the active segment (rotating as needed),
// and answers every waiter whose level was reached. On error the caller fails
// the waiters not yet answered.
func (l *Log) commit(batch []*request) error {
	w := &l.w
	seg := w.active
	// Pinned for the whole commit, so the cache never closes a file with
	// an unsynced write; an idle topic's files may be closed between
	// commits and are reopened here.
	files, err := l.cache.pinWritable(l.fs, seg)
	if err != nil {
		return &refusedError{"open active segment", err}
	}
	w.files = files
	defer func() {
		if w.files != nil {
			w.files.unpin()
			w.files = nil
		}
	}()
	groupPos, groupCount := seg.size, seg.count
	w.wbuf, w.ibuf = w.wbuf[:0], w.ibuf[:0]
	answered := 0 // cursor: batch[:answered] are fully visible and answered
	for _, r := range batch {
		r.first = w.next
		for off := 0; off < len(r.data); {
			size := HeaderSize + int(binary.BigEndian.Uint32(r.data[off:])) - 4
			// Rotation is checked before each append.
			if seg.size >= l.opts.SegmentMaxBytes && seg.count > 0 {
				if err := l.flushGroup(seg, groupPos, groupCount, batch, &answered); err != nil {
					return err
				}
				// seg is sealed: flushGroup wrote and fsynced all of it
				// (an fsync failure fails the log before any rotation);
				// in lazy mode its index is fsynced now, so that a
				// sealed segment's index is always complete. Its pair
				// stays in the cache, free to be evicted. The
				// pin goes before the new pair is opened: nobody holds
				// two pins while waiting for room in the cache.
				if w.idxDirty {
					if h := l.opts.Hooks; h != nil && h.BeforeSealIndexSync != nil {
						h.BeforeSealIndexSync()
					}
					if err := l.syncActiveIndex(); err != nil {
						return err
					}
				}
				// Preallocated zeros go before the next segment
				// exists: a sealed segment ends at its last entry.
				if err := l.preTrim(seg, w.files); err != nil {
					return err
				}
				w.files.unpin()
				w.files = nil
				base := seg.base + seg.count
				ns, err := l.cache.create(true, func() (*segment, *segFiles, error) {
					return createSegment(l.fs, l.dir, base, l.opts.Hooks.rotate())
				})
				if err != nil {
					// Nothing ambiguous was written: everything before
					// this entry is durable and published, and the files
					// of the new segment are not in use. The batch fails;
					// the log does not (the next batch tries again).
					return &refusedError{"rotate", err}
				}
				l.segsMu.Lock()
				segs := append(append([]*segment(nil), *l.segs.Load()...), ns)
				l.segs.Store(&segs)
				l.segsMu.Unlock()
				l.log.Info("segment rotated", zap.Int64("segment", ns.base), zap.Int64("previous-bytes", seg.size))
				seg, w.active, w.files = ns, ns, ns.files.Load()
				w.durable, w.idxSynced = 0, 0
				l.preReset(ns)
				groupPos, groupCount = 0, 0
				w.wbuf, w.ibuf = w.wbuf[:0], w.ibuf[:0]
			}
			// A group commit writes at most MaxGroupBytes to the segment
			// before its fsync (one larger entry goes alone): the bound
			// recovery judges crash damage by (repair_tail.go).
			if len(w.wbuf) > 0 && len(w.wbuf)+size > MaxGroupBytes {
				if err := l.flushGroup(seg, groupPos, groupCount, batch, &answered); err != nil {
					return err
				}
				groupPos, groupCount = seg.size, seg.count
			}
			w.ibuf = binary.BigEndian.AppendUint64(w.ibuf, uint64(seg.size))
			w.wbuf = append(w.wbuf, r.data[off:off+size]...)
			seg.size += int64(size)
			seg.count++
			w.next++
			off += size
		}
	}
	return l.flushGroup(seg, groupPos, groupCount, batch, &answered)
}

// flushGroup makes the buffered entries of seg durable in the order the
// package doc gives: .mmm write → fsync → .idx write → fsync (commit mode
// only) → publish the high watermark → answer waiters whose entries are all
// visible.
func (l *Log) flushGroup(seg *segment, pos, count int64, batch []*request, answered *int) error {
	w := &l.w
	if len(w.wbuf) == 0 {
		return nil
	}
	h := l.opts.Hooks
	f := w.files
	// With preallocation, a group that lies in zeros a completed fsync
	// made part of the files is made durable with fdatasync.
	mmmData, idxData := l.preBeforeWrite(pos+int64(len(w.wbuf)), count*IndexEntrySize+int64(len(w.ibuf)))
	if _, err := f.mmm.WriteAt(w.wbuf, pos); err != nil {
		return fmt.Errorf("write segment %s: %w", seg.mmmPath, err)
	}
	l.size.Add(int64(len(w.wbuf)))
	if h != nil {
		if h.AfterSegmentWrite != nil {
			h.AfterSegmentWrite()
		}
		if h.AckBeforeSync { // negative control: deliberately wrong
			for _, r := range batch[*answered:] {
				if r.first < 0 || r.first+int64(r.n) > w.next {
					break
				}
				if r.level == contract.Durable {
					l.finish(r, nil)
				}
			}
		}
	}
	// negative control: deliberately wrong
	indexFirst := h != nil && h.IndexBeforeSegmentSync && l.opts.IndexSync != IndexSyncLazy
	if indexFirst {
		if _, err := f.idx.WriteAt(w.ibuf, count*IndexEntrySize); err != nil {
			return fmt.Errorf("write index %s: %w", seg.idxPath, err)
		}
		if err := l.sync(f.idx, seg.idxPath, FileIndex, idxData); err != nil {
			return err
		}
	}
	if err := l.sync(f.mmm, seg.mmmPath, FileSegment, mmmData); err != nil {
		return err
	}
	if h != nil && h.AfterSegmentSync != nil {
		h.AfterSegmentSync()
	}
	if !indexFirst {
		if _, err := f.idx.WriteAt(w.ibuf, count*IndexEntrySize); err != nil {
			return fmt.Errorf("write index %s: %w", seg.idxPath, err)
		}
	}
	if h != nil && h.AfterIndexWrite != nil {
		h.AfterIndexWrite()
	}
	// WRITTEN: both write(2)s returned for every entry up to w.next.
	for _, r := range batch[*answered:] {
		if r.first < 0 || r.first+int64(r.n) > w.next {
			break
		}
		if r.level == contract.Written {
			l.finish(r, nil)
		}
	}
	if indexFirst {
		w.idxSynced = seg.count
	} else if err := l.indexStep(seg, f, idxData); err != nil {
		return err
	}
	w.durable = seg.size
	l.publish(w.next)
	// Counted before anyone is answered, so that a caller that reads Stats
	// after its append returned sees its group commit.
	l.batches.Add(1)
	if l.opts.Observer != nil {
		l.opts.Observer.ObserveBatch(l.topic, len(w.ibuf)/IndexEntrySize)
	}
	// DURABLE (and anything not yet answered): every entry is visible.
	for *answered < len(batch) {
		r := batch[*answered]
		if r.first < 0 || r.first+int64(r.n) > w.next {
			break
		}
		l.finish(r, nil)
		*answered++
	}
	w.wbuf, w.ibuf = w.wbuf[:0], w.ibuf[:0]
	if h != nil && h.AfterAnswer != nil {
		h.AfterAnswer()
	}
	l.preAfterCommit(seg, f)
	return nil
}

// indexStep is what a group commit does after its index write: commit
// mode fsyncs the index now; lazy mode marks it unsynced and arms the
// index timer (see IndexSyncLazy).
func (l *Log) indexStep(seg *segment, f *segFiles, data bool) error {
	w := &l.w
	if l.opts.IndexSync == IndexSyncLazy {
		if !w.idxDirty {
			w.idxDirty, w.idxDirtySince = true, time.Now()
			w.idxDirtyBytes = 0
			l.idxTimer.Reset(l.opts.IndexSyncInterval)
		}
		// Bounded by bytes too, not only by the timer: what recovery
		// walks after a crash stays about LazyIndexSyncBytes.
		if w.idxDirtyBytes += int64(len(w.wbuf)); w.idxDirtyBytes >= LazyIndexSyncBytes {
			return l.syncActiveIndex()
		}
		return nil
	}
	if err := l.sync(f.idx, seg.idxPath, FileIndex, data); err != nil {
		return err
	}
	if h := l.opts.Hooks; h != nil && h.AfterIndexSync != nil {
		h.AfterIndexSync()
	}
	w.idxSynced = seg.count
	return nil
}

// sync makes f durable: with data set, fdatasync(2) (Datasync), used only
// when nothing written since the last fsync changed f's size (a write
// into preallocated zeros); otherwise fsync(2).
func (l *Log) sync(f vfs.File, path string, kind FileKind, data bool) error {
	start := time.Now()
	var err error
	if data {
		if h := l.opts.Hooks; h == nil || !h.SkipDatasync {
			err = f.Datasync()
		}
		l.datasyncs.Add(1)
	} else {
		err = f.Sync()
	}
	d := time.Since(start)
	l.fsyncs.Add(1)
	if kind == FileIndex {
		l.indexFsyncs.Add(1)
	}
	if l.opts.Observer != nil {
		l.opts.Observer.ObserveFsync(l.topic, kind, d)
	}
	if d >= l.opts.SlowFsync {
		l.log.Warn("slow fsync", zap.String("file", path), zap.Duration("took", d))
	}
	if err != nil {
		return fmt.Errorf("fsync %s: %w", path, err)
	}
	return nil
}

func (h *Hooks) rotate() func() {
	if h == nil {
		return nil
	}
	return h.AfterRotateSegment
}
