package dedup

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// rebuildBatch is how many entries one read of the rebuild returns.
const rebuildBatch = 512

// rebuildSlack is how far before the window the rebuild keeps reading:
// stored timestamps are taken when a publish is decoded, so concurrent
// producers store them a little out of order.
const rebuildSlack = time.Second

// found is one producer id the rebuild took from the log.
type found struct {
	k  key
	it stored
}

// load rebuilds the window from the tail of the topic's log once (again
// after Reset). It reads backwards from the high watermark, in batches,
// until it has MaxIDs producer ids, or meets an entry published more than
// a second before the window, or the log start; entries without a
// producer id are read and skipped, so a topic that mixes them with
// deduplicated publishes keeps every id of the window (up to MaxIDs). A
// corrupt entry is skipped and counted (it cannot be a duplicate of
// anything readable); another read error ends the rebuild early, keeping
// what was read. Concurrent callers wait for the one loading.
func (w *Window) load() {
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	if w.loaded.Load() {
		return
	}
	start := time.Now()
	horizon := w.t.opts.Now().UnixNano() - int64(w.t.opts.Window)
	ids, read, corrupt := w.scanBack(horizon)
	if corrupt < 0 {
		return // a read error: not loaded, so the next Begin tries again
	}
	defer w.loaded.Store(true)
	w.mu.Lock()
	if !w.closed {
		for i := len(ids) - 1; i >= 0; i-- { // oldest first, as the ring wants
			w.rememberLocked(ids[i].k, ids[i].it)
		}
	}
	w.mu.Unlock()
	w.t.rebuilt.Add(int64(len(ids)))
	if read > 0 {
		w.t.log.Info("dedup window rebuilt from the log", zap.String("topic", w.topic),
			zap.Int64("entries-read", read), zap.Int("ids", len(ids)), zap.Duration("took", time.Since(start)))
	}
	if corrupt > 0 {
		w.t.log.Warn("dedup window: corrupt entries skipped while rebuilding; a retry of their ids is stored again",
			zap.String("topic", w.topic), zap.Int64("corrupt-entries", corrupt))
	}
}

// scanBack reads the log backwards from its high watermark and returns the
// producer ids published at or after horizon (Unix ns), newest first, at
// most MaxIDs of them. corrupt is -1 when a read failed (other than a
// corrupt entry or retention): the result is then incomplete and empty.
func (w *Window) scanBack(horizon int64) (ids []found, read, corrupt int64) {
	stop := horizon - int64(rebuildSlack)
	for end := w.src.HighWatermark(); end > w.src.StartOffset(); {
		from := max(w.src.StartOffset(), end-rebuildBatch)
		es, bad, err := w.readRange(from, end)
		corrupt += bad
		switch {
		case err == nil:
		case errors.Is(err, contract.ErrOffsetExpired):
			return ids, read, corrupt // retention moved the start: nothing older to read
		default:
			w.t.log.Warn("dedup window: rebuild from the log failed; it is tried again on the next publish with an id",
				zap.String("topic", w.topic), zap.Int64("offset", from), zap.Error(err))
			return nil, read, -1
		}
		for i := len(es) - 1; i >= 0; i-- {
			read++
			if contract.StoredScheduleID(es[i].Payload) != "" {
				// Moved in by the scheduler: its id was the schedule's
				// (deduplicated there), not a publish to this topic, and its
				// timestamp is the publish time, possibly older than the
				// window, so it neither counts nor ends the scan.
				continue
			}
			id, fromProducer, ts, ok := contract.StoredMeta(es[i].Payload)
			at := ts * int64(time.Millisecond)
			if ok && at < stop {
				return ids, read, corrupt // older than the window: done
			}
			if ok && fromProducer && at >= horizon {
				ids = append(ids, found{w.t.key(id), stored{off: es[i].Offset, at: at}})
				if len(ids) >= w.t.opts.MaxIDs {
					return ids, read, corrupt
				}
			}
		}
		end = from
	}
	return ids, read, corrupt
}

// readRange returns the readable entries of [from, end) and how many
// corrupt entries it skipped; err is a read error other than corruption.
func (w *Window) readRange(from, end int64) (out []contract.Entry, corrupt int64, err error) {
	for off := from; off < end; {
		es, err := w.src.ReadBatch(off, int(end-off))
		out = append(out, es...)
		if len(es) > 0 {
			off = es[len(es)-1].Offset + 1
		}
		var ce *contract.CorruptionError
		switch {
		case err == nil && len(es) == 0:
			return out, corrupt, nil
		case err == nil:
		case errors.As(err, &ce) && ce.Offset >= off:
			corrupt++
			off = ce.Offset + 1
		default:
			return out, corrupt, err
		}
	}
	return out, corrupt, nil
}
