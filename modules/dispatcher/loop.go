package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// The delivery loop of a worker (loop) and its window.
//
// A worker reads messages ahead of its checkpoint into a window (at most
// winCap of them) and pushes them to the consumer, up to maxInFlight
// pushes at a time, each push one message or a batch. Every message of the
// window is in one of three places: ready (waiting for a push: its first
// send, a NACK resend, or a retry after an abnormal answer), in flight, or
// done (ACKed, dead-lettered, skipped). The checkpoint moves only over the
// contiguous prefix of done messages, so it never passes a message that is
// not finished, whatever order the answers come in.
//
// With maxInFlight 1 and no batch (the defaults) exactly one message is in
// flight and ready is kept in offset order, so the consumer sees the
// original Java mmmq's strict order: a NACKed message is sent again before
// any later one.

// msg is one message of the window, from its read to its commit.
type msg struct {
	e   contract.Entry
	end int64  // the offset after it: e.Offset+1, or the log start offset for a retention gap
	id  string // producer message id (header form), "" when none
	key string // ordering key, "" when none
	exp int64  // stored expiresAt (Unix ms), 0 for none; read once expRead (expiry.go)

	expRead bool

	readAt        time.Time // when it was read (a batch waits at most MaxWait from the first)
	attempts      int       // sends so far, abnormal ones included
	nacks         int
	abnormals     int
	firstAbnormal time.Time
	lastStatus    int    // HTTP status of the last answer, 0 for none
	lastErr       string // the last abnormal answer
	done          bool

	// OrderKey (keyorder.go)
	kq       *keyQueue // its key's queue; nil without a key or under the other orderings
	unloaded bool      // its payload must be read again from the log before a push
	parked   bool      // in the parked heap, waiting until retryAt
	parkedAt time.Time // its first NACK or abnormal answer
	retryAt  time.Time
	heapIdx  int
}

// pushResult is the answer to one push.
type pushResult struct {
	ms    []*msg
	ans   Answer
	err   error
	probe bool // the circuit breaker's probe (breaker.go)
	// sent is when the push went out and inUse the dispatcher's pushes
	// outstanding then, itself included (adaptive concurrency,
	// concurrency.go; zero without it).
	sent  time.Time
	inUse int
	// absorbed: a 429 or 503 without Retry-After that lowered the limit
	// (or was answered by its round's decrease) while it was above 1:
	// sent again without a backoff (ordering none).
	absorbed bool
}

// loop delivers until ctx is done (errStopped), the topic closes
// (errTopicClosed) or a commit fails.
func (w *worker) loop(ctx context.Context) error {
	// The pushes outlive ctx by the stop grace (await): their own context
	// ends when the loop returns.
	sendCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		w.release(time.Now(), false) // a push held for tokens is not sent: they go back
		if ctx.Err() != nil {
			w.await(min(w.m.opts.StopGrace, w.timeout))
		}
		cancel()
		w.drain()
		if w.probing || w.probeClaim {
			w.br.abandon(w) // another worker probes
		}
		if w.cc != nil {
			w.cc.leave(w)
		}
	}()
	for {
		if ctx.Err() != nil {
			return errStopped
		}
		// Commit before the next push: with the defaults the consumer
		// never gets a message before the one it ACKed is committed.
		// Before fill too: the finished messages leave the window, so
		// that fill reads the next ones into their room instead of
		// finding it full (and the worker idle, committing early).
		if err := w.advance(); err != nil {
			return err
		}
		if err := w.fill(); err != nil {
			return err
		}
		var brChanged <-chan struct{}
		if w.br != nil {
			// Before launchReady looks: a change after it looked wakes
			// the wait below at once.
			brChanged, _ = w.br.wait()
		}
		ccChanged := w.concurrencyWait() // a slot freed after launchReady looked wakes the wait at once
		parkedDue := w.unpark(time.Now())
		wake, err := w.launchReady(sendCtx)
		if err != nil {
			return err
		}
		wake = earliest(wake, parkedDue)
		if w.kw != nil {
			wake = earliest(wake, w.publishKeys(time.Now()))
		}
		if w.inflight == 0 && len(w.ready) == 0 {
			// Waiting counts as idle: make what is finished durable first.
			if err := w.flush(); err != nil {
				return err
			}
		}
		var notify, closed <-chan struct{}
		if w.readRetry.IsZero() && w.room() {
			// Already closed when data came after fill looked.
			notify = w.topic.Notify(w.readNext)
		} else {
			// Not reading now (window full, read retry pending), but a
			// closed topic must still end the worker: the high watermark
			// never reaches MaxInt64, so this fires on close only.
			closed = w.topic.Notify(math.MaxInt64)
		}
		if !w.readRetry.IsZero() && (wake.IsZero() || w.readRetry.Before(wake)) {
			wake = w.readRetry
		}
		var timer <-chan time.Time
		var t *time.Timer
		if !wake.IsZero() {
			t = time.NewTimer(time.Until(wake))
			timer = t.C
		}
		err = w.wait(ctx, timer, notify, closed, brChanged, ccChanged)
		if t != nil {
			t.Stop()
		}
		if err != nil {
			return err
		}
	}
}

// wait blocks until an answer, new data (notify), the topic's close
// (closed), the timer, a change of the circuit breaker (brChanged) or of
// the adaptive concurrency limiter (ccChanged) or the end of ctx, and
// handles what came.
func (w *worker) wait(ctx context.Context, timer <-chan time.Time, notify, closed, brChanged, ccChanged <-chan struct{}) error {
	select {
	case <-brChanged:
	case <-ccChanged:
	case <-ctx.Done():
		return errStopped
	case <-closed:
		return errTopicClosed
	case r := <-w.results:
		return w.received(r)
	case <-notify:
		// The high watermark never decreases: no new data means closed.
		if w.topic.HighWatermark() <= w.readNext {
			return errTopicClosed
		}
	case <-timer:
	}
	return nil
}

// received handles r and every other answer already waiting, so that one
// commit covers them all.
func (w *worker) received(r pushResult) error {
	for {
		w.inflight--
		w.answered()
		w.landed(r)
		if err := w.handle(r); err != nil {
			return err
		}
		select {
		case r = <-w.results:
		default:
			w.sending.Store(w.inflight > 0)
			return nil
		}
	}
}

// await waits up to grace for the answers to the pushes in flight of a
// stopping worker, handling each as drain does: what the consumer ACKed
// counts.
func (w *worker) await(grace time.Duration) {
	if grace <= 0 || w.inflight == 0 {
		return
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	for w.inflight > 0 {
		select {
		case r := <-w.results:
			w.inflight--
			w.answered()
			w.landed(r)
			w.countACKs(r)
		case <-t.C:
			return
		}
	}
}

// countACKs finishes the messages r's answer ACKed (a stopping worker's:
// NACKs and abnormal answers leave them for after the restart).
func (w *worker) countACKs(r pushResult) {
	if r.err != nil {
		return
	}
	for i, m := range r.ms {
		if r.ans.Outcomes[i] == ACK && !m.done {
			w.finish(m)
			w.delivered.Add(1)
		}
	}
}

// drain waits for the pushes still in flight (their context is cancelled),
// counting the ACKs that came anyway: the consumer has decided. Nothing is
// committed here (run's flush does, on a graceful stop).
func (w *worker) drain() {
	for ; w.inflight > 0; w.inflight-- {
		r := <-w.results
		w.answered()
		w.landed(r)
		w.countACKs(r)
	}
	w.sending.Store(false)
	w.popDone()
}

// landed counts r's messages out of flight (OrderKey's keys in flight).
func (w *worker) landed(r pushResult) {
	if w.kw == nil {
		return
	}
	for _, m := range r.ms {
		if m.kq != nil {
			w.kw.inFlight--
		}
	}
	w.kw.dirty = true
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || !b.IsZero() && b.Before(a) {
		return b
	}
	return a
}

// room is hasRoom, or keyHasRoom under OrderKey.
func (w *worker) room() bool {
	if w.kw != nil {
		return w.keyHasRoom()
	}
	return w.hasRoom()
}

// hasRoom reports whether fill may read more: fewer than winCap messages
// and, with batches, fewer than winBytesCap bytes in the window. fill, the
// Notify wait and takeUnit's "the batch cannot grow" all use it (a wait for
// data the window has no room for would wake at once, for ever).
func (w *worker) hasRoom() bool {
	return len(w.win) < w.winCap && (w.winBytesCap == 0 || w.winBytes < w.winBytesCap)
}

// fill reads messages into the window while it has room and the topic has
// more. Reading errors are handled as the original Java mmmq does: a
// corrupt entry is logged and skipped alone; what cannot be placed is
// retried later (readRetry), never skipped.
func (w *worker) fill() error {
	if !w.readRetry.IsZero() {
		if time.Now().Before(w.readRetry) {
			return nil
		}
		w.readRetry = time.Time{}
	}
	if w.kw != nil {
		return w.fillKeys()
	}
	for w.hasRoom() && w.readNext < w.topic.HighWatermark() {
		// Recorded as finished before this worker started (by a worker
		// with ordering "key"): not delivered again.
		if end := skipAt(&w.skip, w.readNext); end > w.readNext {
			end = min(end, w.topic.HighWatermark())
			w.finishGap(w.readNext, end)
			w.readNext = end
			continue
		}
		n := min(w.m.opts.BatchSize, w.winCap-len(w.win))
		if s := nextSkip(w.skip, w.readNext); s > w.readNext {
			n = int(min(int64(n), s-w.readNext))
		}
		batch, rerr := w.topic.ReadBatch(w.readNext, n)
		now := time.Now()
		for _, e := range batch {
			if e.Offset != w.readNext {
				return fmt.Errorf("read batch: got offset %d, want %d (topic source broke its contract)", e.Offset, w.readNext)
			}
			id, key := contract.MessageIDKey(e.Payload)
			m := &msg{e: e, end: e.Offset + 1, id: id, key: key, readAt: now}
			w.win = append(w.win, m)
			w.winBytes += int64(len(e.Payload))
			w.ready = append(w.ready, m)
			w.readNext++
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

// readProblem handles what ReadBatch reported besides its entries.
func (w *worker) readProblem(batch []contract.Entry, rerr error) error {
	next := w.readNext
	var ce *contract.CorruptionError
	var oe *contract.OffsetExpiredError
	switch {
	case rerr == nil && len(batch) > 0:
		w.readBackoff.Reset()
	case errors.As(rerr, &oe) && oe.StartOffset > next:
		// Retention deleted what this dispatcher had not read: go on
		// from the log start offset, once, loudly.
		n := oe.StartOffset - next
		w.expired.Add(uint64(n))
		w.m.expired.Add(uint64(n))
		w.log.Warn("messages deleted by retention before this dispatcher read them; continuing from the log start offset",
			zap.Int64("offset", next), zap.Int64("start-offset", oe.StartOffset), zap.Int64("never-delivered", n))
		w.finishGap(next, oe.StartOffset)
		w.readNext = oe.StartOffset
	case errors.As(rerr, &ce) && ce.Offset == next:
		// Integrity check (the original Java mmmq's rule): an entry whose
		// CRC does not match is logged and skipped alone; delivery goes on.
		w.skipped.Add(1)
		w.log.Error("corrupt entry skipped; it is not delivered",
			zap.Int64("offset", ce.Offset), zap.String("file", ce.File), zap.Int64("pos", ce.Pos),
			zap.String("reason", ce.Reason), zap.Error(rerr))
		w.finishGap(next, next+1)
		w.readNext++
	case errors.Is(rerr, contract.ErrClosed):
		return errTopicClosed
	default:
		// An I/O error, a corruption at an unknown offset, or an empty
		// batch below the high watermark: never skip what we cannot
		// place; retry the read.
		if rerr == nil {
			rerr = errors.New("empty batch below the high watermark")
		}
		if err := w.flush(); err != nil {
			return err
		}
		delay := w.readBackoff.NextBackOff()
		w.readRetry = time.Now().Add(delay)
		w.log.Error("read failed; retrying", zap.Int64("offset", next), zap.Duration("retry-in", delay), zap.Error(rerr))
	}
	return nil
}

// launchReady starts pushes of ready messages while fewer than maxInFlight
// are outstanding and no backoff is running. It returns when to look again
// (the end of the backoff, of a batch's MaxWait, of a push's wait for
// its rate-limit tokens or of the circuit breaker's cool-off), zero for
// "on the next event". Under OrderKey the payloads read again come first
// (loadReady). With a rate limit each push reserves its tokens first; one
// that must wait is held (ratelimit.go) and sent, before any other, once
// they are there. With a circuit breaker nothing starts while it is open,
// and only the probe while it is half-open (breaker.go).
func (w *worker) launchReady(ctx context.Context) (time.Time, error) {
	now := time.Now()
	if w.cc != nil {
		w.cc.unwait(w)
	}
	if pass, wake := w.breakerGate(now); !pass {
		return wake, nil
	}
	wake, err := w.launchUnits(ctx, now)
	if w.probeClaim {
		// Claimed but nothing sent (a batch filling, tokens, a backoff):
		// the probe goes back.
		w.probeClaim = false
		w.br.abandon(w)
	}
	return wake, err
}

// launchUnits is launchReady past the circuit breaker: after the probe it
// starts nothing more.
func (w *worker) launchUnits(ctx context.Context, now time.Time) (time.Time, error) {
	if now.Before(w.retryUntil) {
		return w.retryUntil, nil
	}
	if w.held != nil && w.inflight < w.maxInFlight {
		if now.Before(w.held.at) {
			return w.held.at, nil
		}
		if !w.takeSlot() {
			return time.Time{}, nil // a freed slot wakes the loop
		}
		w.launch(ctx, w.release(now, true))
		if w.probing {
			return time.Time{}, nil
		}
	}
	for w.inflight < w.maxInFlight && len(w.ready) > 0 {
		if w.kw != nil {
			if !w.readRetry.IsZero() && now.Before(w.readRetry) {
				return w.readRetry, nil
			}
			if err := w.loadReady(); err != nil {
				return time.Time{}, err
			}
			if !w.readRetry.IsZero() || len(w.ready) == 0 {
				continue
			}
		}
		if expired, err := w.expireReady(now); err != nil {
			return time.Time{}, err
		} else if expired {
			continue // ready changed: load (OrderKey) and look again
		}
		if !w.takeSlot() {
			return time.Time{}, nil // a freed slot wakes the loop
		}
		unit, wait := w.takeUnit(now)
		if unit == nil {
			w.giveSlot()
			return wait, nil
		}
		if !w.reserve(unit, now) {
			w.giveSlot()
			return w.held.at, nil
		}
		w.launch(ctx, unit)
		if w.probing {
			return time.Time{}, nil
		}
	}
	return time.Time{}, nil
}

// takeUnit takes the next push's messages from the front of ready: one, or
// a batch bounded by MaxMessages and MaxBytes (at least one message). A
// NACKed message is resent on its own, never with others. A batch of first
// sends that could still grow waits until MaxWait after its first message
// was read: then it returns nil and that time.
func (w *worker) takeUnit(now time.Time) ([]*msg, time.Time) {
	b := w.batch
	if c := w.replayBatchCap(); c > 0 && b.MaxMessages > c {
		b.MaxMessages = c // a batch takes no more tokens than the replay's bucket holds
	}
	if b.MaxMessages <= 0 || w.ready[0].nacks > 0 {
		u := w.ready[:1:1]
		w.ready = w.ready[1:]
		return u, time.Time{}
	}
	n, size := 0, int64(0)
	for n < len(w.ready) && n < b.MaxMessages {
		sz := int64(len(w.ready[n].e.Payload))
		if n > 0 && (size+sz > b.MaxBytes || w.ready[n].nacks > 0) {
			break
		}
		size += sz
		n++
	}
	full := n == b.MaxMessages || n < len(w.ready) || size >= b.MaxBytes || !w.room()
	if !full && b.MaxWait > 0 && w.ready[0].attempts == 0 {
		if deadline := w.ready[0].readAt.Add(b.MaxWait); now.Before(deadline) {
			return nil, deadline
		}
	}
	u := append([]*msg(nil), w.ready[:n]...)
	w.ready = w.ready[n:]
	return u, time.Time{}
}

// launch sends unit in a goroutine of its own; the answer comes back on
// w.results (buffered for maxInFlight, so the goroutine never blocks).
func (w *worker) launch(ctx context.Context, unit []*msg) {
	p := Push{Messages: make([]Delivery, len(unit)), Batch: w.batch.MaxMessages > 0}
	for i, m := range unit {
		m.attempts++
		if w.kw != nil && m.kq != nil {
			w.kw.inFlight++
		}
		p.Messages[i] = Delivery{Dispatcher: w.d, Topic: w.topicName, Incarnation: w.incarnation,
			Offset: m.e.Offset, Attempt: m.attempts, MessageID: m.id, Key: m.key, Body: m.e.Payload, LeaseEpoch: w.leaseEpoch.Load()}
	}
	probe := w.probeClaim
	w.probeClaim, w.probing = false, probe || w.probing
	w.inflight++
	w.outstanding.Add(1)
	w.sending.Store(true)
	w.showHead()
	var inUse int
	if w.cc != nil {
		inUse = w.cc.inFlight()
	}
	sent := time.Now() // launched under the limit of now, whenever the goroutine runs
	go func() {
		actx, cancel := context.WithTimeout(ctx, w.timeout)
		ans, err := w.push(actx, p)
		cancel()
		w.results <- pushResult{ms: unit, ans: ans, err: err, probe: probe, sent: sent, inUse: inUse}
	}()
}

// push sends p with the PushSender when there is one, else with Send (one
// message: batches are off for a plain Sender).
func (w *worker) push(ctx context.Context, p Push) (Answer, error) {
	if w.m.tracer != nil {
		ctx, span := w.startPushSpan(ctx, p)
		a, err := w.send(ctx, p)
		endPushSpan(span, a, err)
		return a, err
	}
	return w.send(ctx, p)
}

// send is push without its span.
func (w *worker) send(ctx context.Context, p Push) (Answer, error) {
	if ps, ok := w.m.sender.(PushSender); ok {
		a, err := ps.Push(ctx, p)
		if err == nil && len(a.Outcomes) != len(p.Messages) {
			err = fmt.Errorf("sender answered %d outcomes for %d messages", len(a.Outcomes), len(p.Messages))
		}
		return a, err
	}
	o, err := w.m.sender.Send(ctx, p.Messages[0])
	if err != nil {
		return Answer{}, err
	}
	return Answer{Outcomes: []Outcome{o}}, nil
}

// handle applies one push's answer to its messages.
func (w *worker) handle(r pushResult) error {
	if r.err == nil {
		for _, o := range r.ans.Outcomes {
			if o != ACK && o != NACK {
				r.err = fmt.Errorf("sender returned unknown outcome %q", o)
			}
		}
	}
	if r.probe {
		w.probing = false
	}
	if r.err != nil {
		if w.ctx.Err() != nil {
			w.requeue(r.ms...) // stopping: not finished, sent again after a restart
			if r.probe {
				w.br.abandon(w)
			}
			return nil
		}
		r.absorbed = w.noteConcurrency(r)
		if w.br != nil {
			w.br.failure(r.probe, w.breakerCounts(r), time.Now(), r.err)
		}
		w.noteHealth(false, time.Now())
		return w.abnormalAnswer(r)
	}
	// A normal answer, even if ctx ended meanwhile: the consumer has
	// decided, so it counts.
	w.noteConcurrency(r)
	if w.br != nil {
		w.br.success()
	}
	w.noteHealth(true, time.Time{})
	w.bo.Reset()
	if w.backingOff.Swap(false) {
		w.log.Info("consumer answers again", zap.Int64("offset", r.ms[0].e.Offset), zap.Int("attempt", r.ms[0].attempts))
	}
	for i, m := range r.ms {
		m.lastStatus = r.ans.Status
		if r.ans.Outcomes[i] == ACK {
			w.finish(m)
			w.delivered.Add(1)
			if h := w.m.opts.Hooks; h != nil && h.AfterAck != nil {
				h.AfterAck(w.d.name, w.topicName, m.e.Offset) // test-only crash point
			}
			continue
		}
		m.nacks++
		w.nacked.Add(1)
		w.noteErr(fmt.Sprintf("offset %d: NACK on attempt %d", m.e.Offset, m.attempts))
		if m.nacks > w.m.opts.MaxResends {
			// The original Java mmmq's rule: after 3 resends move on; the
			// message goes to the dead-letter topic first.
			if err := w.exhaust(m, ReasonNACKs); err != nil {
				return err
			}
			continue
		}
		// "Retry me later": the consumer asked for a wait, capped by
		// backoff-max.
		ra := min(r.ans.retryAfter(i), w.m.opts.BackoffMax)
		switch {
		case w.kw != nil:
			// OrderKey: the key waits (its backoff, or the wait asked
			// for); the others go on.
			m.lastErr = fmt.Sprintf("NACK on attempt %d", m.attempts)
			if ra <= 0 {
				ra = w.keyBackoff(m)
			}
			w.park(m, ra)
		case ra > 0 && w.d.Ordering() == OrderNone:
			w.park(m, ra) // that message alone waits
		case ra > 0:
			// OrderTopic: the topic waits.
			w.requeue(m)
			if until := time.Now().Add(ra); until.After(w.retryUntil) {
				w.retryUntil = until
				w.retryAt.Store(until.UnixNano())
			}
		default:
			w.requeue(m) // the original rule: resent at once
		}
	}
	w.showHead()
	return nil
}

// breakerCounts says whether r's abnormal answer counts towards opening
// the circuit breaker: always, but under OrderKey only when it is the
// first abnormal answer of one of its messages (a parked key's retries
// count once).
func (w *worker) breakerCounts(r pushResult) bool {
	if w.kw == nil {
		return true
	}
	for _, m := range r.ms {
		if m.abnormals == 0 {
			return true
		}
	}
	return false
}

// abnormalAnswer handles a push answered abnormally: its messages are sent
// again after a backoff (the whole worker waits), unless a message is past
// the dispatcher's AbnormalLimit: then it is dead-lettered.
func (w *worker) abnormalAnswer(r pushResult) error {
	now := time.Now()
	w.abnormal.Add(1)
	w.backingOff.Store(w.kw == nil) // under OrderKey only the key waits
	first := r.ms[0]
	w.noteErr(fmt.Sprintf("offset %d attempt %d: %v", first.e.Offset, first.attempts, r.err))
	var ae *AbnormalError
	status := 0
	if errors.As(r.err, &ae) {
		status = ae.StatusCode
	}
	lim := w.d.AbnormalLimit()
	if w.kw != nil {
		return w.abnormalKeys(r, now, status, ae, lim)
	}
	retried := 0
	for _, m := range r.ms {
		if past, err := w.noteAbnormal(m, r.err, now, status, lim); past || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		w.requeue(m)
		retried++
	}
	w.showHead()
	if r.absorbed {
		// Adaptive concurrency: the lowered limit is the answer to the
		// overload; the messages go again within it, no backoff.
		w.backingOff.Store(false)
		return nil
	}
	if now.Before(w.retryUntil) {
		// Already waiting (another push failed first): one backoff step
		// per round of retries, lengthened only for a Retry-After.
		if ra := w.retryAfter(ae); now.Add(ra).After(w.retryUntil) {
			w.retryUntil = now.Add(ra)
			w.retryAt.Store(w.retryUntil.UnixNano())
		}
		return nil
	}
	delay := w.bo.NextBackOff()
	if w.d.BackoffJitter() {
		delay = rand.N(delay) + 1 // full jitter: uniform in (0, delay]
	}
	delay = max(delay, w.retryAfter(ae))
	w.retryUntil = now.Add(delay)
	w.retryAt.Store(w.retryUntil.UnixNano())
	if retried == 0 {
		// Every message of the push was dead-lettered (its abnormal
		// limit): none is retried, but the next one still waits.
		w.log.Warn("abnormal response; past the abnormal limit, so not retried; the next message waits out the backoff",
			zap.Int64("offset", first.e.Offset), zap.Int("attempt", first.attempts), zap.Duration("next-in", delay), zap.Error(r.err))
	} else {
		w.log.Warn("abnormal response; retrying after backoff",
			zap.Int64("offset", first.e.Offset), zap.Int("attempt", first.attempts), zap.Duration("retry-in", delay), zap.Error(r.err))
	}
	// Waiting counts as idle: make finished messages durable first.
	return w.flush()
}

// noteAbnormal counts an abnormal answer to m; past m's AbnormalLimit it
// dead-letters m (exhaust) and reports past true.
func (w *worker) noteAbnormal(m *msg, answer error, now time.Time, status int, lim AbnormalLimit) (past bool, err error) {
	m.abnormals++
	if m.firstAbnormal.IsZero() {
		m.firstAbnormal = now
	}
	m.lastStatus, m.lastErr = status, answer.Error()
	if lim.MaxAttempts > 0 && m.abnormals >= lim.MaxAttempts ||
		lim.MaxDuration > 0 && now.Sub(m.firstAbnormal) >= lim.MaxDuration {
		return true, w.exhaust(m, ReasonAbnormal)
	}
	return false, nil
}

// retryAfter is the wait a 429 or 503 asked for, capped at BackoffMax.
func (w *worker) retryAfter(ae *AbnormalError) time.Duration {
	if ae == nil || ae.RetryAfter <= 0 {
		return 0
	}
	return min(ae.RetryAfter, w.m.opts.BackoffMax)
}

// requeue puts messages back into ready, in offset order.
func (w *worker) requeue(ms ...*msg) {
	for _, m := range ms {
		if m.done {
			continue
		}
		i := sort.Search(len(w.ready), func(i int) bool { return w.ready[i].e.Offset >= m.e.Offset })
		w.ready = append(w.ready, nil)
		copy(w.ready[i+1:], w.ready[i:])
		w.ready[i] = m
	}
}

// showHead publishes, for the status, the attempt and the NACK state of
// the oldest unfinished message (not under OrderKey: its status lists the
// parked keys instead).
func (w *worker) showHead() {
	if w.kw != nil {
		return
	}
	for _, m := range w.win {
		if !m.done {
			w.attempt.Store(int64(m.attempts))
			w.nackResend.Store(m.nacks > 0)
			return
		}
	}
	w.attempt.Store(0)
	w.nackResend.Store(false)
}

// popDone removes the contiguous prefix of done messages from the window
// and records them as finished (w.next, w.pending); it reports whether any
// were.
func (w *worker) popDone() bool {
	if w.kw != nil {
		return w.popDoneKeys()
	}
	k := 0
	for k < len(w.win) && w.win[k].done {
		k++
	}
	if k == 0 {
		return false
	}
	w.next.Store(w.win[k-1].end)
	w.pending += k
	for _, m := range w.win[:k] {
		w.winBytes -= int64(len(m.e.Payload))
	}
	clear(w.win[:k])
	w.win = w.win[k:]
	w.showHead()
	return true
}

// advance records the finished prefix of the window and commits per the
// dispatcher's policy: EveryMessage commits whenever the prefix grows (one
// commit may cover several messages answered together), Interval when its
// count or time trigger is reached.
func (w *worker) advance() error {
	moved := w.popDone()
	p := w.d.commit
	unrec := 0
	if w.kw != nil {
		unrec = len(w.kw.unrec)
	}
	if !moved && unrec == 0 {
		return nil
	}
	due := p.Mode != Interval || // EveryMessage (or its empty form)
		p.MaxCount > 0 && w.pending+unrec >= p.MaxCount ||
		p.Interval > 0 && time.Since(w.lastCommit) >= p.Interval
	if !due {
		return nil
	}
	if moved {
		return w.commit(w.next.Load()) // records what is finished past it first
	}
	// Finished past a parked key, the checkpoint unmoved: recorded as the
	// checkpoint would be.
	if err := w.recordFinished(); err != nil {
		return err
	}
	w.lastCommit = time.Now()
	return nil
}

// flush commits the finished messages not yet committed, if any, and
// under OrderKey records those finished past the checkpoint.
func (w *worker) flush() error {
	w.popDone()
	if err := w.recordFinished(); err != nil {
		return err
	}
	if w.cp == nil || w.pending == 0 {
		return nil
	}
	return w.commit(w.next.Load())
}
