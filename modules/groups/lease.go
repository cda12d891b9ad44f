package groups

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"go.uber.org/zap"
)

// lease is one session's hold on a group.
type lease struct {
	id       string
	expires  time.Time
	next     int64 // delivered up to (exclusive): the next offset to fetch
	fetching int   // fetches in progress; a waiting fetch holds the lease
	// gone is closed when the lease is released, so that a fetch waiting
	// in a long poll ends at once instead of at its wait timeout.
	gone chan struct{}
}

func (c *Coordinator) janitor(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.opts.JanitorInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c.expireAll(now)
		}
	}
}

func (c *Coordinator) expireAll(now time.Time) {
	c.mu.Lock()
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.mu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		c.expireLocked(g, now)
		g.mu.Unlock()
	}
}

// expireLocked releases g's lease when it has expired and no fetch is in
// progress.
func (c *Coordinator) expireLocked(g *group, now time.Time) {
	l := g.lease
	if l == nil || l.fetching > 0 || now.Before(l.expires) {
		return
	}
	g.lease = nil
	close(l.gone)
	c.log.Info("consumer group lease expired; unacknowledged messages will be redelivered from the committed offset",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name),
		zap.Int64("committed", g.cp.Offset()), zap.Int64("delivered-up-to", l.next))
}

// holderLocked returns the lease of session on g, or ErrSessionExpired.
func (c *Coordinator) holderLocked(g *group, session string, now time.Time) (*lease, error) {
	c.expireLocked(g, now)
	if l := g.lease; l != nil && session != "" && l.id == session {
		return l, nil
	}
	return nil, fmt.Errorf("%w: session %q does not hold group %s of topic %s (lease expired, released, or unknown)",
		ErrSessionExpired, session, g.name, g.topic.Name())
}

// holdForFetch marks a fetch in progress on session's lease of g, so that
// the lease does not expire while the fetch waits. It returns the lease and
// the function that ends the hold and renews the lease (when g still has
// it); the error is ErrSessionExpired when session does not hold g.
func (c *Coordinator) holdForFetch(g *group, session string) (*lease, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, err := c.holderLocked(g, session, time.Now())
	if err != nil {
		return nil, nil, err
	}
	l.fetching++
	unhold := func() {
		g.mu.Lock()
		l.fetching--
		if g.lease == l {
			l.expires = time.Now().Add(c.opts.LeaseTimeout)
		}
		g.mu.Unlock()
	}
	return l, unhold, nil
}

// leaseLeft is how long l holds its group from now unless renewed. A
// waiting fetch holds the lease and renews it when it returns: the group
// is then busy for at least another lease.
func (c *Coordinator) leaseLeft(l *lease, now time.Time) time.Duration {
	left := max(l.expires.Sub(now), 0)
	if l.fetching > 0 {
		left = max(left, c.opts.LeaseTimeout)
	}
	return left
}

// Acquire starts a session on group of topic and returns its id (32 hex
// digits). Its first Fetch starts at the committed offset (0 for a new
// group). Errors: ErrGroupBusy while another session's lease is live,
// ErrUnknownTopic, ErrInvalidName, ErrNameTaken, or a checkpoint open error.
func (c *Coordinator) Acquire(topic, group string) (string, error) {
	g, err := c.group(topic, group)
	if err != nil {
		return "", err
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	c.expireLocked(g, now)
	if l := g.lease; l != nil {
		return "", &BusyError{Topic: topic, Group: group, LeaseLeft: c.leaseLeft(l, now)}
	}

	id := newSessionID()
	g.lease = &lease{id: id, expires: now.Add(c.opts.LeaseTimeout), next: g.cp.Offset(), gone: make(chan struct{})}
	return id, nil
}

// Release ends session's hold on group of topic: the next session starts at
// the committed offset, so unacknowledged messages are redelivered
// (at-least-once). It reports whether session held the group; releasing a
// session that does not hold it changes nothing. Errors: ErrUnknownTopic,
// ErrInvalidName, ErrNameTaken.
func (c *Coordinator) Release(topic, group, session string) (bool, error) {
	g, err := c.group(topic, group)
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	l := g.lease
	if l == nil || session == "" || l.id != session {
		return false, nil
	}
	g.lease = nil
	close(l.gone)
	c.log.Info("consumer group released; unacknowledged messages will be redelivered from the committed offset",
		zap.String("topic", topic), zap.String("group", group),
		zap.Int64("committed", g.cp.Offset()), zap.Int64("delivered-up-to", l.next))
	return true, nil
}
func newSessionID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("groups: crypto/rand: %v", err)) // never happens on supported platforms
	}
	return hex.EncodeToString(b[:])
}
