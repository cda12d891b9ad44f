package groups

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
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
	// work is the group's lease in a cluster store (one store shared by several broker nodes)
	// (nil with the local backend): while this session lives, the other
	// nodes answer GROUP_BUSY; it is given up with the session.
	work contract.WorkLease
}

// endLocked ends l, g's session: the group is free again (on every node
// when it held a cluster lease).
func (c *Coordinator) endLocked(g *group, l *lease) {
	g.lease = nil
	close(l.gone)
	if l.work != nil {
		if err := l.work.Release(); err != nil {
			c.log.Warn("release consumer group lease", zap.String("topic", g.topic.Name()), zap.String("group", g.name), zap.Error(err))
		}
	}
}

// watchWork ends l when its cluster lease is lost (not renewed in time):
// the session's next request gets SESSION_EXPIRED, as after a local
// expiry, and another node may hold the group.
func (c *Coordinator) watchWork(g *group, l *lease) {
	defer c.watchers.Done()
	select {
	case <-l.work.Lost():
	case <-l.gone:
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lease == l {
		c.endLocked(g, l)
		c.log.Warn("consumer group lease lost in the cluster store; the session ends", zap.String("topic", g.topic.Name()),
			zap.String("group", g.name), zap.Int64("delivered-up-to", l.next))
	}
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
	for _, g := range c.allGroups() {
		g.mu.Lock()
		c.expireLocked(g, now)
		if g.shared != nil {
			c.expireShared(g, now)
		}
		g.mu.Unlock()
	}
}

// allGroups is every (topic, group) state opened so far, in no order.
func (c *Coordinator) allGroups() []*group {
	c.mu.Lock()
	defer c.mu.Unlock()
	gs := make([]*group, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	return gs
}

// expireLocked releases g's lease when it has expired and no fetch is in
// progress.
func (c *Coordinator) expireLocked(g *group, now time.Time) {
	l := g.lease
	if l == nil || l.fetching > 0 || now.Before(l.expires) {
		return
	}
	c.endLocked(g, l)
	c.log.Info("consumer group lease expired; unacknowledged messages will be redelivered from the committed offset",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name),
		zap.Int64("committed", g.cp.Offset()), zap.Int64("delivered-up-to", l.next))
}

// holderLocked returns the lease of session on g, or ErrSessionExpired.
func (c *Coordinator) holderLocked(g *group, session string, now time.Time) (*lease, error) {
	if g.shared != nil {
		return nil, fmt.Errorf("%w: group %s of topic %s is shared: acknowledge per message with {\"offsets\": [...]} (a cumulative ack or from= is for exclusive groups)",
			ErrGroupMode, g.name, g.topic.Name())
	}
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
// group). On a storage backend shared by several broker nodes the session
// also takes the group's lease in the cluster store (the log-queue study's
// one consumer per group, across nodes): a group held through another node
// is busy here too, and the committed offset is read again from the store.
// Errors: ErrGroupBusy while another session's lease is live (on any
// node), ErrUnknownTopic, ErrInvalidName, ErrNameTaken, a checkpoint open
// error, or the cluster store's error.
func (c *Coordinator) Acquire(topic, group string) (string, error) {
	return c.AcquireMode(topic, group, "")
}

// AcquireMode is Acquire that fixes or checks the group's mode:
// contract.GroupExclusive (one session at a time, as Acquire), or
// contract.GroupShared (any number of sessions, each message leased to
// one of them; see AckOffsets and Nack); "" joins the group as it is (a
// group not used yet is shared when its name matches
// mmmq.broker.groups.shared, else exclusive). The mode is stored with the
// group's first session and fixed from then on. Errors: those of Acquire,
// ErrGroupMode (the other mode is stored, or a backend that cannot keep a
// shared group's state), a 400 for an unknown mode or a shared group
// without a valid dead-letter topic, ErrGroupBusy when a shared group has
// its most sessions.
func (c *Coordinator) AcquireMode(topic, group, mode string) (string, error) {
	switch mode {
	case "", contract.GroupExclusive, contract.GroupShared:
	default:
		return "", contract.BadRequest("mode %q: want %q or %q", mode, contract.GroupExclusive, contract.GroupShared)
	}
	g, err := c.group(topic, group)
	if err != nil {
		return "", err
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := c.resolveModeLocked(g, mode); err != nil {
		return "", err
	}
	if g.shared != nil {
		return c.joinShared(g, now)
	}
	c.expireLocked(g, now)
	if l := g.lease; l != nil {
		return "", &BusyError{Topic: topic, Group: group, LeaseLeft: c.leaseLeft(l, now)}
	}
	work, err := c.acquireWork(g)
	if err != nil {
		return "", err
	}
	id := newSessionID()
	g.lease = &lease{id: id, expires: now.Add(c.opts.LeaseTimeout), next: g.cp.Offset(), gone: make(chan struct{}), work: work}
	if work != nil {
		c.watchers.Add(1)
		go c.watchWork(g, g.lease)
	}
	return id, nil
}

// acquireWork takes g's lease in the cluster store (one store shared by several broker nodes)
// and binds its checkpoint to the lease's epoch (so that a commit by a
// session that lost the group is refused); nil, nil with the local
// backend. A lease held elsewhere is a *BusyError whose LeaseLeft is the
// whole lease timeout (the holder's renewals are not known here).
func (c *Coordinator) acquireWork(g *group) (contract.WorkLease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.LeaseTimeout)
	defer cancel()
	work, err := g.topic.AcquireWork(ctx, g.name)
	switch {
	case errors.Is(err, contract.ErrLeaseHeld):
		return nil, &BusyError{Topic: g.topic.Name(), Group: g.name, LeaseLeft: c.opts.LeaseTimeout, Elsewhere: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("acquire group %s of topic %s: %w", g.name, g.topic.Name(), err)
	case work == nil:
		return nil, nil
	}
	ec, ok := g.cp.(contract.EpochCheckpoint)
	if !ok {
		err = fmt.Errorf("checkpoint %s cannot be bound to a lease epoch (%T)", g.cp.Path(), g.cp)
	} else {
		err = ec.BindEpoch(work.Epoch())
	}
	if err != nil {
		_ = work.Release()
		return nil, fmt.Errorf("acquire group %s of topic %s: %w", g.name, g.topic.Name(), err)
	}
	return work, nil
}

// Release ends session's hold on group of topic: the next session starts at
// the committed offset, so unacknowledged messages are redelivered
// (at-least-once). It reports whether session held the group; releasing a
// session that does not hold it changes nothing. Errors: ErrUnknownTopic,
// ErrInvalidName, ErrNameTaken.
func (c *Coordinator) Release(topic, group, session string) (bool, error) {
	g, err := c.tracked(topic, group, session)
	if errors.Is(err, ErrSessionExpired) {
		return false, nil // nothing to release
	}
	if err != nil {
		return false, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.shared; s != nil {
		m := s.sessions[session]
		if m == nil {
			return false, nil
		}
		c.endMember(g, m, "released")
		return true, nil
	}
	l := g.lease
	if l == nil || session == "" || l.id != session {
		return false, nil
	}
	c.endLocked(g, l)
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
