package dedup

import (
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// rebuildBatch is how many entries one read of the rebuild returns.
const rebuildBatch = 512

// load rebuilds the window from the tail of the topic's log once (again
// after Reset): the last MaxIDs entries, of which those published within
// the window with a producer id are remembered. Concurrent callers wait
// for the one loading. A read error other than a corrupt entry ends the
// rebuild early (logged); what was read is kept.
func (w *Window) load() {
	w.loadMu.Lock()
	defer w.loadMu.Unlock()
	if w.loaded.Load() {
		return
	}
	defer w.loaded.Store(true)
	start := time.Now()
	now := w.t.opts.Now().UnixNano()
	horizon := now - int64(w.t.opts.Window)
	hw := w.src.HighWatermark()
	from := max(w.src.StartOffset(), hw-int64(w.t.opts.MaxIDs))
	// Stored timestamps are taken when a publish is decoded, so concurrent
	// producers store them a little out of order: search a second early.
	if off, err := w.src.OffsetAt(time.Unix(0, horizon).Add(-time.Second)); err == nil {
		from = max(from, off)
	}
	read, kept := int64(0), int64(0)
	for off := from; off < hw; {
		es, err := w.src.ReadBatch(off, int(min(rebuildBatch, hw-off)))
		for _, e := range es {
			read++
			if w.rememberStored(e, horizon) {
				kept++
			}
		}
		if len(es) > 0 {
			off = es[len(es)-1].Offset + 1
		}
		var ce *storage.CorruptionError
		switch {
		case err == nil && len(es) == 0:
			off = hw // nothing more (retention moved the start, or a short read)
		case err == nil:
		case errors.As(err, &ce) && ce.Offset >= off:
			off = ce.Offset + 1 // a corrupt entry is no one's duplicate
		case errors.Is(err, contract.ErrOffsetExpired):
			off = max(off+1, w.src.StartOffset())
		default:
			w.t.log.Warn("dedup window: rebuild from the log stopped early; ids before it are not deduplicated",
				zap.String("topic", w.topic), zap.Int64("offset", off), zap.Error(err))
			off = hw
		}
	}
	w.t.rebuilt.Add(kept)
	if read > 0 {
		w.t.log.Info("dedup window rebuilt from the log", zap.String("topic", w.topic),
			zap.Int64("entries-read", read), zap.Int64("ids", kept), zap.Duration("took", time.Since(start)))
	}
}

// rememberStored remembers e's id if a producer supplied it and it was
// published at or after horizon (Unix ns).
func (w *Window) rememberStored(e contract.Entry, horizon int64) bool {
	id, fromProducer, ts, ok := contract.StoredMeta(e.Payload)
	if !ok || !fromProducer || ts*int64(time.Millisecond) < horizon {
		return false
	}
	at := ts * int64(time.Millisecond)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.rememberLocked(w.t.key(id), stored{off: e.Offset, at: at})
	for w.ring.len() > w.t.opts.MaxIDs {
		w.evictFrontLocked(at)
	}
	return true
}
