package groups

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Batch is the result of a Fetch.
type Batch struct {
	// Entries are consecutive-offset messages below the high watermark
	// (gaps only where a corrupt entry was skipped); empty after a wait
	// with nothing new.
	Entries []contract.Entry
	// Committed is the group's durable committed offset: the next offset
	// not yet acknowledged.
	Committed int64
	// Next is the session's delivered-up-to offset after this fetch: where
	// its next fetch starts.
	Next int64
	// Incarnation is the topic's incarnation id (TopicQueue.Incarnation):
	// the offsets are offsets of this incarnation of the topic.
	Incarnation string

	// Shared: the group is shared; Next is then the next offset the group
	// reads from the log, and Deliveries holds, per entry, how many
	// times it has been handed out (this time included).
	Shared     bool
	Deliveries []uint32

	// held is what the entries took from the coordinator's budget
	// (Options.Budget); Release returns it.
	held   int64
	budget *contract.Budget
}

// Release returns the bytes of Entries to the in-flight budget
// (Options.Budget). Call it once the reply holding them has been written
// (or abandoned), on every path: until then they count against
// mmmq.broker.memory.max-inflight-bytes. Entries must not be used after.
// Calling it again, or on an empty Batch, does nothing.
func (b *Batch) Release() {
	b.budget.Release(b.held)
	b.held, b.Entries = 0, nil
}

// Fetch returns up to limit entries (clamped to 1..MaxFetch, to about
// MaxFetchBytes of payload, and to what fits in Options.Budget) for session, starting at its delivered-up-to
// offset (a new session's is the committed offset), all below the topic's
// high watermark, and marks them delivered. When there is nothing to deliver
// it waits up to wait (clamped to 0..MaxWait) for a publish, without polling
// (TopicQueue.Notify), and returns an empty Batch when the wait ends (as in
// the log-queue study: an empty fetch returns 0 messages after the wait, not
// an error). A waiting fetch holds the lease; the lease is renewed when it
// returns.
//
// The entries' payload bytes are taken from Options.Budget until the
// caller calls Batch.Release. When the budget cannot hold all of them the
// batch is shorter (at least one entry); when it cannot hold even the first
// the error wraps contract.ErrOverloaded, and nothing is delivered: the
// session does not move.
//
// Errors: contract.ErrOverloaded, ErrSessionExpired (also when the session was released while the
// fetch waited), ErrUnknownTopic, ErrInvalidName, ErrNameTaken, ctx.Err()
// when ctx ends during the wait, contract.ErrClosed when the topic closes
// during the wait, or a read error. A fetch after Drain does not wait.
func (c *Coordinator) Fetch(ctx context.Context, topic, group, session string, limit int, wait time.Duration) (Batch, error) {
	g, err := c.group(topic, group)
	if err != nil {
		return Batch{}, err
	}
	limit = min(max(limit, 1), c.opts.MaxFetch)
	wait = min(max(wait, 0), c.opts.MaxWait)
	g.mu.Lock()
	shared := g.shared != nil
	g.mu.Unlock()
	if shared {
		return c.fetchShared(ctx, g, session, limit, wait)
	}

	l, unhold, err := c.holdForFetch(g, session)
	if err != nil {
		return Batch{}, err
	}
	defer unhold()
	g.active.Store(time.Now().UnixNano()) // a fetch is activity (keep-unconsumed)

	timeout, stopTimeout := longPoll(wait)
	defer stopTimeout()
	for {
		g.mu.Lock()
		if g.lease != l {
			g.mu.Unlock()
			return Batch{}, fmt.Errorf("%w: session %q lost group %s of topic %s while fetching (released)",
				ErrSessionExpired, session, group, topic)
		}
		pos := l.next
		committed := g.cp.Offset()
		if g.topic.HighWatermark() > pos {
			entries, held, err := c.readLocked(g, l, limit)
			b := Batch{Entries: entries, Committed: committed, Next: l.next, Incarnation: g.topic.Incarnation(), held: held, budget: c.opts.Budget}
			progressed := l.next > pos
			g.mu.Unlock()
			if err != nil {
				b.Release()
				return Batch{}, err
			}
			if len(entries) > 0 || !progressed {
				return b, nil
			}
			continue // only corrupt entries were skipped: look again
		}
		g.mu.Unlock()
		if timeout == nil {
			return Batch{Committed: committed, Next: pos, Incarnation: g.topic.Incarnation()}, nil
		}
		select {
		case <-g.topic.Notify(pos):
			// The high watermark never decreases: a wake-up without new
			// data means the topic closed. A deletion drops the session
			// before it closes the log, and both wake this select: the
			// session's loss is the answer then (the loop reports it).
			if g.topic.HighWatermark() <= pos {
				g.mu.Lock()
				lost := g.lease != l
				g.mu.Unlock()
				if !lost {
					return Batch{}, fmt.Errorf("fetch group %s of topic %s: %w", group, topic, contract.ErrClosed)
				}
			}
		case <-timeout:
			return Batch{Committed: committed, Next: pos, Incarnation: g.topic.Incarnation()}, nil
		case <-c.drained:
			return Batch{Committed: committed, Next: pos, Incarnation: g.topic.Incarnation()}, nil
		case <-l.gone: // released while waiting: the loop reports it
		case <-ctx.Done():
			return Batch{}, ctx.Err()
		}
	}
}

// Seek moves session's delivery position back to from, so that messages
// whose fetch response was lost (a client timeout as a long poll returned, a
// reset connection) are delivered again instead of being acknowledged
// unseen by a later ack. from must lie between the committed offset and the
// session's delivered-up-to offset (inclusive); a client sends the offset it
// expects next. Errors: ErrNotDelivered when from is beyond what was
// delivered, ErrInvalidOffset when it is below the committed offset,
// ErrSessionExpired, and the errors of Fetch.
func (c *Coordinator) Seek(topic, group, session string, from int64) error {
	g, err := c.group(topic, group)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l, err := c.holderLocked(g, session, time.Now())
	if err != nil {
		return err
	}
	committed := g.cp.Offset()
	switch {
	case from < g.topic.StartOffset() && from >= committed:
		// Retention deleted it: 410 OFFSET_EXPIRED with the start offset.
		return fmt.Errorf("seek group %s: %w", group, &contract.OffsetExpiredError{Topic: topic, Offset: from, StartOffset: g.topic.StartOffset()})
	case from > l.next:
		return fmt.Errorf("%w: from=%d but group %s of topic %s was delivered up to %d", ErrNotDelivered, from, group, topic, l.next)
	case from < committed:
		return fmt.Errorf("%w: from=%d is below the committed offset %d of group %s of topic %s", ErrInvalidOffset, from, committed, group, topic)
	}
	l.next = from
	return nil
}

// readLocked reads up to limit entries from l.next and advances l.next past
// what it returns and past skipped corrupt entries. The payload bytes of
// what it returns are taken from the budget (held). When a batch read does
// not fit, reading goes on one entry at a time; the first entry that does
// not fit ends the batch, or, when nothing was taken yet, the error wraps
// contract.ErrOverloaded with l.next unchanged. g.mu is held.
func (c *Coordinator) readLocked(g *group, l *lease, limit int) (out []contract.Entry, held int64, err error) {
	size := 0
	hw := g.topic.HighWatermark()
	now := time.Now()
	one := false // the last batch did not fit: read a single entry
	for len(out) < limit && l.next < hw && size < c.opts.MaxFetchBytes {
		want := limit - len(out)
		if one {
			want = 1
		}
		es, err := g.topic.ReadBatch(l.next, want)
		if n := payloadBytes(es); c.opts.Budget.TryAcquire(n) {
			held += n
		} else {
			switch {
			case len(es) > 1:
				// The span is dropped; go on entry by entry, each read
				// into its own buffer, so what is kept is what is counted.
				one = true
				continue
			case len(out) > 0:
				return out, held, nil // a smaller batch; the rest stays undelivered
			default:
				return nil, 0, c.opts.Budget.Overloaded(fmt.Sprintf("fetch of group %s of topic %s at offset %d", g.name, g.topic.Name(), l.next), n)
			}
		}
		for _, e := range es {
			if e.Offset != l.next {
				return out, held, fmt.Errorf("read topic %s: got offset %d, want %d", g.topic.Name(), e.Offset, l.next)
			}
			l.next++
			if c.expiredExclusive(g, e, now) {
				// Passed over as a corrupt entry is: never handed out.
				c.opts.Budget.Release(int64(len(e.Payload)))
				held -= int64(len(e.Payload))
				continue
			}
			out = append(out, e)
			size += len(e.Payload)
		}
		var ce *contract.CorruptionError
		var oe *contract.OffsetExpiredError
		switch {
		case err == nil && len(es) > 0:
		case errors.As(err, &oe) && oe.StartOffset > l.next:
			// Retention deleted what the group had not read: go on from
			// the log start offset, counted and warned about once per
			// offset (a later session of the group starts below it again
			// until something is committed).
			if n := oe.StartOffset - max(l.next, g.expiredTo.Load()); n > 0 {
				c.expired.Add(uint64(n))
				g.expiredTo.Store(oe.StartOffset)
				c.log.Warn("messages deleted by retention before this consumer group read them; continuing from the log start offset",
					zap.String("topic", g.topic.Name()), zap.String("group", g.name),
					zap.Int64("offset", l.next), zap.Int64("start-offset", oe.StartOffset), zap.Int64("never-delivered", n))
			}
			l.next = oe.StartOffset
			hw = g.topic.HighWatermark()
		case errors.As(err, &ce) && ce.Offset == l.next:
			// Integrity check (the original Java mmmq's rule): an entry whose
			// CRC does not match is logged and skipped alone; delivery goes on.
			c.log.Error("corrupt entry skipped; it is not delivered to the consumer group",
				zap.String("topic", g.topic.Name()), zap.String("group", g.name),
				zap.Int64("offset", ce.Offset), zap.String("file", ce.File), zap.Int64("pos", ce.Pos),
				zap.String("reason", ce.Reason))
			l.next++
		default:
			if err == nil {
				err = fmt.Errorf("empty read at offset %d below the high watermark %d", l.next, hw)
			}
			if len(out) > 0 {
				// Deliver what was read; the next fetch meets the error again.
				c.log.Warn("fetch stopped early on a read error", zap.String("topic", g.topic.Name()),
					zap.String("group", g.name), zap.Int64("offset", l.next), zap.Error(err))
				return out, held, nil
			}
			return nil, held, fmt.Errorf("fetch group %s of topic %s at offset %d: %w", g.name, g.topic.Name(), l.next, err)
		}
	}
	return out, held, nil
}

// payloadBytes is the payload bytes of es.
func payloadBytes(es []contract.Entry) int64 {
	var n int64
	for _, e := range es {
		n += int64(len(e.Payload))
	}
	return n
}

// longPoll is the channel a fetch waiting up to wait selects on (nil, never
// ready, for no wait) and the function that stops its timer.
func longPoll(wait time.Duration) (<-chan time.Time, func()) {
	if wait <= 0 {
		return nil, func() {}
	}
	t := time.NewTimer(wait)
	return t.C, func() { t.Stop() }
}
