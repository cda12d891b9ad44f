package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

var (
	// errStopped: the manager is stopping; the message in hand is not finished.
	errStopped = errors.New("dispatcher: stopped")
	// errTopicClosed: the topic was closed; the worker ends.
	errTopicClosed = errors.New("dispatcher: topic closed")
)

// worker delivers one topic to one dispatcher: up to MaxInFlight pushes
// at once (one by default, strictly in offset order), committing the
// checkpoint over the contiguous prefix of finished messages (window.go).
// Only its own goroutine touches the fields below the atomics.
type worker struct {
	m         *Manager
	d         *Dispatcher
	topic     Topic
	topicName string
	log       *zap.Logger
	timeout   time.Duration
	ended     bool // guarded by m.mu
	deleting  bool // guarded by m.mu: stopped because its topic is deleted
	cancel    context.CancelFunc
	done      chan struct{} // closed once run has returned and m.ended ran
	// incarnation is the topic's incarnation id (mmmq-topic-incarnation).
	incarnation string

	// status, read by Manager.Status
	committed, next                                          atomic.Int64
	delivered, nacked, exhausted, skipped, abnormal, commits atomic.Uint64
	// deadLettered counts messages appended to the dead-letter topic.
	deadLettered atomic.Uint64
	// expired counts messages retention deleted before this worker read
	// them (its checkpoint was below the topic's start offset).
	expired                         atomic.Uint64
	backingOff, running, nackResend atomic.Bool
	sending                         atomic.Bool  // an attempt is in flight
	attempt                         atomic.Int64 // of the message at next; 0 when idle
	retryAt                         atomic.Int64 // Unix ns of the next attempt while backing off
	errMu                           sync.Mutex
	errText                         string
	lastErr                         string    // the last abnormal answer or failure
	lastErrAt                       time.Time // when it happened

	ctx        context.Context // set by run; commit retries until it ends
	cp         contract.Checkpoint
	bo         *backoff.ExponentialBackOff // abnormal responses; reset after any normal one
	pending    int                         // finished but uncommitted messages
	lastCommit time.Time

	// The window (window.go).
	win         []*msg          // read and not yet committed, in offset order
	ready       []*msg          // to send: first sends, NACK resends, retries; in offset order
	readNext    int64           // next offset to read
	inflight    int             // pushes outstanding
	results     chan pushResult // their answers
	retryUntil  time.Time       // no push starts before (backoff)
	readRetry   time.Time       // no read before (after a read error)
	readBackoff *backoff.ExponentialBackOff
	maxInFlight int
	winCap      int   // most messages in win
	winBytes    int64 // payload bytes in win
	winBytesCap int64 // with batches: most payload bytes in win (0: no cap)
	batch       Batch // MaxMessages 0: one message per push
}

func newWorker(m *Manager, d *Dispatcher, t Topic) *worker {
	name := t.Name()
	timeout := d.Timeout()
	if timeout <= 0 {
		timeout = m.opts.DefaultTimeout
	}
	w := &worker{
		m:         m,
		d:         d,
		topic:     t,
		topicName: name,
		log:       m.log.With(zap.String("dispatcher", d.name), zap.String("topic", name)),
		timeout:   timeout,
		bo:        m.newBackoff(),
		done:      make(chan struct{}),

		readBackoff: m.newBackoff(),
		maxInFlight: d.MaxInFlight(),
		batch:       d.Batch(),

		incarnation: topicIncarnation(t),
	}
	if _, ok := m.sender.(PushSender); !ok {
		w.batch = Batch{} // a plain Sender gets one message per push
	}
	w.winCap = max(m.opts.BatchSize, w.maxInFlight*max(w.batch.MaxMessages, 1))
	if w.batch.MaxMessages > 0 {
		// maxInFlight batches of MaxBytes in flight and one more ready:
		// max-messages alone (up to 1024 * 10000 messages) would read a
		// whole backlog into memory when max-bytes is what bounds a batch.
		w.winBytesCap = int64(w.maxInFlight+1) * w.batch.MaxBytes
	}
	w.results = make(chan pushResult, w.maxInFlight)
	w.running.Store(true)
	return w
}

// newBackoff is the original Java mmmq's schedule: BackoffInitial (1 s),
// doubling, capped at BackoffMax (60 s), no jitter, never giving up.
func (m *Manager) newBackoff() *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(m.opts.BackoffInitial),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0),
		backoff.WithMaxInterval(m.opts.BackoffMax),
		backoff.WithMaxElapsedTime(0),
	)
	b.Reset()
	return b
}

func (w *worker) status() WorkerStatus {
	w.errMu.Lock()
	errText, lastErr, lastErrAt := w.errText, w.lastErr, w.lastErrAt
	w.errMu.Unlock()
	hw, committed, next := w.topic.HighWatermark(), w.committed.Load(), w.next.Load()
	// backingOff alone is not enough: a normal answer to another push
	// (max-in-flight > 1) and the end of a commit or dead-letter retry
	// clear it while the head still waits out its backoff (retryAt).
	retryAt := w.retryAt.Load()
	backoff := w.backingOff.Load() || time.Now().UnixNano() < retryAt
	st := WorkerStatus{
		Dispatcher:    w.d.name,
		Topic:         w.topicName,
		Committed:     committed,
		Next:          next,
		Delivered:     w.delivered.Load(),
		Nacked:        w.nacked.Load(),
		Exhausted:     w.exhausted.Load(),
		DeadLettered:  w.deadLettered.Load(),
		Skipped:       w.skipped.Load(),
		Expired:       w.expired.Load(),
		Abnormal:      w.abnormal.Load(),
		Commits:       w.commits.Load(),
		Backoff:       backoff,
		Running:       w.running.Load(),
		Err:           errText,
		HighWatermark: hw,
		Lag:           max(0, hw-committed),
		Attempt:       int(w.attempt.Load()),
		LastError:     lastErr,
		LastErrorAt:   lastErrAt,
	}
	switch {
	case w.sending.Load():
		st.State = StateDelivering // an attempt is in flight (a resend too)
	case st.Backoff:
		st.State, st.NextRetry = StateBackoff, time.Unix(0, retryAt)
	case w.nackResend.Load():
		st.State = StateNackResend
	case next < hw:
		st.State = StateDelivering
	default:
		st.State = StateIdle
	}
	st.OldestUnacked = storedAt(w.topic, next, hw)
	return st
}

// storedAt is the stored timestamp of the message at off of t, zero when
// off is at or past hw or the message is unreadable or has none.
func storedAt(t Topic, off, hw int64) time.Time {
	if off >= hw {
		return time.Time{}
	}
	if es, _ := t.ReadBatch(off, 1); len(es) == 1 {
		if _, _, ts, ok := contract.StoredMeta(es[0].Payload); ok && ts > 0 {
			return time.UnixMilli(ts)
		}
	}
	return time.Time{}
}

// run is the worker's goroutine. It returns nil when stopped by ctx,
// errTopicClosed when the topic closed, or the failure that ended it.
func (w *worker) run(ctx context.Context) (err error) {
	w.ctx = ctx
	defer w.running.Store(false)
	defer func() {
		switch {
		case err == nil:
			w.log.Info("dispatch worker stopped", zap.Int64("committed", w.committed.Load()))
		case errors.Is(err, errTopicClosed):
			w.log.Info("dispatch worker ended: topic closed", zap.Int64("committed", w.committed.Load()))
		default:
			w.errMu.Lock()
			w.errText = err.Error()
			w.errMu.Unlock()
			w.log.Error("dispatch worker failed; this topic is not delivered to this dispatcher until restart",
				zap.Int64("committed", w.committed.Load()), zap.Error(err))
		}
	}()
	cp, err := w.openCheckpoint(ctx)
	if errors.Is(err, errStopped) {
		return nil
	}
	if err != nil {
		return err
	}
	w.cp = cp
	if err := w.markStart(); err != nil {
		if errors.Is(err, errStopped) || ctx.Err() != nil {
			return nil // stopped while the first commit was retried
		}
		return err
	}
	off := cp.Offset()
	w.committed.Store(off)
	w.next.Store(off)
	w.readNext = off
	w.lastCommit = time.Now()
	w.log.Info("dispatch worker started", zap.Int64("offset", off), zap.String("checkpoint", cp.Path()))
	err = w.loop(ctx)
	if errors.Is(err, errStopped) {
		// Graceful stop: commit what is finished (Interval policy); the
		// message in flight, if any, is not.
		return w.flush()
	}
	// On errTopicClosed the topic has closed (or is closing) its
	// checkpoints: nothing more is committed; finished but uncommitted
	// messages are sent again later (at-least-once).
	return err
}

// openCheckpoint opens the dispatcher's checkpoint of the topic, retrying
// transient errors with backoff until ctx is done.
func (w *worker) openCheckpoint(ctx context.Context) (contract.Checkpoint, error) {
	b := w.m.newBackoff()
	for {
		cp, err := w.topic.Checkpoint(w.d.name)
		if err == nil {
			return cp, nil
		}
		if errors.Is(err, storage.ErrClosed) {
			return nil, errTopicClosed
		}
		delay := b.NextBackOff()
		w.log.Error("open checkpoint failed; retrying", zap.Duration("retry-in", delay), zap.Error(err))
		if !sleep(ctx, delay) {
			return nil, errStopped
		}
	}
}

// markStart writes the checkpoint of a dispatcher that has none on this
// topic yet, at offset 0, before the first delivery: from then on the
// topic counts as seen, so a restart or a resume never takes it for one
// that existed before a "latest" dispatcher was created (Manager.Add
// writes those checkpoints, at the high watermark, when it creates one).
func (w *worker) markStart() error {
	e, ok := w.cp.(interface{ Exists() bool })
	if !ok || e.Exists() {
		return nil
	}
	return w.commit(w.cp.Offset())
}

// noteErr records the last abnormal answer or failure, for the status.
func (w *worker) noteErr(text string) {
	w.errMu.Lock()
	w.lastErr, w.lastErrAt = text, time.Now()
	w.errMu.Unlock()
}

// commit durably stores next (write + fsync: the checkpoint is fsynced before
// the worker moves on, the original Java mmmq's commit point).
// A failed commit (EIO, ENOSPC, EMFILE) is retried with backoff while
// delivery waits: the checkpoint only ever holds the next offset after
// finished messages, so a commit that did not happen means redelivery,
// never a skip, and a retry rewrites the 8 bytes before it fsyncs. When the
// worker is stopping it gives up (the messages are delivered again after
// the restart).
func (w *worker) commit(next int64) error {
	b := w.m.newBackoff()
	for {
		err := w.cp.Commit(next)
		if err == nil {
			w.committed.Store(next)
			w.commits.Add(1)
			w.pending = 0
			w.lastCommit = time.Now()
			return nil
		}
		if errors.Is(err, storage.ErrClosed) {
			return errTopicClosed
		}
		if w.ctx == nil || w.ctx.Err() != nil {
			return fmt.Errorf("commit offset %d: %w", next, err)
		}
		delay := b.NextBackOff()
		w.log.Error("commit checkpoint failed; delivery waits and retries (nothing is skipped)",
			zap.Int64("offset", next), zap.String("checkpoint", w.cp.Path()), zap.Duration("retry-in", delay), zap.Error(err))
		w.backingOff.Store(true)
		ok := sleep(w.ctx, delay)
		w.backingOff.Store(false)
		if !ok {
			return errStopped
		}
	}
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
