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
)

var (
	// errStopped: the manager is stopping; the message in hand is not finished.
	errStopped = errors.New("dispatcher: stopped")
	// errTopicClosed: the topic was closed; the worker ends.
	errTopicClosed = errors.New("dispatcher: topic closed")
	// errLeaseLost: the worker's lease was lost (a shared backend); it
	// stops delivering and tries to acquire the lease again.
	errLeaseLost = errors.New("dispatcher: lease lost")
)

// StandbyPoll is how often a worker whose topic is delivered by another
// node (its lease is held elsewhere) tries to take the lease over: at most
// this long after the holder's lease expired.
const StandbyPoll = time.Second

// worker delivers one topic to one dispatcher: up to MaxInFlight pushes
// at once (one by default, strictly in offset order), committing the
// checkpoint over the contiguous prefix of finished messages (loop.go).
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
	expired atomic.Uint64
	// ttlExpired counts messages finished past their expiresAt (expiry.go).
	ttlExpired                      atomic.Uint64
	backingOff, running, nackResend atomic.Bool
	// standby: another node holds this (dispatcher, topic)'s lease.
	standby atomic.Bool
	// leaseEpoch is the epoch of the lease held (0: none or not needed).
	leaseEpoch atomic.Uint64
	sending    atomic.Bool // an attempt is in flight
	// outstanding is inflight for the status: the pushes out now.
	outstanding atomic.Int64
	attempt     atomic.Int64 // of the message at next; 0 when idle
	retryAt     atomic.Int64 // Unix ns of the next attempt while backing off
	errMu       sync.Mutex
	errText     string
	lastErr     string    // the last abnormal answer or failure
	lastErrAt   time.Time // when it happened

	ctx        context.Context // set by run; commit retries until it ends
	cp         contract.Checkpoint
	bo         *backoff.ExponentialBackOff // abnormal responses; reset after any normal one
	pending    int                         // finished but uncommitted messages
	lastCommit time.Time

	// The window (loop.go).
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
	// skip is what the checkpoint recorded as finished past its offset
	// (contract.FinishedRecorder), passed over by fill.
	skip []contract.OffsetRange
	// kw is the window under OrderKey (keyorder.go), nil otherwise;
	// keySnap is its state for the status.
	kw      *keyWindow
	keySnap atomic.Pointer[keySnapshot]
	// rl is the dispatcher's rate limit (nil: off) and held the push
	// waiting for its tokens, if any (ratelimit.go).
	rl   *rateLimiter
	held *held
	// replay is the replay rate of a seek or redrive, nil when none
	// (replay.go); set by the Manager, so read atomically.
	replay atomic.Pointer[replay]
	// br is the dispatcher's circuit breaker (nil: off; breaker.go);
	// brClosings its closings this worker has seen, probeClaim that the
	// next push is the probe, probing that the probe is out.
	br                  *breaker
	brClosings          uint64
	probeClaim, probing bool
	// cc is the dispatcher's adaptive concurrency limiter (nil: off;
	// concurrency.go): a push takes one of its slots.
	cc *aimd
	// hl is the dispatcher's auto-pause state (nil: pause-after off).
	hl *health
	// deferred holds, under OrderNone, the NACKed messages that asked to
	// be sent again later ("retryAfter"), by due time.
	deferred parkHeap
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
		TTLExpired:    w.ttlExpired.Load(),
		Abnormal:      w.abnormal.Load(),
		Commits:       w.commits.Load(),
		Backoff:       backoff,
		Running:       w.running.Load(),
		LeaseEpoch:    w.leaseEpoch.Load(),
		Err:           errText,
		HighWatermark: hw,
		Lag:           max(0, hw-committed),
		Attempt:       int(w.attempt.Load()),
		LastError:     lastErr,
		LastErrorAt:   lastErrAt,
		InFlight:      int(w.outstanding.Load()),
	}
	switch {
	case w.standby.Load():
		st.State = StateStandby
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
	st.Replay = w.replayStatus(committed)
	st.Ordering = w.d.Ordering()
	if k := w.keySnap.Load(); k != nil && st.Ordering == OrderKey {
		st.KeysInFlight, st.ParkedKeys, st.Parked = k.keysInFlight, k.parkedKeys, k.parked
		st.Unacked, st.HeldBy = k.unacked, k.heldBy
	}
	if st.Ordering == OrderKey {
		st.MaxUnacked = int64(w.d.MaxUnacked())
	}
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
	for {
		lease, err := w.acquireLease(ctx)
		if errors.Is(err, errStopped) {
			return nil
		}
		if err != nil {
			return err
		}
		err = w.deliver(ctx, lease)
		if !errors.Is(err, errLeaseLost) {
			return err
		}
		w.log.Warn("dispatch lease lost: another node delivers this topic now; this node stands by (a push it had in flight may still arrive, with the old mmmq-lease-epoch)",
			zap.Uint64("epoch", w.leaseEpoch.Load()))
		w.leaseEpoch.Store(0)
		// A lease is lost because this node was too slow to renew it:
		// leave the first try to the other nodes.
		w.standby.Store(true)
		if !sleep(ctx, StandbyPoll) {
			return nil
		}
	}
}

// deliver delivers the topic from its checkpoint until ctx is done (nil
// after the graceful stop's commit), the topic closes (errTopicClosed), the
// lease, when there is one, is lost (errLeaseLost: nothing more is
// committed by this node), or a failure.
func (w *worker) deliver(ctx context.Context, lease contract.WorkLease) error {
	if lease != nil {
		// The lease's loss ends this delivery as a stop does, without the
		// stop's commit (stopped).
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-lease.Lost():
				cancel()
			case <-lctx.Done():
			}
		}()
		defer func() {
			cancel()
			if err := lease.Release(); err != nil {
				w.log.Warn("release dispatch lease", zap.Error(err))
			}
		}()
		ctx = lctx
	}
	w.ctx = ctx
	cp, err := w.openCheckpoint(ctx)
	if err == nil && lease != nil {
		err = w.bindEpoch(ctx, cp, lease)
	}
	if errors.Is(err, errStopped) {
		return w.stopped(lease, nil)
	}
	if err != nil {
		return err
	}
	w.cp = cp
	w.kw = nil // a previous delivery's window (a lost lease) records nothing here
	if err := w.markStart(); err != nil {
		if errors.Is(err, errStopped) || ctx.Err() != nil {
			return w.stopped(lease, nil) // stopped while the first commit was retried
		}
		return err
	}
	w.reset(cp.Offset())
	w.log.Info("dispatch worker started", zap.Int64("offset", cp.Offset()), zap.String("checkpoint", cp.Path()),
		zap.Uint64("lease-epoch", w.leaseEpoch.Load()))
	err = w.loop(ctx)
	if errors.Is(err, errStopped) {
		// Graceful stop: commit what is finished (Interval policy); the
		// message in flight, if any, is not.
		return w.stopped(lease, w.flush)
	}
	// On errTopicClosed the topic has closed (or is closing) its
	// checkpoints: nothing more is committed; finished but uncommitted
	// messages are sent again later (at-least-once).
	return err
}

// stopped is the end of a delivery whose context is done: errLeaseLost
// when the lease was lost (nothing is committed: a newer holder owns the
// checkpoint), else flush's result (nil when flush is nil).
func (w *worker) stopped(lease contract.WorkLease, flush func() error) error {
	if lease != nil {
		select {
		case <-lease.Lost():
			return errLeaseLost
		default:
		}
	}
	if flush == nil {
		return nil
	}
	return flush()
}

// reset starts the window (loop.go) empty at off, the committed offset.
func (w *worker) reset(off int64) {
	w.win, w.ready, w.inflight, w.pending = nil, nil, 0, 0
	w.winBytes = 0
	w.retryUntil, w.readRetry = time.Time{}, time.Time{}
	w.bo.Reset()
	w.readBackoff.Reset()
	w.committed.Store(off)
	w.next.Store(off)
	w.readNext = off
	w.lastCommit = time.Now()
	w.kw, w.skip, w.deferred = nil, finishedSkip(w.cp), nil
	if w.d.Ordering() == OrderKey {
		w.kw = newKeyWindow(w, off, w.skip)
		w.skip = nil
		w.keySnap.Store(&keySnapshot{})
	}
}

// acquireLease takes the topic's lease for this dispatcher when the
// topic's backend is shared by several nodes (nil, nil otherwise). While
// another node holds it the worker stands by (StateStandby) and tries
// again every StandbyPoll; other errors are retried with backoff. Errors:
// errStopped when ctx ends, errTopicClosed.
func (w *worker) acquireLease(ctx context.Context) (contract.WorkLease, error) {
	wl, ok := w.topic.(contract.WorkLeaser)
	if !ok {
		return nil, nil
	}
	b := w.m.newBackoff()
	for logged := false; ; {
		l, err := wl.AcquireWork(ctx, w.d.name)
		if err == nil {
			w.standby.Store(false)
			if l != nil {
				w.leaseEpoch.Store(l.Epoch())
				w.log.Info("dispatch lease acquired", zap.Uint64("epoch", l.Epoch()), zap.String("holder", l.Holder()))
			}
			return l, nil
		}
		if errors.Is(err, contract.ErrClosed) {
			return nil, errTopicClosed
		}
		delay := StandbyPoll
		if errors.Is(err, contract.ErrLeaseHeld) {
			w.standby.Store(true)
			w.showStored()
			if !logged {
				w.log.Info("standing by: another node delivers this topic", zap.Error(err))
				logged = true
			}
		} else {
			delay = b.NextBackOff()
			w.log.Error("acquire dispatch lease failed; retrying", zap.Duration("retry-in", delay), zap.Error(err))
		}
		if !sleep(ctx, delay) {
			return nil, errStopped
		}
	}
}

// showStored sets the status's committed and next offsets from the stored
// checkpoint (reloaded when it can be) while another node delivers the
// topic, so that this node's status and lag metrics are the holder's
// progress, not this worker's last.
func (w *worker) showStored() {
	cp, err := w.topic.Checkpoint(w.d.name)
	if err != nil {
		return
	}
	if r, ok := cp.(contract.CheckpointReloader); ok && r.Reload() != nil {
		return
	}
	off := cp.Offset()
	w.committed.Store(off)
	w.next.Store(off)
}

// bindEpoch binds cp to the lease's epoch (its commits are then refused
// once a newer holder committed) and reloads what the previous holder
// committed, retrying the store's errors with backoff. A checkpoint that
// cannot be bound is an error: its commits would not be fenced.
func (w *worker) bindEpoch(ctx context.Context, cp contract.Checkpoint, lease contract.WorkLease) error {
	ec, ok := cp.(contract.EpochCheckpoint)
	if !ok {
		return fmt.Errorf("checkpoint %s cannot be bound to a lease epoch (%T)", cp.Path(), cp)
	}
	b := w.m.newBackoff()
	for {
		err := ec.BindEpoch(lease.Epoch())
		if err == nil {
			return nil
		}
		if errors.Is(err, contract.ErrStaleCommit) {
			return errLeaseLost // a newer holder stamped the checkpoint already
		}
		delay := b.NextBackOff()
		w.log.Error("bind checkpoint to lease epoch failed; retrying", zap.Duration("retry-in", delay), zap.Error(err))
		if !sleep(ctx, delay) {
			return errStopped
		}
	}
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
		if errors.Is(err, contract.ErrClosed) {
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
	e, ok := w.cp.(contract.CheckpointExister)
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
	if err := w.recordFinished(); err != nil {
		return err
	}
	b := w.m.newBackoff()
	for {
		err := w.cp.Commit(next)
		if err == nil {
			w.committed.Store(next)
			w.replayReached(next)
			w.commits.Add(1)
			w.pending = 0
			w.lastCommit = time.Now()
			return nil
		}
		if errors.Is(err, contract.ErrClosed) {
			return errTopicClosed
		}
		if errors.Is(err, contract.ErrStaleCommit) {
			return errLeaseLost // a newer holder owns the checkpoint: never retried
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
