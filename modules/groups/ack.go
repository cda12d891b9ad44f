package groups

import (
	"errors"
	"fmt"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Ack acknowledges every offset up to and including offset for session: it
// commits offset+1 to the group's checkpoint, fsynced, and returns the new
// committed offset only after the fsync (as in the log-queue study: the
// committed offset is answered ACKED only after it is persisted). It renews
// the lease.
//
//   - offset >= the session's delivered-up-to offset: ErrNotDelivered,
//     nothing is committed;
//   - offset+1 <= the committed offset (including any negative offset): a
//     no-op returning the current committed offset, which never moves back;
//   - offset below the topic's log start offset (retention deleted it,
//     and perhaps everything the session was delivered after it): the
//     start offset is committed, never less, so the committed offset and
//     the lag stay meaningful — nothing readable is skipped by it — and
//     the session's next fetch starts there;
//   - a session that does not hold the group (expired, released, unknown):
//     ErrSessionExpired, so a stale consumer can never commit.
//
// Other errors: ErrUnknownTopic, ErrInvalidName, ErrNameTaken, or the
// checkpoint's write/fsync error (the committed offset is then unknown; it
// is never reported higher than what was fsynced).
func (c *Coordinator) Ack(topic, group, session string, offset int64) (int64, error) {
	g, err := c.tracked(topic, group, session)
	if err != nil {
		return 0, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l, err := c.holderLocked(g, session, time.Now())
	if err != nil {
		return 0, err
	}
	l.expires = time.Now().Add(c.opts.LeaseTimeout)
	if offset >= l.next {
		return 0, fmt.Errorf("%w: offset %d of topic %s was not delivered to this session of group %s (delivered up to %d, exclusive)",
			ErrNotDelivered, offset, topic, group, l.next)
	}
	committed := g.cp.Offset()
	if offset < committed { // offset+1 <= committed, without overflow
		return committed, nil
	}
	// Retention may have deleted offset and what follows it, even past
	// what this session was delivered: commit at least the log start
	// offset (nothing readable lies below it), and deliver on from there.
	next := max(offset+1, g.topic.StartOffset())
	if next <= committed {
		return committed, nil
	}
	if err := g.cp.Commit(next); err != nil {
		if errors.Is(err, contract.ErrStaleCommit) {
			// Another node's session holds the group now (this one's
			// cluster lease was taken over): the session is over.
			c.endLocked(g, l)
			return 0, fmt.Errorf("%w: group %s of topic %s is held through another broker node now: %v", ErrSessionExpired, group, topic, err)
		}
		return 0, fmt.Errorf("commit group %s of topic %s at %d: %w", group, topic, next, err)
	}
	g.active.Store(time.Now().UnixNano())
	l.expires = time.Now().Add(c.opts.LeaseTimeout)
	l.next = max(l.next, next)
	return next, nil
}

// Committed returns the durable committed offset of group on topic (0 for
// a group that never committed). Errors as Release.
func (c *Coordinator) Committed(topic, group string) (int64, error) {
	g, err := c.tracked(topic, group, "")
	if errors.Is(err, ErrSessionExpired) {
		// Not tracked: read what is stored without tracking the group.
		q, err := c.lookup(topic, group)
		if err != nil {
			return 0, err
		}
		cp, err := q.Checkpoint(group)
		if err != nil {
			return 0, fmt.Errorf("open group %s of topic %s: %w", group, topic, err)
		}
		return cp.Offset(), nil
	}
	if err != nil {
		return 0, err
	}
	return g.cp.Offset(), nil
}
