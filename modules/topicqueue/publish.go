package topicqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
)

// Message is one message to publish: its stored message JSON and, when
// the producer supplied one, its id (contract.Decoded.FromProducer), which
// the idempotent-publish window deduplicates. ID "" is never deduplicated.
type Message struct {
	Stored []byte
	ID     string
}

// Published is one message's outcome: its offset (-1 at ACCEPTED, which
// promises none), and whether it was a duplicate of a message published
// with the same producer id within the window (then nothing was stored and
// Offset is the first message's).
type Published struct {
	Offset    int64
	Duplicate bool
}

// Publish appends msgs in order with consecutive offsets, committed
// together (the duplicates left out), and answers when level is reached
// for all of them, filling out (len(msgs)). When the registry has an
// idempotent-publish window (Options.Dedup), a message whose producer id
// was published to this topic within the window is not stored: see
// package dedup for the exact rule. A duplicate answered at DURABLE waits
// until its first message is durable. Errors: those of the log's AppendBatch, for the
// whole call (nothing of it is acknowledged), and ctx.Err() while it
// waits. It is PublishNotify followed by the wait; out is only written
// before Publish returns.
func (q *TopicQueue) Publish(ctx context.Context, msgs []Message, level contract.AckLevel, out []Published) error {
	w := getWaiter(len(msgs))
	return w.wait(ctx, q.PublishNotify(ctx, msgs, level, w.out, w.notify), out)
}

// PublishNotify is Publish without the wait for level: it returns nil
// once the messages are handed to the topic's log, and done is then
// called exactly once with the outcome (on success out, len(msgs), is
// filled before), or it returns the error that refused the messages
// before anything was queued, and done is never called. The errors are
// Publish's.
//
// On a log with AppendBatchNotify (*storage.Log, the local backend) the
// messages are queued to the log's writer before PublishNotify returns,
// so the messages of consecutive calls from one goroutine get offsets in
// call order, and done is called from the writer goroutine when level is
// reached: it must not block. At ACCEPTED, and when every message is a
// duplicate, done is called before PublishNotify returns. On a log
// without AppendBatchNotify, messages without producer ids are appended
// with the log's own call, which waits for level (bounded by ctx) before
// done is called, and messages with ids by a goroutine of their own (no
// order between calls). The stored bytes of msgs are copied before it
// returns (the caller may reuse them); out must stay valid until done.
//
// It may wait before it returns, bounded by ctx: while another publish of
// the same producer id is being committed (package dedup), and for a
// duplicate at DURABLE until its first message is durable.
//
// With an Options.PublishObserver the publish is observed when done is
// called without an error (PublishObserver).
func (q *TopicQueue) PublishNotify(ctx context.Context, msgs []Message, level contract.AckLevel, out []Published, done func(error)) error {
	return q.publishNotify(ctx, msgs, level, out, done, publishStart(q.obs))
}

// publishNotify is PublishNotify, observed from start (zero without an
// observer).
func (q *TopicQueue) publishNotify(ctx context.Context, msgs []Message, level contract.AckLevel, out []Published, done func(error), start time.Time) error {
	p := getPub(q, len(msgs), level, out, done)
	p.start = start
	if err := p.begin(ctx, msgs); err != nil {
		p.free()
		return err
	}
	if len(p.payloads) == 0 { // duplicates only
		p.complete(-1, nil)
		return nil
	}
	return p.append(ctx)
}

// pub is one PublishNotify call in progress; pubPool recycles them, so a
// publish of one message allocates nothing here.
type pub struct {
	q        *TopicQueue
	level    contract.AckLevel
	res      []dedup.Result
	ids      []string
	payloads [][]byte
	out      []Published
	claim    *dedup.Claim
	done     func(error)
	// start is when the publish began, for the PublishObserver (q.obs);
	// zero without one.
	start time.Time
	// storedBefore: the log recognised the one stored message's id as one
	// it had stored before (duplicateNotifyingAppender); fill reports it.
	storedBefore bool
	// appended is complete, bound once: the log's callback.
	appended func(first int64, err error)
	// appendedDup is completeDup, bound once: the callback of a
	// duplicateNotifyingAppender.
	appendedDup func(first int64, duplicate bool, err error)
}

var pubPool sync.Pool

func init() {
	// Set here: complete puts p back in pubPool (an initialization cycle
	// in a var initializer).
	pubPool.New = func() any {
		p := new(pub)
		p.appended = p.complete
		p.appendedDup = p.completeDup
		return p
	}
}

func getPub(q *TopicQueue, n int, level contract.AckLevel, out []Published, done func(error)) *pub {
	p := pubPool.Get().(*pub)
	p.q, p.level, p.out, p.done = q, level, out, done
	p.res = slices.Grow(p.res[:0], n)[:n]
	return p
}

// free clears p and puts it back in the pool.
func (p *pub) free() {
	clear(p.ids)
	clear(p.payloads)
	p.q, p.out, p.claim, p.done = nil, nil, nil, nil
	p.storedBefore = false
	p.start = time.Time{}
	p.ids, p.payloads = p.ids[:0], p.payloads[:0]
	pubPool.Put(p)
}

// begin decides which messages are stored (the window's verdicts, or all
// of them), collects their payloads, and waits for the duplicates' first
// messages to reach level. On error nothing was queued and no claim is
// left.
func (p *pub) begin(ctx context.Context, msgs []Message) error {
	q := p.q
	if q.dd == nil || !anyID(msgs) {
		for i := range p.res {
			p.res[i] = dedup.Result{Verdict: dedup.Store, Index: i}
		}
	} else {
		for _, m := range msgs {
			p.ids = append(p.ids, m.ID)
		}
		claim, err := q.dd.Begin(ctx, p.ids, p.level, p.res)
		if err != nil {
			return err
		}
		p.claim = claim
	}
	for i, r := range p.res {
		switch {
		case r.Verdict == dedup.Store:
			p.payloads = append(p.payloads, msgs[i].Stored)
		case r.Verdict == dedup.Duplicate && p.level != contract.Accepted:
			if err := q.awaitVisible(ctx, r.Offset, p.level); err != nil {
				p.claim.Resolve(-1, err) // nothing of the call is stored
				return err
			}
		}
	}
	return nil
}

// append hands the payloads to the log: with a callback (complete) when
// the log has one, otherwise with the log's own call, which waits.
func (p *pub) append(ctx context.Context) error {
	q, level, claim := p.q, p.level, p.claim
	na, notifying := q.log.(notifyingAppender)
	if claim == nil && (level == contract.Accepted || !notifying) {
		// Nothing to report to the window: Append and AppendBatch return
		// once queued at Accepted, and wait for level otherwise.
		first, err := appendPlain(ctx, q.log, p.payloads, level)
		if err != nil {
			p.free()
			return err
		}
		p.complete(first, nil)
		return nil
	}
	payloads := p.payloads
	if !notifying {
		// A backend without callbacks: one goroutine per such publish,
		// with its own copy of the payloads (the caller reuses them, and
		// p may be freed first).
		payloads = make([][]byte, len(p.payloads))
		for i, b := range p.payloads {
			payloads[i] = bytes.Clone(b)
		}
		na = goroutineAppender{q.log}
	}
	notify := p.appended
	if level == contract.Accepted {
		// The window learns the outcome from the log once the messages
		// are stored; the caller is answered now.
		notify = claim.Resolve
	}
	var err error
	if dn, ok := q.log.(duplicateNotifyingAppender); ok && level != contract.Accepted && len(payloads) == 1 {
		err = dn.AppendBatchNotifyDuplicate(payloads, level, p.appendedDup)
	} else {
		err = na.AppendBatchNotify(payloads, level, notify)
	}
	if err != nil {
		claim.Resolve(-1, err) // refused up front: nothing was queued
		p.free()
		return err
	}
	// At Written and Durable p may be completed and reused by now.
	if level == contract.Accepted {
		p.claim = nil
		p.complete(-1, nil)
	}
	return nil
}

// appendPlain appends payloads with the log's own call: Append for one
// payload, AppendBatch for several.
func appendPlain(ctx context.Context, log contract.Log, payloads [][]byte, level contract.AckLevel) (int64, error) {
	if len(payloads) == 1 {
		return log.Append(ctx, payloads[0], level)
	}
	return log.AppendBatch(ctx, payloads, level)
}

// complete resolves the claim with the outcome, fills out and tells the
// observer on success, frees p and calls done.
func (p *pub) complete(first int64, err error) {
	p.claim.Resolve(first, err)
	if err == nil {
		p.fill(first)
		if o := p.q.obs; o != nil {
			o.ObservePublish(p.level, len(p.res), time.Since(p.start))
		}
	}
	done := p.done
	p.free()
	done(err)
}

// completeDup is complete for a duplicateNotifyingAppender: duplicate
// says the log had stored the message before.
func (p *pub) completeDup(first int64, duplicate bool, err error) {
	p.storedBefore = duplicate
	p.complete(first, err)
}

// fill writes each message's outcome to out: first is the offset of the
// first stored message (-1 at Accepted).
func (p *pub) fill(first int64) {
	out, accepted := p.out, p.level == contract.Accepted
	for i, r := range p.res {
		switch r.Verdict {
		case dedup.Store:
			out[i] = Published{Offset: -1, Duplicate: p.storedBefore}
			if !accepted {
				out[i].Offset = first + int64(r.Index)
			}
		case dedup.Duplicate:
			out[i] = Published{Offset: r.Offset, Duplicate: true}
			if accepted {
				out[i].Offset = -1
			}
		case dedup.DuplicateInCall:
			out[i] = Published{Offset: out[r.Of].Offset, Duplicate: true}
		}
	}
}

// waiter turns PublishNotify into a call that waits (Publish,
// PublishMessages); waiterPool recycles those that were answered.
type waiter struct {
	ch     chan error // buffered(1): done never blocks
	out    []Published
	notify func(error) // done, bound once
}

var waiterPool = sync.Pool{New: func() any {
	w := &waiter{ch: make(chan error, 1)}
	w.notify = w.done
	return w
}}

func getWaiter(n int) *waiter {
	w := waiterPool.Get().(*waiter)
	w.out = slices.Grow(w.out[:0], n)[:n]
	return w
}

func (w *waiter) done(err error) { w.ch <- err }

// wait returns err when the publish was refused, otherwise waits for its
// outcome and copies it to out. When ctx ends first it returns ctx.Err()
// and leaves w to the pending callback (w.out, not out, receives it).
func (w *waiter) wait(ctx context.Context, err error, out []Published) error {
	if err == nil {
		select {
		case err = <-w.ch:
			copy(out, w.out)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	waiterPool.Put(w)
	return err
}

func anyID(msgs []Message) bool {
	for _, m := range msgs {
		if m.ID != "" {
			return true
		}
	}
	return false
}

// notifyingAppender is a log that reports an append's outcome to a
// callback (*storage.Log): the window learns what became of a publish
// whose caller stopped waiting, or never waits (ACCEPTED).
type notifyingAppender interface {
	AppendBatchNotify(payloads [][]byte, level contract.AckLevel, notify func(first int64, err error)) error
}

// duplicateNotifyingAppender is a log that recognises message ids itself,
// across every broker writing to it (the JetStream backend: the stream's
// duplicate window on Nats-Msg-Id). notify also says whether the log had
// stored the message before (duplicate: nothing was stored now, first is
// the earlier message's offset), so that a retry through another broker,
// which this broker's own window has not seen, is answered
// "duplicate": true too. The registry uses it for single messages with
// producer ids at WRITTEN and DURABLE; the rest goes through
// AppendBatchNotify.
type duplicateNotifyingAppender interface {
	AppendBatchNotifyDuplicate(payloads [][]byte, level contract.AckLevel, notify func(first int64, duplicate bool, err error)) error
}

// goroutineAppender gives any contract.Log the callback form.
type goroutineAppender struct{ log contract.Log }

func (g goroutineAppender) AppendBatchNotify(payloads [][]byte, level contract.AckLevel, notify func(int64, error)) error {
	go func() {
		// At Accepted the outcome is only known once the messages are
		// stored: wait for Written.
		first, err := g.log.AppendBatch(context.Background(), payloads, max(level, contract.Written))
		notify(first, err)
	}()
	return nil
}

// awaitVisible waits until the message at off reached level: at Written
// an offset the window remembers was written; at Durable it waits for the
// high watermark to pass it. An offset not yet durable in a log that has
// failed may be lost (the reopen cuts it): the duplicate is refused with
// the log's failure, as a new publish would be.
func (q *TopicQueue) awaitVisible(ctx context.Context, off int64, level contract.AckLevel) error {
	if off >= q.log.HighWatermark() {
		if f, ok := q.log.(contract.FailureReporter); ok {
			if err := f.Err(); err != nil {
				return err
			}
		}
	}
	if level != contract.Durable {
		return nil
	}
	for q.log.HighWatermark() <= off {
		ch := q.log.Notify(off)
		if q.log.HighWatermark() > off {
			return nil
		}
		select {
		case <-ch:
			if q.log.HighWatermark() <= off {
				return fmt.Errorf("duplicate of offset %d of topic %s: %w", off, q.name, contract.ErrClosed)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// maxPublishRetries bounds how often Publish moves on to a topic created
// anew after the one it appended to was deleted under it.
const maxPublishRetries = 3

// Publish appends payloads (stored message JSONs without producer ids:
// never deduplicated) to topic name as PublishMessages does, and returns
// the first offset (-1 for Accepted).
func (r *Registry) Publish(ctx context.Context, name string, payloads [][]byte, level contract.AckLevel) (*TopicQueue, int64, error) {
	msgs := make([]Message, len(payloads))
	for i, p := range payloads {
		msgs[i].Stored = p
	}
	out := make([]Published, len(payloads))
	q, err := r.PublishMessages(ctx, name, msgs, level, out)
	if err != nil {
		return q, -1, err
	}
	return q, out[0].Offset, nil
}

// PublishMessages publishes msgs to topic name as TopicQueue.Publish does,
// creating the topic when needed (GetOrCreate). When the topic is deleted
// between the lookup and the append, the append is refused by the closed
// log and PublishMessages retries on the topic created anew, so a publish
// racing with a deletion either lands before it (and is deleted with it)
// or in the new topic — never acknowledged into the deleted one. It
// returns the topic it appended to. Errors: those of GetOrCreate and
// TopicQueue.Publish. It is PublishMessagesNotify followed by the wait.
func (r *Registry) PublishMessages(ctx context.Context, name string, msgs []Message, level contract.AckLevel, out []Published) (*TopicQueue, error) {
	w := getWaiter(len(msgs))
	q, err := r.PublishMessagesNotify(ctx, name, msgs, level, w.out, w.notify)
	return q, w.wait(ctx, err, out)
}

// PublishMessagesNotify is PublishMessages without the wait for level, as
// TopicQueue.PublishNotify: nil when the messages were handed to the log
// (done is then called exactly once with the outcome, out filled first
// when it is nil), or the error that refused them (done is never called).
// The topic is created when needed and, when it was deleted under the
// publish, created anew (PublishMessages). On the local backend the
// messages of consecutive calls from one goroutine to one topic get
// offsets in call order. It returns the topic it handed them to.
//
// It is the one entry of every transport's publishes (HTTP, batches, the
// line protocol, scheduled messages entering their topic) and of the
// broker's own (dead letters, redrives: Publish): with an
// Options.PublishObserver each successful call is observed from its start
// here to its outcome (PublishObserver).
func (r *Registry) PublishMessagesNotify(ctx context.Context, name string, msgs []Message, level contract.AckLevel, out []Published, done func(error)) (*TopicQueue, error) {
	start := publishStart(r.opts.PublishObserver)
	for i := 0; ; i++ {
		q, err := r.GetOrCreate(name)
		if err != nil {
			return nil, err
		}
		err = q.publishNotify(ctx, msgs, level, out, done, start)
		if err != nil && q.Deleted() && errors.Is(err, contract.ErrClosed) && i < maxPublishRetries {
			continue
		}
		return q, err
	}
}
