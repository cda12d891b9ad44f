package dispatcher

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/internal/offbits"
)

// The window of a worker with ordering "key" (OrderKey).
//
// Messages are read ahead of the checkpoint as under the other orderings,
// but each key has at most one message out of the log at a time: its head,
// which is ready, in flight or parked. The key's later messages wait as
// offsets only (keyQueue.waiting); their payloads are kept while the held
// bytes stay under holdCap and read again from the log otherwise. A finished
// message sets its bit in fin, and the checkpoint is the first offset whose
// bit is not set: it never passes an unfinished message. Finished offsets
// past it are recorded durably (contract.FinishedRecorder) so that a
// restart delivers only what was not finished.
//
// Memory per message past the checkpoint: one bit in fin, and 8 bytes for
// an offset waiting behind its key's head; plus one msg per head and the
// held payloads (holdCap). max-unacked bounds the messages past the
// checkpoint.

// holdCap is the most payload bytes a key window keeps for messages
// waiting behind their key's head; past it they are read again when their
// turn comes.
const holdCap = 8 << 20

// parkedShown is the most parked keys a status lists (the oldest first).
const parkedShown = 50

// keySnapEvery is how often at most the loop publishes its key window's
// state for the status.
const keySnapEvery = 100 * time.Millisecond

// keyWindow is the OrderKey state of a worker (nil under the other
// orderings). Only the worker's goroutine touches it; publishKeys copies
// its state for the status (worker.keySnap).
type keyWindow struct {
	fin       offbits.Set
	keys      map[string]*keyQueue
	parked    parkHeap
	held      map[int64][]byte // payloads of waiting messages, by offset
	heldBytes int64
	unrec     []int64 // finished past the checkpoint, not yet recorded
	skip      []contract.OffsetRange
	inFlight  int // keyed messages in flight
	maxUnack  int64
	rec       contract.FinishedRecorder // nil: finished state is kept in memory only
	snapAt    time.Time
	dirty     bool
}

// keySnapshot is the key window's state as the status shows it.
type keySnapshot struct {
	keysInFlight int
	parkedKeys   int
	parked       []ParkedKey
	unacked      int64
	heldBy       string
}

// ParkedKey is a parked ordering key in a worker's status: its message
// waits out a backoff after a NACK or an abnormal answer, and the key's
// later messages wait behind it (ordering "key").
type ParkedKey struct {
	// Key is the ordering key; "" for a message without one.
	Key string
	// Offset is the message that is parked.
	Offset int64
	// Since is when it was first NACKed or answered abnormally.
	Since time.Time
	// Attempts counts its sends so far.
	Attempts int
	// LastError is its last NACK or abnormal answer.
	LastError string
	// NextRetry is when it is sent again.
	NextRetry time.Time
}

// keyQueue is one key's messages past the checkpoint that are not
// finished: the head and the offsets behind it.
type keyQueue struct {
	key     string
	head    *msg
	waiting []int64 // ascending
}

func newKeyWindow(w *worker, off int64, skip []contract.OffsetRange) *keyWindow {
	kw := &keyWindow{keys: map[string]*keyQueue{}, held: map[int64][]byte{}, maxUnack: int64(w.d.MaxUnacked()), skip: skip}
	kw.fin.Reset(off)
	if r, ok := w.cp.(contract.FinishedRecorder); ok {
		kw.rec = r
	}
	return kw
}

// finishedSkip returns the offsets cp recorded as finished (nil when it
// records none).
func finishedSkip(cp contract.Checkpoint) []contract.OffsetRange {
	if r, ok := cp.(contract.FinishedRecorder); ok {
		return r.Finished()
	}
	return nil
}

// skipAt returns the end of the recorded-finished range holding off, or
// off when none does; ranges before off are forgotten.
func skipAt(skip *[]contract.OffsetRange, off int64) int64 {
	s := *skip
	for len(s) > 0 && s[0].Hi <= off {
		s = s[1:]
	}
	*skip = s
	if len(s) > 0 && s[0].Lo <= off {
		return s[0].Hi
	}
	return off
}

// nextSkip is the start of the next recorded-finished range at or past
// off, or -1.
func nextSkip(skip []contract.OffsetRange, off int64) int64 {
	for _, r := range skip {
		if r.Hi > off {
			return max(r.Lo, off)
		}
	}
	return -1
}

// keyHasRoom reports whether fillKeys may read more: fewer than max-unacked
// messages past the checkpoint and fewer than winCap ready.
func (w *worker) keyHasRoom() bool {
	return w.readNext-w.next.Load() < w.kw.maxUnack && len(w.ready) < w.winCap
}

// fillKeys is fill under OrderKey.
func (w *worker) fillKeys() error {
	kw := w.kw
	hw := w.topic.HighWatermark()
	for w.keyHasRoom() && w.readNext < hw {
		if end := skipAt(&kw.skip, w.readNext); end > w.readNext {
			end = min(end, hw)
			kw.fin.SetRange(w.readNext, end)
			w.readNext = end
			continue
		}
		n := min(int64(w.m.opts.BatchSize), int64(w.winCap-len(w.ready)), kw.maxUnack-(w.readNext-w.next.Load()))
		if s := nextSkip(kw.skip, w.readNext); s > w.readNext {
			n = min(n, s-w.readNext)
		}
		batch, rerr := w.topic.ReadBatch(w.readNext, int(n))
		now := time.Now()
		for _, e := range batch {
			if e.Offset != w.readNext {
				return fmt.Errorf("read batch: got offset %d, want %d (topic source broke its contract)", e.Offset, w.readNext)
			}
			id, key := contract.MessageIDKey(e.Payload)
			w.readNext++
			w.admit(&msg{e: e, end: e.Offset + 1, id: id, key: key, readAt: now})
		}
		if err := w.readProblem(batch, rerr); err != nil {
			return err
		}
		if !w.readRetry.IsZero() {
			return nil
		}
	}
	return nil
}

// admit places a message just read: ready when its key has no message out
// (or it has no key), else behind its key's head.
func (w *worker) admit(m *msg) {
	kw := w.kw
	kw.dirty = true
	if m.key == "" {
		w.ready = append(w.ready, m)
		return
	}
	q := kw.keys[m.key]
	if q == nil {
		q = &keyQueue{key: m.key}
		kw.keys[m.key] = q
	}
	m.kq = q
	if q.head == nil {
		q.head = m
		w.ready = append(w.ready, m)
		return
	}
	q.waiting = append(q.waiting, m.e.Offset)
	if kw.heldBytes+int64(len(m.e.Payload)) <= holdCap {
		// A copy: the entry shares its read buffer with the whole batch.
		kw.held[m.e.Offset] = bytes.Clone(m.e.Payload)
		kw.heldBytes += int64(len(m.e.Payload))
	}
}

// finish marks m finished (ACKed, dead-lettered, skipped): under OrderKey
// its bit is set and its key's next message becomes the head.
func (w *worker) finish(m *msg) {
	m.done = true
	kw := w.kw
	if kw == nil {
		return
	}
	kw.dirty = true
	kw.fin.Set(m.e.Offset)
	kw.unrec = append(kw.unrec, m.e.Offset)
	m.e.Payload = nil
	if m.heapIdx >= 0 && m.parked {
		heap.Remove(&kw.parked, m.heapIdx)
	}
	m.parked = false
	q := m.kq
	if q == nil || q.head != m {
		return
	}
	q.head = nil
	if len(q.waiting) == 0 {
		delete(kw.keys, q.key)
		return
	}
	off := q.waiting[0]
	q.waiting = q.waiting[1:]
	if cap(q.waiting) > 64 && len(q.waiting) < cap(q.waiting)/4 {
		q.waiting = slices.Clone(q.waiting)
	}
	h := &msg{e: contract.Entry{Offset: off}, end: off + 1, key: q.key, kq: q, readAt: time.Now(), unloaded: true}
	if p, ok := kw.held[off]; ok {
		delete(kw.held, off)
		kw.heldBytes -= int64(len(p))
		h.e.Payload, h.unloaded = p, false
		h.id, _ = contract.MessageIDKey(p)
	}
	q.head = h
	w.requeue(h)
}

// finishGap marks the offsets [off, end) finished without a message: a
// corrupt entry skipped, or messages retention deleted.
func (w *worker) finishGap(off, end int64) {
	if w.kw == nil {
		w.win = append(w.win, &msg{e: contract.Entry{Offset: off}, end: end, done: true})
		return
	}
	kw := w.kw
	kw.dirty = true
	if kw.fin.FirstUnset(w.next.Load()) >= off {
		// Nothing unfinished before the gap (a worker whose checkpoint
		// retention passed): the bits start again at its end, however
		// long it is.
		kw.fin.Reset(end)
		kw.fin.SetRange(kw.fin.Base(), end)
		return
	}
	// Behind an unfinished message: one bit per offset of the gap.
	kw.fin.SetRange(off, end)
}

// loadReady reads again from the log the payloads of the first ready
// messages (as many as the next push may take) that waited behind their
// key without one. A corrupt entry is skipped alone and messages retention
// deleted are passed over, as fill does; another error stops the pushes
// until readRetry.
func (w *worker) loadReady() error {
	n := max(w.batch.MaxMessages, 1)
	for i := 0; i < len(w.ready) && i < n; i++ {
		m := w.ready[i]
		if !m.unloaded {
			continue
		}
		es, err := w.topic.ReadBatch(m.e.Offset, 1)
		if err == nil && len(es) == 1 && es[0].Offset == m.e.Offset {
			m.e.Payload, m.unloaded = es[0].Payload, false
			m.id, _ = contract.MessageIDKey(m.e.Payload)
			continue
		}
		var ce *contract.CorruptionError
		var oe *contract.OffsetExpiredError
		switch {
		case errors.As(err, &ce) && ce.Offset == m.e.Offset:
			w.skipped.Add(1)
			w.log.Error("corrupt entry skipped; it is not delivered",
				zap.Int64("offset", ce.Offset), zap.String("file", ce.File), zap.Int64("pos", ce.Pos),
				zap.String("reason", ce.Reason), zap.Error(err))
		case errors.As(err, &oe) && oe.StartOffset > m.e.Offset:
			w.expired.Add(1)
			w.m.expired.Add(1)
			w.log.Warn("message deleted by retention while its key waited; it is not delivered",
				zap.Int64("offset", m.e.Offset), zap.Int64("start-offset", oe.StartOffset))
		case errors.Is(err, contract.ErrClosed):
			return errTopicClosed
		default:
			if err == nil {
				err = fmt.Errorf("read of one message at %d returned %d", m.e.Offset, len(es))
			}
			delay := w.readBackoff.NextBackOff()
			w.readRetry = time.Now().Add(delay)
			w.log.Error("read failed; retrying", zap.Int64("offset", m.e.Offset), zap.Duration("retry-in", delay), zap.Error(err))
			return nil
		}
		w.ready = slices.Delete(w.ready, i, i+1)
		i--
		w.finish(m)
	}
	return nil
}

// park makes m, answered with a NACK or abnormally, wait delay before it
// is sent again: under OrderKey its key's later messages wait behind it;
// under OrderNone (a NACK that asked for a wait) it alone waits.
func (w *worker) park(m *msg, delay time.Duration) {
	now := time.Now()
	if m.parkedAt.IsZero() {
		m.parkedAt = now
	}
	m.retryAt = now.Add(delay)
	m.parked = true
	if w.kw == nil {
		heap.Push(&w.deferred, m)
		return
	}
	heap.Push(&w.kw.parked, m)
	w.kw.dirty = true
}

// keyBackoff is the wait before m's next send under OrderKey: the
// dispatcher's backoff (BackoffInitial doubling to BackoffMax, with full
// jitter when set), counted over m's NACKs and abnormal answers. It starts
// again at BackoffInitial for the key's next message.
func (w *worker) keyBackoff(m *msg) time.Duration {
	n := m.nacks + m.abnormals
	d := w.m.opts.BackoffInitial
	for i := 1; i < n && d < w.m.opts.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, w.m.opts.BackoffMax)
	if w.d.BackoffJitter() && d > 0 {
		d = rand.N(d) + 1
	}
	return d
}

// unpark makes the parked messages whose wait is over ready again; it
// returns when the next one is due (zero: none parked).
func (w *worker) unpark(now time.Time) time.Time {
	h := &w.deferred
	if w.kw != nil {
		h = &w.kw.parked
	}
	for len(*h) > 0 {
		m := (*h)[0]
		if m.retryAt.After(now) {
			return m.retryAt
		}
		heap.Pop(h)
		m.parked = false
		if w.kw != nil {
			w.kw.dirty = true
		}
		w.requeue(m)
	}
	return time.Time{}
}

// popDoneKeys is popDone under OrderKey: the checkpoint moves to the first
// offset not finished.
func (w *worker) popDoneKeys() bool {
	base := w.next.Load()
	nb := min(w.kw.fin.FirstUnset(base), w.readNext)
	if nb <= base {
		return false
	}
	w.next.Store(nb)
	w.pending += int(nb - base)
	w.kw.fin.Drop(nb)
	w.kw.dirty = true
	return true
}

// recordFinished durably records the messages finished past the
// checkpoint since the last call (contract.FinishedRecorder), retrying
// the store's errors with backoff as commit does. Without a recorder they
// are kept in memory only.
func (w *worker) recordFinished() error {
	kw := w.kw
	if kw == nil || len(kw.unrec) == 0 {
		return nil
	}
	base := w.next.Load()
	offs := kw.unrec[:0]
	for _, o := range kw.unrec {
		if o >= base {
			offs = append(offs, o)
		}
	}
	kw.unrec = offs
	if len(offs) == 0 || kw.rec == nil {
		kw.unrec = kw.unrec[:0]
		return nil
	}
	rs := toRanges(offs)
	b := w.m.newBackoff()
	for {
		err := kw.rec.RecordFinished(rs)
		if err == nil {
			kw.unrec = kw.unrec[:0]
			return nil
		}
		if errors.Is(err, contract.ErrClosed) {
			return errTopicClosed
		}
		if w.ctx == nil || w.ctx.Err() != nil {
			return fmt.Errorf("record finished offsets: %w", err)
		}
		delay := b.NextBackOff()
		w.log.Error("record finished offsets failed; delivery waits and retries (nothing is skipped)",
			zap.String("checkpoint", w.cp.Path()), zap.Duration("retry-in", delay), zap.Error(err))
		if !sleep(w.ctx, delay) {
			return errStopped
		}
	}
}

// toRanges sorts offs and returns them as ascending, disjoint,
// non-adjacent ranges.
func toRanges(offs []int64) []contract.OffsetRange {
	slices.Sort(offs)
	var rs []contract.OffsetRange
	for _, o := range offs {
		if n := len(rs); n > 0 && o <= rs[n-1].Hi {
			rs[n-1].Hi = max(rs[n-1].Hi, o+1)
			continue
		}
		rs = append(rs, contract.OffsetRange{Lo: o, Hi: o + 1})
	}
	return rs
}

// publishKeys stores the key window's state for the status, at most every
// keySnapEvery; it returns when it must be called again (zero: not
// before the next change).
func (w *worker) publishKeys(now time.Time) time.Time {
	kw := w.kw
	if !kw.dirty {
		return time.Time{}
	}
	if due := kw.snapAt.Add(keySnapEvery); now.Before(due) {
		return due
	}
	kw.dirty, kw.snapAt = false, now
	s := keySnapshot{keysInFlight: kw.inFlight, parkedKeys: len(kw.parked), unacked: w.readNext - w.next.Load()}
	ps := slices.Clone([]*msg(kw.parked))
	sort.Slice(ps, func(i, j int) bool { return ps[i].parkedAt.Before(ps[j].parkedAt) })
	for _, m := range ps[:min(len(ps), parkedShown)] {
		s.parked = append(s.parked, ParkedKey{Key: m.key, Offset: m.e.Offset, Since: m.parkedAt,
			Attempts: m.attempts, LastError: m.lastErr, NextRetry: m.retryAt})
	}
	if s.unacked >= kw.maxUnack {
		s.heldBy = w.headKey(w.next.Load())
	}
	var retry int64
	if len(kw.parked) > 0 {
		retry = kw.parked[0].retryAt.UnixNano()
	}
	w.retryAt.Store(retry)
	w.keySnap.Store(&s)
	return time.Time{}
}

// headKey is the key of the unfinished message at off (the checkpoint),
// found among the keys' heads; "" when it has none.
func (w *worker) headKey(off int64) string {
	for _, q := range w.kw.keys {
		if q.head != nil && q.head.e.Offset == off {
			return q.key
		}
	}
	return ""
}

// parkHeap orders parked messages by retry time.
type parkHeap []*msg

func (h parkHeap) Len() int           { return len(h) }
func (h parkHeap) Less(i, j int) bool { return h[i].retryAt.Before(h[j].retryAt) }
func (h parkHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *parkHeap) Push(x any) {
	m := x.(*msg)
	m.heapIdx = len(*h)
	*h = append(*h, m)
}
func (h *parkHeap) Pop() any {
	old := *h
	m := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	m.heapIdx = -1
	return m
}

// abnormalKeys is abnormalAnswer under OrderKey: each message of the push
// is parked alone (its key waits), or dead-lettered past the dispatcher's
// AbnormalLimit; the other keys go on.
func (w *worker) abnormalKeys(r pushResult, now time.Time, status int, ae *AbnormalError, lim AbnormalLimit) error {
	for _, m := range r.ms {
		if past, err := w.noteAbnormal(m, r.err, now, status, lim); past || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		w.park(m, max(w.keyBackoff(m), w.retryAfter(ae)))
		w.log.Warn("abnormal response; this key waits, the others go on",
			zap.Int64("offset", m.e.Offset), zap.String("key", m.key), zap.Int("attempt", m.attempts),
			zap.Duration("retry-in", time.Until(m.retryAt)), zap.Error(r.err))
	}
	return nil
}
