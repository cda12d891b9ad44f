package topicqueue

import (
	"context"
	"errors"
	"fmt"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/storage"
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
// until its first message is durable. Errors: those of Offer, for the
// whole call (nothing of it is acknowledged), and ctx.Err() while it
// waits.
func (q *TopicQueue) Publish(ctx context.Context, msgs []Message, level storage.AckLevel, out []Published) error {
	if q.dd == nil || !anyID(msgs) {
		return q.publishPlain(ctx, msgs, level, out)
	}
	var one [1]dedup.Result
	res, ids := one[:], []string{msgs[0].ID}
	if len(msgs) > 1 {
		res, ids = make([]dedup.Result, len(msgs)), make([]string, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
	}
	claim, err := q.dd.Begin(ctx, ids, level, res)
	if err != nil {
		return err
	}
	var payloads [][]byte
	for i, r := range res {
		if r.Verdict == dedup.Store {
			payloads = append(payloads, msgs[i].Stored)
		}
	}
	first := int64(-1)
	if len(payloads) > 0 {
		if first, err = q.appendClaimed(ctx, payloads, level, claim); err != nil {
			return err
		}
	}
	for i, r := range res {
		switch r.Verdict {
		case dedup.Store:
			out[i] = Published{Offset: -1}
			if level != storage.Accepted {
				out[i].Offset = first + int64(r.Index)
			}
		case dedup.Duplicate:
			out[i] = Published{Offset: r.Offset, Duplicate: true}
			if level == storage.Accepted {
				out[i].Offset = -1
			} else if err := q.awaitVisible(ctx, r.Offset, level); err != nil {
				return err
			}
		case dedup.DuplicateInCall:
			out[i] = Published{Offset: out[r.Of].Offset, Duplicate: true}
		}
	}
	return nil
}

func anyID(msgs []Message) bool {
	for _, m := range msgs {
		if m.ID != "" {
			return true
		}
	}
	return false
}

// publishPlain appends msgs without deduplication.
func (q *TopicQueue) publishPlain(ctx context.Context, msgs []Message, level storage.AckLevel, out []Published) error {
	var first int64
	var err error
	if len(msgs) == 1 {
		first, err = q.log.Append(ctx, msgs[0].Stored, level)
	} else {
		payloads := make([][]byte, len(msgs))
		for i, m := range msgs {
			payloads[i] = m.Stored
		}
		first, err = q.log.AppendBatch(ctx, payloads, level)
	}
	if err != nil {
		return err
	}
	for i := range msgs {
		out[i] = Published{Offset: -1}
		if level != storage.Accepted {
			out[i].Offset = first + int64(i)
		}
	}
	return nil
}

// notifyingAppender is a log that reports an append's outcome to a
// callback (*storage.Log): the window learns what became of a publish
// whose caller stopped waiting, or never waits (ACCEPTED).
type notifyingAppender interface {
	AppendBatchNotify(payloads [][]byte, level storage.AckLevel, notify func(first int64, err error)) error
}

// appendClaimed appends payloads and resolves claim (nil: nothing claimed)
// with the outcome, even when ctx ends first: the window then still learns
// whether the messages were stored. It returns the first offset (-1 at
// Accepted).
func (q *TopicQueue) appendClaimed(ctx context.Context, payloads [][]byte, level storage.AckLevel, claim *dedup.Claim) (int64, error) {
	if claim == nil {
		return q.log.AppendBatch(ctx, payloads, level)
	}
	na, ok := q.log.(notifyingAppender)
	if !ok {
		// A backend without callbacks: one goroutine per such publish,
		// with its own copy of the payloads (the caller reuses them).
		cp := make([][]byte, len(payloads))
		for i, p := range payloads {
			cp[i] = append([]byte(nil), p...)
		}
		na = goroutineAppender{q.log}
		payloads = cp
	}
	if err := na.AppendBatchNotify(payloads, level, claim.Resolve); err != nil {
		claim.Resolve(-1, err) // refused up front: nothing was queued
		return -1, err
	}
	if level == storage.Accepted {
		return -1, nil
	}
	select {
	case <-claim.Done():
		return claim.Outcome()
	case <-ctx.Done():
		return -1, ctx.Err()
	}
}

// goroutineAppender gives any contract.Log the callback form.
type goroutineAppender struct{ log contract.Log }

func (g goroutineAppender) AppendBatchNotify(payloads [][]byte, level storage.AckLevel, notify func(int64, error)) error {
	go func() {
		// At Accepted the outcome is only known once the messages are
		// stored: wait for Written.
		first, err := g.log.AppendBatch(context.Background(), payloads, max(level, storage.Written))
		notify(first, err)
	}()
	return nil
}

// awaitVisible waits until the message at off reached level: at Written
// an offset the window remembers was written; at Durable it waits for the
// high watermark to pass it. An offset not yet durable in a log that has
// failed may be lost (the reopen cuts it): the duplicate is refused with
// the log's failure, as a new publish would be.
func (q *TopicQueue) awaitVisible(ctx context.Context, off int64, level storage.AckLevel) error {
	if off >= q.log.HighWatermark() {
		if f, ok := q.log.(interface{ Err() error }); ok {
			if err := f.Err(); err != nil {
				return err
			}
		}
	}
	if level != storage.Durable {
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
				return fmt.Errorf("duplicate of offset %d of topic %s: %w", off, q.name, storage.ErrClosed)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// PublishMessages publishes msgs to topic name as TopicQueue.Publish does,
// creating the topic when needed (GetOrCreate). When the topic is deleted
// between the lookup and the append, the append is refused by the closed
// log and PublishMessages retries on the topic created anew, so a publish
// racing with a deletion either lands before it (and is deleted with it)
// or in the new topic — never acknowledged into the deleted one. It
// returns the topic it appended to. Errors: those of GetOrCreate and
// TopicQueue.Publish.
func (r *Registry) PublishMessages(ctx context.Context, name string, msgs []Message, level storage.AckLevel, out []Published) (*TopicQueue, error) {
	for i := 0; ; i++ {
		q, err := r.GetOrCreate(name)
		if err != nil {
			return nil, err
		}
		err = q.Publish(ctx, msgs, level, out)
		if err != nil && q.Deleted() && errors.Is(err, storage.ErrClosed) && i < maxPublishRetries {
			continue
		}
		return q, err
	}
}
