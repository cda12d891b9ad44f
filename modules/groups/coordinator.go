package groups

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Defaults of Options.
const (
	// DefaultLeaseTimeout is the lease of a session without fetch or ack
	// (mmmq.broker.groups.lease-timeout).
	DefaultLeaseTimeout = 30 * time.Second
	// DefaultMaxFetch caps the entries of one fetch (mmmq.broker.groups.max-fetch).
	DefaultMaxFetch = 1000
	// DefaultMaxWait caps the long-poll wait of one fetch.
	DefaultMaxWait = 30 * time.Second
	// DefaultMaxFetchBytes bounds the payload bytes one fetch gathers
	// (at least one entry is always returned).
	DefaultMaxFetchBytes = 16 << 20
	// DefaultMaxGroups caps the (topic, group) pairs the coordinator tracks.
	DefaultMaxGroups = 100000
)

// Options configures a Coordinator. The zero value of every field means its
// default.
type Options struct {
	// LeaseTimeout is how long a session keeps its group without a fetch or
	// an ack; every fetch and ack renews it, and a fetch that is waiting
	// holds it. Default 30s (mmmq.broker.groups.lease-timeout).
	LeaseTimeout time.Duration
	// MaxFetch caps the entries one Fetch returns; larger requests are
	// clamped. Default 1000 (mmmq.broker.groups.max-fetch).
	MaxFetch int
	// MaxFetchBytes bounds the payload bytes one Fetch gathers: it stops
	// reading once the total reaches it (one entry is always returned).
	// Default 16 MiB.
	MaxFetchBytes int
	// MaxWait caps the long-poll wait of one Fetch; longer waits are
	// clamped. Default 30s.
	MaxWait time.Duration
	// JanitorInterval is how often the background janitor releases expired
	// leases (they are also released lazily by the next request). Default
	// LeaseTimeout/4, kept within 10ms..5s.
	JanitorInterval time.Duration
	// MaxGroups caps the (topic, group) pairs tracked in memory (each holds
	// a small struct and an open checkpoint); a new pair beyond it fails
	// with ErrTooManyGroups, so a client inventing group names cannot grow
	// the broker's memory without bound. Default 100000.
	MaxGroups int
	// Reserved reports whether a name belongs to another user of the
	// checkpoint name space (the dispatchers); such a group name is refused
	// with ErrNameTaken. Nil reserves nothing.
	Reserved func(name string) bool
	// Logger receives lease and corruption events; default zap.NewNop().
	Logger *zap.Logger
}

func (o Options) withDefaults() Options {
	if o.LeaseTimeout <= 0 {
		o.LeaseTimeout = DefaultLeaseTimeout
	}
	if o.MaxFetch <= 0 {
		o.MaxFetch = DefaultMaxFetch
	}
	if o.MaxGroups <= 0 {
		o.MaxGroups = DefaultMaxGroups
	}
	if o.MaxFetchBytes <= 0 {
		o.MaxFetchBytes = DefaultMaxFetchBytes
	}
	if o.MaxWait <= 0 {
		o.MaxWait = DefaultMaxWait
	}
	if o.JanitorInterval <= 0 {
		o.JanitorInterval = min(max(o.LeaseTimeout/4, 10*time.Millisecond), 5*time.Second)
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// Coordinator is the consumer-group coordinator shared by the HTTP routes
// and the line protocol. Per (topic, group) it keeps:
//
//   - the committed offset: the next offset the group has not acknowledged,
//     stored durably in the topic's checkpoint named after the group
//     (<topic>/checkpoints/<group>.checkpoint, 8 bytes big-endian, the file
//     dispatchers use; a new group starts at 0);
//   - at most one session (seed 003: one active consumer per group): an
//     opaque id with a lease renewed by every fetch and ack;
//   - the session's delivered-up-to offset: where its next fetch starts.
//
// A new session starts delivering at the committed offset, so whatever the
// previous session fetched and did not acknowledge is delivered again
// (at-least-once, seed 003 "未确认部分在连接断开后从已提交偏移重投").
//
// Corrupt entries found at read time (CRC mismatch, seed 000 "무결성 검증")
// are skipped, one offset each, with an error log, as the dispatcher does:
// the skipped offset counts as delivered, so a later ack commits past it.
//
// Safe for concurrent use. Start launches the lease janitor; Stop ends it.
type Coordinator struct {
	reg  *topicqueue.Registry
	opts Options
	log  *zap.Logger

	mu     sync.Mutex
	groups map[key]*group

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain: waiting fetches return

	lifeMu      sync.Mutex
	stopJanitor chan struct{}
	janitorDone chan struct{}
}

type key struct{ topic, group string }

// group is one (topic, group). mu guards lease and serialises acks (the
// commit fsync runs under it, so committed offsets are written in order and
// never move back). Long-poll waits run without it.
type group struct {
	topic *topicqueue.TopicQueue
	name  string
	cp    contract.Checkpoint

	mu    sync.Mutex
	lease *lease // nil: free
}

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

// New returns a coordinator over reg's topics. It works without Start
// (leases then expire lazily only).
func New(reg *topicqueue.Registry, opts Options) *Coordinator {
	opts = opts.withDefaults()
	return &Coordinator{
		reg:     reg,
		opts:    opts,
		log:     opts.Logger,
		groups:  map[key]*group{},
		drained: make(chan struct{}),
	}
}

// LeaseTimeout is the configured lease.
func (c *Coordinator) LeaseTimeout() time.Duration { return c.opts.LeaseTimeout }

// MaxFetch is the cap on entries per Fetch.
func (c *Coordinator) MaxFetch() int { return c.opts.MaxFetch }

// MaxWait is the cap on the long-poll wait of a Fetch.
func (c *Coordinator) MaxWait() time.Duration { return c.opts.MaxWait }

// Start launches the janitor that releases expired leases every
// JanitorInterval. It returns at once.
func (c *Coordinator) Start(context.Context) error {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.stopJanitor != nil {
		return nil
	}
	c.stopJanitor, c.janitorDone = make(chan struct{}), make(chan struct{})
	go c.janitor(c.stopJanitor, c.janitorDone)
	return nil
}

// Stop drains waiting fetches (see Drain) and stops the janitor. It does not
// release leases: sessions simply end with the process, and the committed
// offsets are already durable.
func (c *Coordinator) Stop(context.Context) error {
	c.Drain(context.Background())
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.stopJanitor != nil {
		close(c.stopJanitor)
		<-c.janitorDone
		c.stopJanitor = nil
	}
	return nil
}

// Drain makes every waiting Fetch return what it has (usually nothing) and
// every later Fetch return without waiting, so that a long poll does not
// hold up a graceful shutdown. It is idempotent and always returns nil.
func (c *Coordinator) Drain(context.Context) error {
	c.drainOnce.Do(func() { close(c.drained) })
	return nil
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

// group returns the state of (topic, name), creating it on first use.
func (c *Coordinator) group(topic, name string) (*group, error) {
	if err := contract.ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	if storage.ValidCheckpointName(name) != nil {
		return nil, fmt.Errorf("%w: group name %q: want 1-200 characters of [A-Za-z0-9_.-], not starting with '.'", ErrInvalidName, name)
	}
	if c.opts.Reserved != nil && c.opts.Reserved(name) {
		return nil, fmt.Errorf("%w: %q is the name of a dispatcher (they share the checkpoint files)", ErrNameTaken, name)
	}
	q, ok := c.reg.Get(topic)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	k := key{topic, name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if g := c.groups[k]; g != nil && g.topic == q {
		return g, nil
	} else if g == nil && len(c.groups) >= c.opts.MaxGroups {
		return nil, fmt.Errorf("%w: %d (topic, group) pairs are in use; group %s of topic %s is refused", ErrTooManyGroups, c.opts.MaxGroups, name, topic)
	}
	cp, err := q.Checkpoint(name)
	if err != nil {
		return nil, fmt.Errorf("open group %s of topic %s: %w", name, topic, err)
	}
	g := &group{topic: q, name: name, cp: cp}
	c.groups[k] = g
	return g, nil
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
		left := max(l.expires.Sub(now), 0)
		if l.fetching > 0 {
			// A waiting fetch holds the lease and renews it when it
			// returns: the group is busy for at least another lease.
			left = max(left, c.opts.LeaseTimeout)
		}
		return "", &BusyError{Topic: topic, Group: group, LeaseLeft: left}
	}

	id := newSessionID()
	g.lease = &lease{id: id, expires: now.Add(c.opts.LeaseTimeout), next: g.cp.Offset(), gone: make(chan struct{})}
	return id, nil
}

// Batch is the result of a Fetch.
type Batch struct {
	// Entries are consecutive-offset messages below the high watermark
	// (gaps only where a corrupt entry was skipped); empty after a wait
	// with nothing new.
	Entries []storage.Entry
	// Committed is the group's durable committed offset: the next offset
	// not yet acknowledged.
	Committed int64
	// Next is the session's delivered-up-to offset after this fetch: where
	// its next fetch starts.
	Next int64
}

// Fetch returns up to limit entries (clamped to 1..MaxFetch, and to about
// MaxFetchBytes of payload) for session, starting at its delivered-up-to
// offset (a new session's is the committed offset), all below the topic's
// high watermark, and marks them delivered. When there is nothing to
// deliver it waits up to wait (clamped to 0..MaxWait) for a publish,
// without polling (TopicQueue.Notify), and returns an empty Batch when the
// wait ends (seed 003: an empty fetch returns 0 messages after the wait). A
// waiting fetch holds the lease; the lease is renewed when it returns.
//
// Errors: ErrSessionExpired (also when the session was released while the
// fetch waited), ErrUnknownTopic, ErrInvalidName, ErrNameTaken, ctx.Err()
// when ctx ends during the wait, storage.ErrClosed when the topic closes
// during the wait, or a read error. A fetch after Drain does not wait.
func (c *Coordinator) Fetch(ctx context.Context, topic, group, session string, limit int, wait time.Duration) (Batch, error) {
	g, err := c.group(topic, group)
	if err != nil {
		return Batch{}, err
	}
	limit = min(max(limit, 1), c.opts.MaxFetch)
	wait = min(max(wait, 0), c.opts.MaxWait)

	g.mu.Lock()
	l, err := c.holderLocked(g, session, time.Now())
	if err != nil {
		g.mu.Unlock()
		return Batch{}, err
	}
	l.fetching++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		l.fetching--
		if g.lease == l {
			l.expires = time.Now().Add(c.opts.LeaseTimeout)
		}
		g.mu.Unlock()
	}()

	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
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
			entries, err := c.readLocked(g, l, limit)
			b := Batch{Entries: entries, Committed: committed, Next: l.next}
			progressed := l.next > pos
			g.mu.Unlock()
			if err != nil {
				return Batch{}, err
			}
			if len(entries) > 0 || !progressed {
				return b, nil
			}
			continue // only corrupt entries were skipped: look again
		}
		g.mu.Unlock()
		if timeout == nil {
			return Batch{Committed: committed, Next: pos}, nil
		}
		select {
		case <-g.topic.Notify(pos):
			// The high watermark never decreases: a wake-up without new
			// data means the topic closed.
			if g.topic.HighWatermark() <= pos {
				return Batch{}, fmt.Errorf("fetch group %s of topic %s: %w", group, topic, storage.ErrClosed)
			}
		case <-timeout:
			return Batch{Committed: committed, Next: pos}, nil
		case <-c.drained:
			return Batch{Committed: committed, Next: pos}, nil
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
	case from > l.next:
		return fmt.Errorf("%w: from=%d but group %s of topic %s was delivered up to %d", ErrNotDelivered, from, group, topic, l.next)
	case from < committed:
		return fmt.Errorf("%w: from=%d is below the committed offset %d of group %s of topic %s", ErrInvalidOffset, from, committed, group, topic)
	}
	l.next = from
	return nil
}

// readLocked reads up to limit entries from l.next and advances l.next past
// what it returns and past skipped corrupt entries. g.mu is held.
func (c *Coordinator) readLocked(g *group, l *lease, limit int) ([]storage.Entry, error) {
	var out []storage.Entry
	size := 0
	hw := g.topic.HighWatermark()
	for len(out) < limit && l.next < hw && size < c.opts.MaxFetchBytes {
		es, err := g.topic.ReadBatch(l.next, limit-len(out))
		for _, e := range es {
			if e.Offset != l.next {
				return out, fmt.Errorf("read topic %s: got offset %d, want %d", g.topic.Name(), e.Offset, l.next)
			}
			out = append(out, e)
			size += len(e.Payload)
			l.next++
		}
		var ce *storage.CorruptionError
		switch {
		case err == nil && len(es) > 0:
		case errors.As(err, &ce) && ce.Offset == l.next:
			// Seed 000 "무결성 검증": log, skip that single entry, go on.
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
				return out, nil
			}
			return nil, fmt.Errorf("fetch group %s of topic %s at offset %d: %w", g.name, g.topic.Name(), l.next, err)
		}
	}
	return out, nil
}

// Ack acknowledges every offset up to and including offset for session: it
// commits offset+1 to the group's checkpoint, fsynced, and returns the new
// committed offset only after the fsync (seed 003: "已提交偏移只有在持久化之后
// 才回复 ACKED"). It renews the lease.
//
//   - offset >= the session's delivered-up-to offset: ErrNotDelivered,
//     nothing is committed;
//   - offset+1 <= the committed offset (including any negative offset): a
//     no-op returning the current committed offset, which never moves back;
//   - a session that does not hold the group (expired, released, unknown):
//     ErrSessionExpired, so a stale consumer can never commit.
//
// Other errors: ErrUnknownTopic, ErrInvalidName, ErrNameTaken, or the
// checkpoint's write/fsync error (the committed offset is then unknown; it
// is never reported higher than what was fsynced).
func (c *Coordinator) Ack(topic, group, session string, offset int64) (int64, error) {
	g, err := c.group(topic, group)
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
	if err := g.cp.Commit(offset + 1); err != nil {
		return 0, fmt.Errorf("commit group %s of topic %s at %d: %w", group, topic, offset+1, err)
	}
	l.expires = time.Now().Add(c.opts.LeaseTimeout)
	return offset + 1, nil
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

// Committed returns the durable committed offset of group on topic (0 for
// a group that never committed). Errors as Release.
func (c *Coordinator) Committed(topic, group string) (int64, error) {
	g, err := c.group(topic, group)
	if err != nil {
		return 0, err
	}
	return g.cp.Offset(), nil
}

// GroupStatus describes one consumer group known to the coordinator.
type GroupStatus struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Committed int64  `json:"committed"` // durable committed offset
	Held      bool   `json:"held"`      // a live session holds the group
	Next      int64  `json:"next"`      // the holder's delivered-up-to; Committed when free
}

// Groups returns the groups of topic used since this coordinator started
// (groups on disk but unused since then are not listed), sorted by name.
func (c *Coordinator) Groups(topic string) []GroupStatus {
	c.mu.Lock()
	var gs []*group
	for k, g := range c.groups {
		if k.topic == topic {
			gs = append(gs, g)
		}
	}
	c.mu.Unlock()
	now := time.Now()
	out := make([]GroupStatus, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		c.expireLocked(g, now)
		st := GroupStatus{Topic: topic, Group: g.name, Committed: g.cp.Offset()}
		st.Next = st.Committed
		if g.lease != nil {
			st.Held, st.Next = true, g.lease.next
		}
		g.mu.Unlock()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

func newSessionID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("groups: crypto/rand: %v", err)) // never happens on supported platforms
	}
	return hex.EncodeToString(b[:])
}
