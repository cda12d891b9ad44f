package groups

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Expired messages.
//
// A message published with a ttl carries "expiresAt" (Unix ms) in its
// stored JSON. A consumer group compares it with its clock when it would
// hand the message out, and never hands out one at or past it:
//
//   - exclusive: passed over as a corrupt entry is, counted once per
//     offset; the committed offset moves past it with the session's next
//     ack of a later offset (a group whose remaining messages all expired
//     keeps its committed offset until something later is acknowledged).
//   - shared: finished in its place (the committed offset moves over it as
//     over an acknowledged message; its key's next message becomes ready),
//     after an append to the group's dead-letter topic with
//     mmmq-dl-reason "expired" when mmmq.broker.groups.expired is
//     "dead-letter".
//
// The message stays in the log for every other reader.

// Values of mmmq.broker.groups.expired (Config.Expired).
const (
	// ExpiredSkip passes over expired messages, counted. The default.
	ExpiredSkip = "skip"
	// ExpiredDeadLetter appends a shared group's expired messages to its
	// dead-letter topic first (exclusive groups have none: they skip).
	ExpiredDeadLetter = "dead-letter"
)

// MessagesExpired is the number of messages consumer groups passed over
// because they were past their expiresAt, since start
// (mmmq_messages_expired_total{kind="group"}).
func (c *Coordinator) MessagesExpired() uint64 { return c.ttlExpired.Load() }

// expiredExclusive reports whether e, read by exclusive group g at now,
// has expired; the first time an offset is found so it is counted and
// logged. g.mu is held.
func (c *Coordinator) expiredExclusive(g *group, e contract.Entry, now time.Time) bool {
	exp := contract.MessageExpiresAt(e.Payload)
	if !contract.Expired(exp, now) {
		return false
	}
	if e.Offset >= g.ttlExpiredTo {
		g.ttlExpiredTo = e.Offset + 1
		c.ttlExpired.Add(1)
		c.log.Debug("message expired; it is not delivered to the consumer group",
			zap.String("topic", g.topic.Name()), zap.String("group", g.name),
			zap.Int64("offset", e.Offset), zap.Int64("expires-at", exp))
	}
	return true
}

// expireSharedLocked is called for e, about to be handed out by shared
// group g at now: when it has expired it is dead-lettered if
// mmmq.broker.groups.expired says so, and expired reports true (the
// caller finishes it, and counts it once finished). An error of the dead
// letter leaves it unfinished.
func (c *Coordinator) expireSharedLocked(ctx context.Context, g *group, e contract.Entry, now time.Time) (expired bool, err error) {
	exp := contract.MessageExpiresAt(e.Payload)
	if !contract.Expired(exp, now) {
		return false, nil
	}
	if c.opts.Expired != ExpiredDeadLetter {
		c.log.Debug("message expired; the shared consumer group skips it",
			zap.String("topic", g.topic.Name()), zap.String("group", g.name),
			zap.Int64("offset", e.Offset), zap.Int64("expires-at", exp))
		return true, nil
	}
	dl, err := c.deadLetterTopic(g.name)
	if err != nil {
		return true, err
	}
	if c.opts.Publisher == nil {
		return true, fmt.Errorf("dead-letter expired offset %d of group %s of topic %s: %w", e.Offset, g.name, g.topic.Name(), dispatcher.ErrNoPublisher)
	}
	count := int(g.shared.counts[e.Offset])
	stored := dispatcher.GroupDeadLetterFor(e, g.topic.Name(), g.name, dl, count, dispatcher.ReasonExpired, false)
	off, err := c.opts.Publisher.PublishDurable(ctx, dl, [][]byte{stored})
	if errors.Is(err, contract.ErrRecordTooLarge) {
		stored = dispatcher.GroupDeadLetterFor(e, g.topic.Name(), g.name, dl, count, dispatcher.ReasonExpired, true)
		off, err = c.opts.Publisher.PublishDurable(ctx, dl, [][]byte{stored})
	}
	if err != nil {
		return true, fmt.Errorf("dead-letter expired offset %d of group %s of topic %s to %s: %w", e.Offset, g.name, g.topic.Name(), dl, err)
	}
	g.shared.deadLettered++
	c.log.Info("expired message dead-lettered by a shared consumer group",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name), zap.Int64("offset", e.Offset),
		zap.Int64("expires-at", exp), zap.String("dead-letter-topic", dl), zap.Int64("dead-letter-offset", off))
	return true, nil
}
