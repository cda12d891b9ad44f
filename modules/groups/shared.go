package groups

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/internal/offbits"
)

// Shared consumer groups (competing consumers).
//
// A group in mode shared hands each message to one of any number of
// sessions at a time, leased to it until the session's lease ends
// (lease-timeout, renewed by the session's fetches, acks and nacks). A
// message is finished when it is acknowledged (per message), dead-lettered
// after MaxDeliveries deliveries, or skipped (corrupt, deleted by
// retention). The committed offset is the contiguous prefix of finished
// messages; the finished ones past it and every unfinished message's
// delivery count are recorded beside the checkpoint
// (contract.DeliveryRecorder), durably before an ack is answered and
// before a message is handed out, so that a restart neither finishes a
// message twice nor resets a count.
//
// Key affinity: a message with an ordering key is handed out only when
// every earlier message of its key is finished, so at most one message
// per key is out at a time, and per-key order holds across sessions.
//
// Everything below is guarded by group.mu.

// maxSessions caps the live sessions of one shared group.
const maxSessions = 10000

// maxScan bounds the entries one fetch of a shared group reads from the
// log for new messages (most may wait behind their key).
var maxScan = 10000 // a variable for the tests

// sharedGroup is the state of a group in mode shared.
type sharedGroup struct {
	rec contract.DeliveryRecorder
	// fin: the finished offsets (every one below the committed offset
	// counts as finished).
	fin offbits.Set
	// scan is the next offset not read from the log yet.
	scan int64
	// sessions by id.
	sessions map[string]*member
	// out is the messages handed out and not finished, by offset.
	out map[int64]*handed
	// ready is what may be handed out now, lowest offset first.
	ready pendingHeap
	// later is what a nack asked to be handed out no sooner than its due
	// time, soonest first.
	later dueHeap
	// keys are the ordering keys with an unfinished message read from the
	// log: the key's unfinished offsets in order, its head first (out,
	// ready or later); the others wait for it.
	keys map[string]*keyLine
	// counts are the delivery counts of unfinished messages.
	counts map[int64]uint32
	// changed is closed (and replaced) when something becomes ready, so
	// that waiting fetches look again.
	changed chan struct{}

	redelivered, deadLettered, expiredLeases uint64
}

// member is one session of a shared group.
type member struct {
	id       string
	expires  time.Time
	fetching int
	leased   map[int64]struct{}
	gone     chan struct{} // closed when the session ends
}

// handed is a message handed out to session.
type handed struct {
	session *member
	key     string
}

// keyLine is the unfinished offsets of one ordering key, in order.
type keyLine struct{ offs []int64 }

// pending is an offset to hand out (again), with its key.
type pending struct {
	off int64
	key string
	due time.Time // later only
}

type pendingHeap []pending

func (h pendingHeap) Len() int           { return len(h) }
func (h pendingHeap) Less(i, j int) bool { return h[i].off < h[j].off }
func (h pendingHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pendingHeap) Push(x any)        { *h = append(*h, x.(pending)) }
func (h *pendingHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type dueHeap []pending

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	return h[i].due.Before(h[j].due) || h[i].due.Equal(h[j].due) && h[i].off < h[j].off
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(pending)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// newShared loads g's shared state from its checkpoint: the committed
// offset, the finished offsets past it and the delivery counts.
func newShared(g *group, rec contract.DeliveryRecorder) *sharedGroup {
	s := &sharedGroup{rec: rec, sessions: map[string]*member{}, out: map[int64]*handed{},
		keys: map[string]*keyLine{}, counts: map[int64]uint32{}, changed: make(chan struct{})}
	base := g.cp.Offset()
	s.fin.Reset(base)
	s.fin.SetRange(s.fin.Base(), base)
	for _, r := range rec.Finished() {
		s.fin.SetRange(r.Lo, r.Hi)
	}
	for _, d := range rec.Deliveries() {
		s.counts[d.Offset] = d.Count
	}
	s.scan = base
	return s
}

// signal wakes the fetches waiting on s.
func (s *sharedGroup) signal() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// makeReady makes p the next to hand out, at once or at p.due.
func (s *sharedGroup) makeReady(p pending, now time.Time) {
	if p.due.After(now) {
		heap.Push(&s.later, p)
		return
	}
	p.due = time.Time{}
	heap.Push(&s.ready, p)
}

// promoteDue moves what is due from later to ready.
func (s *sharedGroup) promoteDue(now time.Time) {
	for len(s.later) > 0 && !s.later[0].due.After(now) {
		p := heap.Pop(&s.later).(pending)
		p.due = time.Time{}
		heap.Push(&s.ready, p)
	}
}

// unlease takes off from its session and makes it ready again.
func (s *sharedGroup) unlease(off int64, due, now time.Time) {
	h := s.out[off]
	if h == nil {
		return
	}
	delete(s.out, off)
	delete(h.session.leased, off)
	s.makeReady(pending{off: off, key: h.key, due: due}, now)
}

// endMember ends session m: what it was handed goes back to ready.
func (c *Coordinator) endMember(g *group, m *member, why string) {
	s := g.shared
	delete(s.sessions, m.id)
	close(m.gone)
	now := time.Now()
	n := len(m.leased)
	for off := range m.leased {
		s.unlease(off, time.Time{}, now)
	}
	if n > 0 {
		s.expiredLeases += uint64(n)
		s.signal()
	}
	c.log.Info("shared consumer group session ended; its unacknowledged messages will be handed out again",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name), zap.String("session", m.id),
		zap.String("why", why), zap.Int("leased", n))
}

// expireShared ends g's sessions whose lease has expired (and that are not
// fetching).
func (c *Coordinator) expireShared(g *group, now time.Time) {
	for _, m := range g.shared.sessions {
		if m.fetching == 0 && !now.Before(m.expires) {
			c.endMember(g, m, "lease expired")
		}
	}
}

// memberLocked returns session of shared g, renewed, or ErrSessionExpired.
func (c *Coordinator) memberLocked(g *group, session string, now time.Time) (*member, error) {
	c.expireShared(g, now)
	m := g.shared.sessions[session]
	if m == nil {
		return nil, fmt.Errorf("%w: session %q is not a session of shared group %s of topic %s (lease expired, released, or unknown)",
			ErrSessionExpired, session, g.name, g.topic.Name())
	}
	m.expires = now.Add(c.opts.LeaseTimeout)
	return m, nil
}

// joinShared starts a session of shared group g.
func (c *Coordinator) joinShared(g *group, now time.Time) (string, error) {
	s := g.shared
	c.expireShared(g, now)
	if len(s.sessions) >= maxSessions {
		return "", &BusyError{Topic: g.topic.Name(), Group: g.name, LeaseLeft: c.opts.LeaseTimeout,
			Full: fmt.Sprintf("%d sessions, the most one shared group has", maxSessions)}
	}
	id := newSessionID()
	s.sessions[id] = &member{id: id, expires: now.Add(c.opts.LeaseTimeout), leased: map[int64]struct{}{}, gone: make(chan struct{})}
	return id, nil
}

// fetchShared is Fetch for a shared group.
func (c *Coordinator) fetchShared(ctx context.Context, g *group, session string, limit int, wait time.Duration) (Batch, error) {
	g.mu.Lock()
	m, err := c.memberLocked(g, session, time.Now())
	if err != nil {
		g.mu.Unlock()
		return Batch{}, err
	}
	m.fetching++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		m.fetching--
		m.expires = time.Now().Add(c.opts.LeaseTimeout)
		g.mu.Unlock()
	}()
	g.active.Store(time.Now().UnixNano())

	timeout, stopTimeout := longPoll(wait)
	defer stopTimeout()
	for {
		g.mu.Lock()
		s := g.shared
		if s.sessions[m.id] != m {
			g.mu.Unlock()
			return Batch{}, fmt.Errorf("%w: session %q left shared group %s of topic %s while fetching (released)",
				ErrSessionExpired, session, g.name, g.topic.Name())
		}
		now := time.Now()
		c.expireShared(g, now)
		s.promoteDue(now)
		b, more, err := c.handOutLocked(ctx, g, m, limit, now)
		if more && err == nil && len(b.Entries) == 0 && ctx.Err() == nil {
			g.mu.Unlock()
			continue // read on past the messages waiting behind their key, the lock given up between
		}
		if err != nil || len(b.Entries) > 0 || timeout == nil {
			g.mu.Unlock()
			return b, err
		}
		// Nothing to hand out: wait for a publish (when the window has
		// room), for something to become ready, or for a nack's due time.
		var notify <-chan struct{}
		if s.scan-g.cp.Offset() < c.opts.MaxUnacked {
			notify = g.topic.Notify(s.scan)
		}
		changed, scanAt := s.changed, s.scan
		var due <-chan time.Time
		var dueTimer *time.Timer
		if len(s.later) > 0 {
			dueTimer = time.NewTimer(time.Until(s.later[0].due))
			due = dueTimer.C
		}
		empty := b
		g.mu.Unlock()
		stop := func() {
			if dueTimer != nil {
				dueTimer.Stop()
			}
		}
		select {
		case <-notify:
			// The high watermark never decreases: a wake-up without new
			// data means the topic closed (a deletion ends the
			// sessions first, which the loop reports).
			if g.topic.HighWatermark() <= scanAt {
				g.mu.Lock()
				lost := s.sessions[m.id] != m
				g.mu.Unlock()
				if !lost {
					stop()
					return Batch{}, fmt.Errorf("fetch group %s of topic %s: %w", g.name, g.topic.Name(), contract.ErrClosed)
				}
			}
		case <-changed:
		case <-due:
		case <-m.gone:
		case <-timeout:
			stop()
			return empty, nil
		case <-c.drained:
			stop()
			return empty, nil
		case <-ctx.Done():
			stop()
			return Batch{}, ctx.Err()
		}
		stop()
	}
}

// handOutLocked hands session m up to limit messages: ready ones first
// (lowest offset first), then new ones from the log, none of an ordering
// key with an earlier message unfinished. Their delivery counts are
// recorded durably before they are returned. A message already handed
// out MaxDeliveries times is dead-lettered instead.
//
// more reports that the scan stopped at maxScan with more to read.
func (c *Coordinator) handOutLocked(ctx context.Context, g *group, m *member, limit int, now time.Time) (b Batch, more bool, err error) {
	s := g.shared
	b = Batch{Incarnation: g.topic.Incarnation(), budget: c.opts.Budget, Shared: true}
	var picked []pending
	size := 0
	full := func() bool { return len(picked) >= limit || size >= c.opts.MaxFetchBytes }
	// take adds e (of key) to the batch, or reports that the budget
	// cannot hold it.
	take := func(e contract.Entry, key string) bool {
		if !c.opts.Budget.TryAcquire(int64(len(e.Payload))) {
			return false
		}
		b.held += int64(len(e.Payload))
		b.Entries = append(b.Entries, e)
		picked = append(picked, pending{off: e.Offset, key: key})
		size += len(e.Payload)
		return true
	}
	var fail error
	// skip finishes off without delivery (corrupt, deleted by retention,
	// dead-lettered) at once, so that its key's next message is ready
	// for this same fetch.
	skip := func(off int64, key string) bool {
		if err := c.finishLocked(g, []pending{{off: off, key: key}}, now); err != nil {
			fail = err
			return false
		}
		return true
	}
	var overloaded bool
	for !full() && len(s.ready) > 0 {
		p := heap.Pop(&s.ready).(pending)
		if s.fin.Has(p.off) {
			continue
		}
		es, err := g.topic.ReadBatch(p.off, 1)
		var ce *contract.CorruptionError
		var oe *contract.OffsetExpiredError
		switch {
		case err == nil && len(es) == 1 && es[0].Offset == p.off:
		case errors.As(err, &oe) && oe.StartOffset > p.off:
			c.log.Warn("a message deleted by retention before the shared consumer group finished it is skipped",
				zap.String("topic", g.topic.Name()), zap.String("group", g.name), zap.Int64("offset", p.off))
			if !skip(p.off, p.key) {
				heap.Push(&s.ready, p)
				break
			}
			continue
		case errors.As(err, &ce) && ce.Offset == p.off:
			c.logCorrupt(g, ce)
			if !skip(p.off, p.key) {
				heap.Push(&s.ready, p)
				break
			}
			continue
		default:
			if err == nil {
				err = fmt.Errorf("read at offset %d returned %d entries", p.off, len(es))
			}
			heap.Push(&s.ready, p)
			fail = fmt.Errorf("fetch group %s of topic %s at offset %d: %w", g.name, g.topic.Name(), p.off, err)
		}
		if fail != nil {
			break
		}
		if expired, err := c.expireSharedLocked(ctx, g, es[0], now); expired || err != nil {
			if err != nil {
				heap.Push(&s.ready, p)
				fail = err
				break
			}
			if !skip(p.off, p.key) {
				heap.Push(&s.ready, p)
				break
			}
			c.ttlExpired.Add(1)
			continue
		}
		if c.opts.MaxDeliveries > 0 && s.counts[p.off] >= uint32(c.opts.MaxDeliveries) {
			if err := c.deadLetterLocked(ctx, g, es[0], s.counts[p.off]); err != nil {
				heap.Push(&s.ready, p)
				fail = err
				break
			}
			if !skip(p.off, p.key) {
				heap.Push(&s.ready, p)
				break
			}
			continue
		}
		if !take(es[0], p.key) {
			heap.Push(&s.ready, p)
			overloaded = true
			break
		}
	}
	// Messages waiting behind their key are read and passed over: bound
	// what one call reads, so that g.mu is not held for long (a waiting
	// fetch comes back for the rest at once: the topic's high watermark is
	// past the scan).
	scanned := 0
	for fail == nil && !overloaded && !full() && scanned < maxScan && s.scan < g.topic.HighWatermark() && s.scan-g.cp.Offset() < c.opts.MaxUnacked {
		want := min(limit-len(picked), int(min(c.opts.MaxUnacked-(s.scan-g.cp.Offset()), int64(c.opts.MaxFetch))))
		es, err := g.topic.ReadBatch(s.scan, max(want, 1))
		var ce *contract.CorruptionError
		var oe *contract.OffsetExpiredError
		switch {
		case err == nil && len(es) > 0:
		case errors.As(err, &oe) && oe.StartOffset > s.scan:
			if err := c.retentionGap(g, s.scan, oe.StartOffset); err != nil {
				fail = err
				break
			}
			continue
		case errors.As(err, &ce) && ce.Offset == s.scan:
			c.logCorrupt(g, ce)
			s.scan++
			if !skip(s.scan-1, "") {
				break
			}
			continue
		default:
			if err == nil {
				err = fmt.Errorf("empty read at offset %d below the high watermark", s.scan)
			}
			fail = fmt.Errorf("fetch group %s of topic %s at offset %d: %w", g.name, g.topic.Name(), s.scan, err)
		}
		if fail != nil {
			break
		}
		scanned += len(es)
		for _, e := range es {
			if e.Offset < s.scan {
				continue // passed over: a finish moved the scan past acks recorded before a restart
			}
			if e.Offset != s.scan {
				fail = fmt.Errorf("read topic %s: got offset %d, want %d", g.topic.Name(), e.Offset, s.scan)
				break
			}
			if full() || overloaded {
				break
			}
			s.scan++
			if s.fin.Has(e.Offset) {
				continue // finished before a restart
			}
			key := contract.MessageKey(e.Payload)
			if key != "" {
				if kl := s.keys[key]; kl != nil {
					kl.offs = append(kl.offs, e.Offset) // waits for the key's head
					continue
				}
				s.keys[key] = &keyLine{offs: []int64{e.Offset}}
			}
			if expired, err := c.expireSharedLocked(ctx, g, e, now); expired || err != nil {
				if err != nil {
					heap.Push(&s.ready, pending{off: e.Offset, key: key})
					fail = err
					break
				}
				if !skip(e.Offset, key) {
					break
				}
				c.ttlExpired.Add(1)
				continue
			}
			if c.opts.MaxDeliveries > 0 && s.counts[e.Offset] >= uint32(c.opts.MaxDeliveries) {
				// Handed out that often before a restart.
				if err := c.deadLetterLocked(ctx, g, e, s.counts[e.Offset]); err != nil {
					heap.Push(&s.ready, pending{off: e.Offset, key: key})
					fail = err
					break
				}
				if !skip(e.Offset, key) {
					break
				}
				continue
			}
			if !take(e, key) {
				heap.Push(&s.ready, pending{off: e.Offset, key: key})
				overloaded = true
			}
		}
	}
	if len(picked) > 0 {
		ds := make([]contract.DeliveryCount, len(picked))
		for i, p := range picked {
			ds[i] = contract.DeliveryCount{Offset: p.off, Count: s.counts[p.off] + 1}
		}
		if err := s.rec.RecordDeliveries(ds); err != nil {
			for _, p := range picked {
				heap.Push(&s.ready, p)
			}
			b.Release()
			return Batch{}, false, fmt.Errorf("record the deliveries of group %s of topic %s: %w", g.name, g.topic.Name(), err)
		}
		b.Deliveries = make([]uint32, len(picked))
		for i, p := range picked {
			s.counts[p.off] = ds[i].Count
			if ds[i].Count > 1 {
				s.redelivered++
			}
			b.Deliveries[i] = ds[i].Count
			s.out[p.off] = &handed{session: m, key: p.key}
			m.leased[p.off] = struct{}{}
		}
		fail = nil // what was read is delivered; the next fetch meets the error again
	}
	b.Committed, b.Next = g.cp.Offset(), s.scan
	more = scanned >= maxScan
	switch {
	case len(picked) > 0:
		return b, more, nil
	case fail != nil:
		return Batch{}, false, fail
	case overloaded:
		return Batch{}, false, c.opts.Budget.Overloaded(fmt.Sprintf("fetch of shared group %s of topic %s", g.name, g.topic.Name()), 0)
	}
	return b, more, nil
}

// retentionGap records that retention deleted [from, to) before g read
// it: those offsets count as finished. When everything before the gap is
// finished the committed offset moves over it durably at once (else the
// gap would fill the max-unacked window with nothing to hand out).
func (c *Coordinator) retentionGap(g *group, from, to int64) error {
	s := g.shared
	n := to - from
	c.expired.Add(uint64(n))
	c.log.Warn("messages deleted by retention before this shared consumer group read them; continuing from the log start offset",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name),
		zap.Int64("offset", from), zap.Int64("start-offset", to), zap.Int64("never-delivered", n))
	if s.fin.FirstUnset(g.cp.Offset()) >= from {
		// Everything before the gap is finished: the committed offset
		// jumps over it, without a bit per deleted offset.
		if err := g.cp.Commit(to); err != nil {
			return fmt.Errorf("commit group %s of topic %s over a retention gap at %d: %w", g.name, g.topic.Name(), to, err)
		}
		s.fin.Reset(to)
		s.fin.SetRange(s.fin.Base(), to)
		s.signal()
	} else {
		s.fin.SetRange(from, to)
	}
	s.scan = to
	return nil
}

func (c *Coordinator) logCorrupt(g *group, ce *contract.CorruptionError) {
	c.log.Error("corrupt entry skipped; it is not delivered to the consumer group",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name),
		zap.Int64("offset", ce.Offset), zap.String("file", ce.File), zap.Int64("pos", ce.Pos),
		zap.String("reason", ce.Reason))
}

// deadLetterLocked appends e, handed out count times, durably to g's
// dead-letter topic.
func (c *Coordinator) deadLetterLocked(ctx context.Context, g *group, e contract.Entry, count uint32) error {
	dl, err := c.deadLetterTopic(g.name)
	if err != nil {
		return err
	}
	if c.opts.Publisher == nil {
		return fmt.Errorf("dead-letter offset %d of group %s of topic %s: %w", e.Offset, g.name, g.topic.Name(), dispatcher.ErrNoPublisher)
	}
	stored := dispatcher.GroupDeadLetter(e, g.topic.Name(), g.name, dl, int(count), false)
	off, err := c.opts.Publisher.PublishDurable(ctx, dl, [][]byte{stored})
	if errors.Is(err, contract.ErrRecordTooLarge) {
		stored = dispatcher.GroupDeadLetter(e, g.topic.Name(), g.name, dl, int(count), true)
		off, err = c.opts.Publisher.PublishDurable(ctx, dl, [][]byte{stored})
	}
	if err != nil {
		return fmt.Errorf("dead-letter offset %d of group %s of topic %s to %s: %w", e.Offset, g.name, g.topic.Name(), dl, err)
	}
	g.shared.deadLettered++
	c.log.Warn("message dead-lettered by a shared consumer group after its last delivery",
		zap.String("topic", g.topic.Name()), zap.String("group", g.name), zap.Int64("offset", e.Offset),
		zap.Uint32("deliveries", count), zap.String("dead-letter-topic", dl), zap.Int64("dead-letter-offset", off))
	return nil
}

// finishLocked finishes ps (unfinished messages of g read from the log,
// each handed out, or taken off ready by the caller, with its key):
// recorded durably (the finished ones past the new committed offset, then
// the committed offset), then forgotten; the next message of each key
// becomes ready. On error nothing changed in memory, except that when the
// commit failed, those recorded past the new committed offset stay
// finished (they are durable).
func (c *Coordinator) finishLocked(g *group, ps []pending, now time.Time) error {
	s := g.shared
	base := g.cp.Offset()
	var fresh []int64
	keyOf := make(map[int64]string, len(ps))
	for _, p := range ps {
		if !s.fin.Has(p.off) {
			s.fin.Set(p.off)
			fresh = append(fresh, p.off)
			keyOf[p.off] = p.key
		}
	}
	// Offsets past the scan may be finished too: recorded before a
	// restart. Everything below nb is finished, so the scan moves up to it.
	nb := s.fin.FirstUnset(base)
	undo := func() {
		for _, o := range fresh {
			s.fin.Clear(o)
		}
	}
	slices.Sort(fresh)
	var rs []contract.OffsetRange
	for _, o := range fresh {
		if o < nb {
			continue
		}
		if n := len(rs); n > 0 && rs[n-1].Hi == o {
			rs[n-1].Hi++
		} else {
			rs = append(rs, contract.OffsetRange{Lo: o, Hi: o + 1})
		}
	}
	if len(rs) > 0 {
		if err := s.rec.RecordFinished(rs); err != nil {
			undo()
			return fmt.Errorf("record finished messages of group %s of topic %s: %w", g.name, g.topic.Name(), err)
		}
	}
	var commitErr error
	if nb > base {
		if err := g.cp.Commit(nb); err != nil {
			// Those recorded past nb are durable and stay finished; the
			// ones below it are not: they are unfinished again, and the
			// caller's error says so.
			kept := fresh[:0]
			for _, o := range fresh {
				if o < nb {
					s.fin.Clear(o)
				} else {
					kept = append(kept, o)
				}
			}
			fresh = kept
			commitErr = fmt.Errorf("commit group %s of topic %s at %d: %w", g.name, g.topic.Name(), nb, err)
		} else {
			s.fin.Drop(nb)
			s.scan = max(s.scan, nb)
		}
	}
	woke := false
	for _, o := range fresh {
		delete(s.counts, o)
		key := keyOf[o]
		if h := s.out[o]; h != nil {
			delete(s.out, o)
			delete(h.session.leased, o)
		}
		if kl := s.keys[key]; key != "" && kl != nil {
			if i := slices.Index(kl.offs, o); i >= 0 {
				kl.offs = slices.Delete(kl.offs, i, i+1)
				if i == 0 && len(kl.offs) > 0 {
					s.makeReady(pending{off: kl.offs[0], key: key}, now)
					woke = true
				}
			}
			if len(kl.offs) == 0 {
				delete(s.keys, key)
			}
		}
	}
	if woke || g.cp.Offset() > base {
		s.signal() // a key's next message is ready, or the window has room
	}
	g.active.Store(time.Now().UnixNano())
	return commitErr
}

// AckResult is what an AckOffsets did.
type AckResult struct {
	// Committed is the group's committed offset after the ack (durable).
	Committed int64 `json:"committed"`
	// Acked is the offsets finished by this ack.
	Acked int `json:"acked"`
	// Already is the offsets that were finished before (a repeated ack).
	Already int `json:"already"`
}

// AckOffsets acknowledges offsets, each on its own, for session of a
// shared group: they are finished, recorded durably (and the committed
// offset moved over the contiguous prefix) before it returns. An offset
// already finished is counted in Already and changes nothing. Every other
// offset must be leased to session; otherwise nothing is acknowledged and
// the error is ErrNotDelivered naming them (a lease that expired and went
// to another session included). Renews the session's lease. Errors also:
// ErrGroupMode (an exclusive group), ErrSessionExpired, a 400 for no
// offsets, the record or commit error.
func (c *Coordinator) AckOffsets(topic, group, session string, offsets []int64) (AckResult, error) {
	g, s, m, err := c.sharedSession(topic, group, session, "ack per message")
	if err != nil {
		return AckResult{}, err
	}
	defer g.mu.Unlock()
	todo, already, err := s.leasedTo(m, offsets, topic, group)
	if err != nil {
		return AckResult{}, err
	}
	res := AckResult{Already: already}
	if err := c.finishLocked(g, todo, time.Now()); err != nil {
		return AckResult{}, err
	}
	res.Acked = len(todo)
	res.Committed = g.cp.Offset()
	return res, nil
}

// NackResult is what a Nack did.
type NackResult struct {
	// Committed is the group's committed offset.
	Committed int64 `json:"committed"`
	// Nacked is the offsets given back.
	Nacked int `json:"nacked"`
	// Already is the offsets that were finished before.
	Already int `json:"already"`
}

// Nack gives offsets, leased to session of a shared group, back
// unfinished: they are handed out again (to any session) at once, or no
// sooner than retryAfter from now. Each counts as a delivery: past
// MaxDeliveries one is dead-lettered instead of handed out again. An
// offset already finished changes nothing; any other offset not leased to
// session is refused as by AckOffsets, and nothing is given back. An
// offset repeated in offsets counts once (in Nacked or Already), as in
// AckOffsets.
func (c *Coordinator) Nack(topic, group, session string, offsets []int64, retryAfter time.Duration) (NackResult, error) {
	g, s, m, err := c.sharedSession(topic, group, session, "nack")
	if err != nil {
		return NackResult{}, err
	}
	defer g.mu.Unlock()
	todo, already, err := s.leasedTo(m, offsets, topic, group)
	if err != nil {
		return NackResult{}, err
	}
	res := NackResult{Already: already}
	now := time.Now()
	var due time.Time
	if retryAfter > 0 {
		due = now.Add(retryAfter)
	}
	for _, p := range todo {
		s.unlease(p.off, due, now)
	}
	if len(todo) > 0 {
		s.signal()
	}
	res.Nacked, res.Committed = len(todo), g.cp.Offset()
	return res, nil
}

// sharedSession returns shared group (topic, group) locked, with its
// state and session's member (renewed). On error g.mu is not held.
func (c *Coordinator) sharedSession(topic, group, session, what string) (*group, *sharedGroup, *member, error) {
	g, err := c.tracked(topic, group, session)
	if err != nil {
		return nil, nil, nil, err
	}
	g.mu.Lock()
	if g.shared == nil {
		mode := g.mode
		g.mu.Unlock()
		if mode == "" {
			mode = "not used yet"
		}
		return nil, nil, nil, fmt.Errorf("%w: group %s of topic %s is %s; %s is for shared groups (an exclusive group acknowledges through an offset: {\"offset\": n})",
			ErrGroupMode, group, topic, mode, what)
	}
	m, err := c.memberLocked(g, session, time.Now())
	if err != nil {
		g.mu.Unlock()
		return nil, nil, nil, err
	}
	return g, g.shared, m, nil
}

// SessionInfo is one session of a shared group in a Listing.
type SessionInfo struct {
	Session string `json:"session"`
	// InFlight is the messages leased to it.
	InFlight int `json:"inFlight"`
	// LeaseExpiresInMs is the milliseconds left on its lease (at least a
	// whole lease while it fetches).
	LeaseExpiresInMs int64 `json:"leaseExpiresInMs"`
}

// sharedInfo fills the shared group's part of info.
func (c *Coordinator) sharedInfo(g *group, now time.Time, info *GroupInfo) {
	s := g.shared
	c.expireShared(g, now)
	inFlight, redelivered, dead := int64(len(s.out)), s.redelivered, s.deadLettered
	info.InFlight, info.Redelivered, info.DeadLettered = &inFlight, &redelivered, &dead
	info.Sessions = make([]SessionInfo, 0, len(s.sessions))
	for _, m := range s.sessions {
		left := max(m.expires.Sub(now), 0)
		if m.fetching > 0 {
			left = max(left, c.opts.LeaseTimeout)
		}
		info.Sessions = append(info.Sessions, SessionInfo{Session: m.id, InFlight: len(m.leased), LeaseExpiresInMs: left.Milliseconds()})
	}
	sort.Slice(info.Sessions, func(i, j int) bool { return info.Sessions[i].Session < info.Sessions[j].Session })
	info.Held = len(s.sessions) > 0
}

// startShared makes g, stored as shared, a shared group: its state is
// loaded from its checkpoint. A checkpoint that cannot keep per-message
// state is ErrGroupMode naming the backend.
func (c *Coordinator) startShared(g *group) error {
	rec, ok := g.cp.(contract.DeliveryRecorder)
	if !ok {
		return fmt.Errorf("%w: group %s of topic %s cannot be shared: the storage backend does not keep a shared group's per-message state (acks past the committed offset and delivery counts; %T)",
			ErrGroupMode, g.name, g.topic.Name(), g.cp)
	}
	sg := newShared(g, rec)
	// Messages acknowledged past the committed offset before a restart
	// may now join the contiguous prefix (the ack that would have
	// committed them did not finish): commit it, so that the lag and
	// retention see it.
	if base := g.cp.Offset(); sg.fin.FirstUnset(base) > base {
		nb := sg.fin.FirstUnset(base)
		if err := g.cp.Commit(nb); err != nil {
			return fmt.Errorf("open shared group %s of topic %s: commit the acknowledged prefix at %d: %w", g.name, g.topic.Name(), nb, err)
		}
		sg.fin.Drop(nb)
		sg.scan = nb
	}
	g.mode, g.shared = contract.GroupShared, sg
	return nil
}

// resolveModeLocked fixes g's mode for a new session asking for want
// ("" joins the group as it is): a group not used yet takes want, or
// shared when its name matches a glob of Options.Shared, else exclusive;
// shared is stored durably before the first session starts. want other than the
// stored mode is ErrGroupMode naming both.
func (c *Coordinator) resolveModeLocked(g *group, want string) error {
	if g.mode != "" {
		if want != "" && want != g.mode {
			return fmt.Errorf("%w: group %s of topic %s is %s; mode=%s was asked (a group's mode is fixed by its first use; fetch without mode to join it as it is)",
				ErrGroupMode, g.name, g.topic.Name(), g.mode, want)
		}
		return nil
	}
	mode := want
	switch glob := c.configuredShared(g.name); {
	case mode == "" && glob:
		mode = contract.GroupShared
	case mode == "":
		mode = contract.GroupExclusive
	case mode == contract.GroupExclusive && glob:
		return fmt.Errorf("%w: group %s of topic %s matches a glob of mmmq.broker.groups.shared, so it is shared; mode=exclusive was asked",
			ErrGroupMode, g.name, g.topic.Name())
	}
	gm, stores := g.cp.(contract.GroupModer)
	if mode == contract.GroupShared {
		if _, ok := g.cp.(contract.DeliveryRecorder); !ok || !stores {
			return fmt.Errorf("%w: group %s of topic %s cannot be shared: the storage backend does not keep a shared group's per-message state (acks past the committed offset and delivery counts; %T)",
				ErrGroupMode, g.name, g.topic.Name(), g.cp)
		}
		dl, err := c.deadLetterTopic(g.name)
		if err != nil {
			return err
		}
		if dl == g.topic.Name() && c.opts.MaxDeliveries > 0 {
			return contract.BadRequest("group %q cannot be shared on topic %s: it would dead-letter into the topic it reads (a poison message would come back for ever); name another dead-letter topic in mmmq.broker.groups.dead-letter-topics, or use another group name", g.name, dl)
		}
	}
	// Only shared is stored: a checkpoint without a mode is exclusive (as
	// every group was before modes), so exclusive groups write nothing
	// new; one that never committed has no state to protect and is new
	// again after a restart.
	if stores && mode == contract.GroupShared {
		if err := gm.SetGroupMode(mode); err != nil {
			return fmt.Errorf("store the mode of group %s of topic %s: %w", g.name, g.topic.Name(), err)
		}
	}
	if mode == contract.GroupShared {
		return c.startShared(g)
	}
	g.mode = mode
	return nil
}

// configuredShared reports whether name matches a glob of Options.Shared.
func (c *Coordinator) configuredShared(name string) bool {
	for _, glob := range c.opts.Shared {
		if auth.Glob(glob, name) {
			return true
		}
	}
	return false
}

// deadLetterTopic is the dead-letter topic of shared group name:
// Options.DeadLetterTopics, else dead-letter.<name>. A name that does not
// make a valid topic, with max-deliveries on, is a 400 saying to name one.
func (c *Coordinator) deadLetterTopic(name string) (string, error) {
	if t, ok := c.opts.DeadLetterTopics[name]; ok {
		return t, nil
	}
	t := dispatcher.DeadLetterPrefix + name
	if err := contract.ValidateTopic(t); err != nil && c.opts.MaxDeliveries > 0 {
		return "", contract.BadRequest("group %q cannot be shared: its dead-letter topic %q is not a valid topic (%v); name one in mmmq.broker.groups.dead-letter-topics", name, t, err)
	}
	return t, nil
}

// CheckConfiguredShared returns an error naming every stored group of the
// topics of reg that matches a glob of Options.Shared and is stored as
// exclusive: Start calls it, so that such a configuration stops startup.
func (c *Coordinator) CheckConfiguredShared() error {
	if len(c.opts.Shared) == 0 {
		return nil
	}
	var errs []error
	for _, q := range c.reg.List() {
		names, err := c.storedCheckpoints(q)
		if err != nil {
			return fmt.Errorf("mmmq.broker.groups.shared: list the groups of topic %s: %w", q.Name(), err)
		}
		for _, name := range names {
			if !c.configuredShared(name) || (c.opts.Reserved != nil && c.opts.Reserved(name)) {
				continue
			}
			cp, err := q.Checkpoint(name)
			if err != nil {
				return fmt.Errorf("mmmq.broker.groups.shared: open group %s of topic %s: %w", name, q.Name(), err)
			}
			gm, ok := cp.(contract.GroupModer)
			if !ok {
				continue
			}
			mode, err := gm.GroupMode()
			if err != nil {
				return fmt.Errorf("mmmq.broker.groups.shared: group %s of topic %s: %w", name, q.Name(), err)
			}
			if mode == contract.GroupExclusive {
				errs = append(errs, fmt.Errorf("mmmq.broker.groups.shared: group %s of topic %s matches a shared glob but is stored as exclusive (a group's mode is fixed by its first use): remove the glob, or rename the group", name, q.Name()))
			}
		}
	}
	return errors.Join(errs...)
}

// Redrive publishes the dead letters at offsets [from, to) of shared
// group's dead-letter topic that the group wrote (dispatcher.HeaderDLGroup)
// from topic (one dead-letter topic serves a group name on every topic;
// the others are skipped, named) back to topic, as a dispatcher's redrive does
// (dispatcher.RedriveTopic): each durably, with a fresh id, the original
// content, key and headers; from < 0 is the topic's first offset, to < 0
// its high watermark; at most dispatcher.MaxRedrive per call. The group
// need not be in use. Errors: ErrInvalidName, ErrNameTaken, ErrUnknownTopic
// (the group's topic), a 400 for a group without a valid dead-letter
// topic or a range outside the dead-letter topic, the publish error.
func (c *Coordinator) Redrive(ctx context.Context, topic, group string, from, to int64) (dispatcher.RedriveResult, error) {
	if _, err := c.lookup(topic, group); err != nil {
		return dispatcher.RedriveResult{}, err
	}
	dl, err := c.deadLetterTopic(group)
	if err != nil {
		return dispatcher.RedriveResult{}, err
	}
	if c.opts.Publisher == nil {
		return dispatcher.RedriveResult{}, dispatcher.ErrNoPublisher
	}
	var t dispatcher.Topic
	if q, ok := c.reg.Get(dl); ok {
		t = q
	}
	res, err := dispatcher.RedriveTopic(ctx, t, dl, dispatcher.HeaderDLGroup, group, topic, c.opts.Publisher, from, to)
	if err == nil {
		c.log.Info("shared consumer group dead letters redriven", zap.String("topic", topic), zap.String("group", group),
			zap.String("dead-letter-topic", dl), zap.Int("redriven", len(res.Redriven)), zap.Int("skipped", len(res.Skipped)))
	}
	return res, err
}

// CheckMode returns ErrGroupMode, naming both modes, when group of topic
// is known to be of another mode than mode; nil when it is of that mode or
// not used yet. Errors also: those of looking the group up.
func (c *Coordinator) CheckMode(topic, group, mode string) error {
	g, err := c.tracked(topic, group, "")
	if errors.Is(err, ErrSessionExpired) {
		return nil // not tracked: the fetch answers for its session
	}
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mode != "" && g.mode != mode {
		return fmt.Errorf("%w: group %s of topic %s is %s; mode=%s was asked (a group's mode is fixed by its first use)",
			ErrGroupMode, group, topic, g.mode, mode)
	}
	return nil
}

// leasedTo sorts offsets (an ack's or a nack's) into those leased to m, in
// the order given, each once, and the count of those already finished.
// Any other offset is ErrNotDelivered naming them all.
func (s *sharedGroup) leasedTo(m *member, offsets []int64, topic, group string) (todo []pending, already int, err error) {
	var bad []int64
	seen := make(map[int64]bool, len(offsets))
	for _, o := range offsets {
		switch h := s.out[o]; {
		case seen[o]:
		case o >= 0 && o < s.scan && s.fin.Has(o):
			already++
		case h != nil && h.session == m:
			todo = append(todo, pending{off: o, key: h.key})
		default:
			bad = append(bad, o)
		}
		seen[o] = true
	}
	if len(bad) > 0 {
		return nil, 0, fmt.Errorf("%w: offsets %v of topic %s are not leased to this session of group %s (never handed to it, or its lease on them expired)",
			ErrNotDelivered, bad, topic, group)
	}
	return todo, already, nil
}
