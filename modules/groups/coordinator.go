package groups

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Defaults of Options that are configuration keys, taken from the
// section's defaults (one place for them: ConfigSection).
var (
	// defaultLeaseTimeout is the lease of a session without fetch or ack
	// (mmmq.broker.groups.lease-timeout, 30 s).
	defaultLeaseTimeout = ConfigSection.Default().LeaseTimeout
	// defaultMaxFetch caps the entries of one fetch
	// (mmmq.broker.groups.max-fetch, 1000).
	defaultMaxFetch = ConfigSection.Default().MaxFetch
	// defaultMaxDeliveries: a shared group's deliveries of a message
	// before its dead letter (mmmq.broker.groups.max-deliveries, 4).
	defaultMaxDeliveries = ConfigSection.Default().MaxDeliveries
	// defaultMaxUnacked bounds a shared group's window past its committed
	// offset (mmmq.broker.groups.max-unacked, 1000000).
	defaultMaxUnacked = ConfigSection.Default().MaxUnacked
)

// Defaults of Options that are not configuration keys.
const (
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
	// Budget is the broker's in-flight memory budget
	// (mmmq.broker.memory.max-inflight-bytes): the payload bytes of every
	// fetched batch are taken from it until Batch.Release, so concurrent
	// fetches together hold at most that much (see Fetch). Nil: unbounded.
	Budget *contract.Budget
	// Reserved reports whether a name belongs to another user of the
	// checkpoint name space (the dispatchers); such a group name is refused
	// with ErrNameTaken. Nil reserves nothing.
	Reserved func(name string) bool
	// Shared are the group globs of mmmq.broker.groups.shared: a new
	// group matching one is shared without mode=shared.
	Shared []string
	// MaxDeliveries is how many times a shared group hands a message out
	// before its dead letter; default 4, negative: never dead-letter
	// (mmmq.broker.groups.max-deliveries, where 0 means never).
	MaxDeliveries int
	// MaxUnacked bounds what a shared group reads past its committed
	// offset; default 1000000 (mmmq.broker.groups.max-unacked).
	MaxUnacked int64
	// Expired is what a shared group does with a message past its
	// expiresAt: ExpiredSkip ("", default) or ExpiredDeadLetter
	// (mmmq.broker.groups.expired). Exclusive groups always skip.
	Expired string
	// DeadLetterTopics maps a group name to its dead-letter topic
	// (mmmq.broker.groups.dead-letter-topics); the others use
	// dead-letter.<group>.
	DeadLetterTopics map[string]string
	// Publisher appends shared groups' dead letters (and republishes them
	// on a redrive); nil: a message past MaxDeliveries stays unfinished
	// (a fetch that meets it fails with 503) — set it, as Module does.
	Publisher dispatcher.Publisher
	// Logger receives lease and corruption events; default zap.NewNop().
	Logger *zap.Logger
}

func (o Options) withDefaults() Options {
	o.LeaseTimeout = orDefault(o.LeaseTimeout, defaultLeaseTimeout)
	o.MaxFetch = orDefault(o.MaxFetch, defaultMaxFetch)
	o.MaxGroups = orDefault(o.MaxGroups, DefaultMaxGroups)
	o.MaxFetchBytes = orDefault(o.MaxFetchBytes, DefaultMaxFetchBytes)
	o.MaxWait = orDefault(o.MaxWait, DefaultMaxWait)
	o.JanitorInterval = orDefault(o.JanitorInterval, min(max(o.LeaseTimeout/4, 10*time.Millisecond), 5*time.Second))
	if o.MaxDeliveries == 0 {
		o.MaxDeliveries = defaultMaxDeliveries
	}
	o.MaxUnacked = orDefault(o.MaxUnacked, defaultMaxUnacked)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return o
}

// orDefault is v, or def when v is zero or negative (unset).
func orDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Coordinator is the consumer-group coordinator shared by the HTTP routes
// and the line protocol. Per (topic, group) it keeps:
//
//   - the committed offset: the next offset the group has not acknowledged,
//     stored durably in the topic's checkpoint named after the group
//     (<topic>/checkpoints/<group>.checkpoint, 8 bytes big-endian, the file
//     dispatchers use; a new group starts at 0);
//   - at most one session (one active consumer per group, as in the log-queue
//     study; a second one gets GROUP_BUSY): an opaque id with a lease renewed
//     by every fetch and ack;
//   - the session's delivered-up-to offset: where its next fetch starts.
//
// A new session starts delivering at the committed offset, so whatever the
// previous session fetched and did not acknowledge is delivered again
// (at-least-once: unacknowledged messages are redelivered from the committed
// offset after a disconnect).
//
// Corrupt entries found at read time (CRC mismatch: the integrity check)
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
	// cpErrs are the groups whose checkpoint could not be opened (read)
	// when a consumer last tried to use them, until one opens: retention
	// must not guess their position (CheckpointError). At most MaxGroups
	// entries plus one per topic (group "": the failures past the cap).
	// Guarded by mu.
	cpErrs map[key]cpErr

	drainOnce sync.Once
	drained   chan struct{} // closed by Drain: waiting fetches return
	// watchers are the goroutines that end a session when its lease in a
	// cluster store is lost (watchWork); Stop waits for them.
	watchers sync.WaitGroup

	lifeMu      sync.Mutex
	stopJanitor chan struct{}
	janitorDone chan struct{}

	// expired counts messages retention deleted before a group read them
	// (mmmq_retention_skipped_total{kind="group"}).
	expired atomic.Uint64
	// ttlExpired counts messages passed over past their expiresAt
	// (mmmq_messages_expired_total{kind="group"}).
	ttlExpired atomic.Uint64
}

// RetentionSkipped is the number of messages retention deleted before a
// consumer group read them (a group whose committed offset was below the
// topic's start offset continues from the start offset), since start.
func (c *Coordinator) RetentionSkipped() uint64 { return c.expired.Load() }

type key struct{ topic, group string }

// cpErr is a failed open of a group's checkpoint: when (Unix ns) and why.
type cpErr struct {
	at  int64
	err error
}

// group is one (topic, group). mu guards lease and serialises acks (the
// commit fsync runs under it, so committed offsets are written in order and
// never move back). Long-poll waits run without it.
type group struct {
	topic *topicqueue.TopicQueue
	name  string
	cp    contract.Checkpoint

	mu    sync.Mutex
	lease *lease // nil: free (exclusive groups)
	// mode is contract.GroupExclusive or GroupShared once known (stored,
	// or set by the first session); "" for a group not used yet.
	mode string
	// shared is the state of a shared group (nil otherwise).
	shared *sharedGroup

	// active is when the group was opened by this coordinator, or last
	// fetched or committed (Unix ns): what retention's keep-unconsumed
	// compares with mmmq.broker.retention.group-idle.
	active atomic.Int64
	// expiredTo: offsets below it that retention deleted were already
	// counted (and warned about) as never delivered to this group, so a
	// consumer that reconnects without committing is not counted again.
	// Only the session holder writes it.
	expiredTo atomic.Int64
	// ttlExpiredTo: expired messages below it were already counted
	// (exclusive mode; expiry.go). Guarded by mu.
	ttlExpiredTo int64
}

// New returns a coordinator over reg's topics. It works without Start
// (leases then expire lazily only).
//
// A topic deleted from reg (topicqueue.Registry.Delete) has its groups
// dropped first: their sessions end (a waiting fetch returns
// ErrSessionExpired), acks and commits in progress finish before the topic
// closes, and a topic created again under the name starts with new groups
// at offset 0.
func New(reg *topicqueue.Registry, opts Options) *Coordinator {
	opts = opts.withDefaults()
	c := &Coordinator{
		reg:     reg,
		opts:    opts,
		log:     opts.Logger,
		groups:  map[key]*group{},
		cpErrs:  map[key]cpErr{},
		drained: make(chan struct{}),
	}
	reg.SubscribeDeletes(c.dropTopic)
	return c
}

// dropTopic forgets every group of topic q, which is being deleted: each
// session's lease is released once the fetch read or ack that holds the
// group's lock, if any, has finished.
func (c *Coordinator) dropTopic(q *topicqueue.TopicQueue) {
	c.mu.Lock()
	var gs []*group
	for k, g := range c.groups {
		if k.topic == q.Name() {
			gs = append(gs, g)
			delete(c.groups, k)
		}
	}
	for k := range c.cpErrs {
		if k.topic == q.Name() {
			delete(c.cpErrs, k)
		}
	}
	c.mu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		if l := g.lease; l != nil {
			c.endLocked(g, l)
		}
		if g.shared != nil {
			for _, m := range g.shared.sessions {
				c.endMember(g, m, "topic deleted")
			}
		}
		g.mu.Unlock()
	}
	if len(gs) > 0 {
		c.log.Info("consumer groups dropped: topic deleted", zap.String("topic", q.Name()), zap.Int("groups", len(gs)))
	}
}

// LeaseTimeout is the configured lease.
func (c *Coordinator) LeaseTimeout() time.Duration { return c.opts.LeaseTimeout }

// MaxFetch is the cap on entries per Fetch.
func (c *Coordinator) MaxFetch() int { return c.opts.MaxFetch }

// MaxWait is the cap on the long-poll wait of a Fetch.
func (c *Coordinator) MaxWait() time.Duration { return c.opts.MaxWait }

// Start checks the configured shared globs against the stored groups
// (CheckConfiguredShared: a stored exclusive group matching one is an
// error) and launches the janitor that releases expired leases every
// JanitorInterval. It returns at once.
func (c *Coordinator) Start(context.Context) error {
	if err := c.CheckConfiguredShared(); err != nil {
		return err
	}
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
// release local leases: sessions simply end with the process, and the
// committed offsets are already durable. Sessions holding a lease in a
// cluster store (one store shared by several broker nodes) are ended and their leases given
// back, so that another node may take the group at once instead of after
// the lease timeout.
func (c *Coordinator) Stop(context.Context) error {
	c.Drain(context.Background())
	for _, g := range c.allGroups() {
		g.mu.Lock()
		if l := g.lease; l != nil && l.work != nil {
			c.endLocked(g, l)
		}
		g.mu.Unlock()
	}
	c.watchers.Wait()
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

// lookup checks the names of (topic, name) and returns the topic.
// Errors: ErrInvalidName, ErrNameTaken, ErrUnknownTopic.
func (c *Coordinator) lookup(topic, name string) (*topicqueue.TopicQueue, error) {
	if err := contract.ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	if contract.ValidCheckpointName(name) != nil {
		return nil, fmt.Errorf("%w: group name %q: want 1-200 characters of [A-Za-z0-9_.-], not starting with '.'", ErrInvalidName, name)
	}
	if c.opts.Reserved != nil && c.opts.Reserved(name) {
		return nil, fmt.Errorf("%w: %q is the name of a dispatcher (they share the checkpoint files)", ErrNameTaken, name)
	}
	q, ok := c.reg.Get(topic)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	return q, nil
}

// tracked returns the state of (topic, name) when this coordinator tracks
// it, without creating it: for requests that need a session (acks, nacks,
// releases), which only a tracked group can have, so that refused
// requests leave nothing behind. Errors: ErrInvalidName, ErrNameTaken,
// ErrUnknownTopic, and ErrSessionExpired when the group is not tracked.
func (c *Coordinator) tracked(topic, name, session string) (*group, error) {
	q, err := c.lookup(topic, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	g := c.groups[key{topic, name}]
	c.mu.Unlock()
	if g == nil || g.topic != q {
		return nil, fmt.Errorf("%w: session %q does not hold group %s of topic %s (no session of it since the broker started)",
			ErrSessionExpired, session, name, topic)
	}
	return g, nil
}

// group returns the state of (topic, name), creating it on first use.
func (c *Coordinator) group(topic, name string) (*group, error) {
	q, err := c.lookup(topic, name)
	if err != nil {
		return nil, err
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
		err = fmt.Errorf("open group %s of topic %s: %w", name, topic, err)
		if _, ok := c.cpErrs[k]; !ok && len(c.cpErrs) >= c.opts.MaxGroups {
			// Bounded like the groups: past the cap, one entry per
			// topic (group "") stands for the rest until it ages out.
			k.group = ""
		}
		c.cpErrs[k] = cpErr{at: time.Now().UnixNano(), err: err}
		return nil, err
	}
	delete(c.cpErrs, k)
	g := &group{topic: q, name: name, cp: cp}
	if gm, ok := cp.(contract.GroupModer); ok {
		if g.mode, err = gm.GroupMode(); err != nil {
			return nil, fmt.Errorf("open group %s of topic %s: %w", name, topic, err)
		}
		if g.mode == contract.GroupShared {
			if err := c.startShared(g); err != nil {
				return nil, err
			}
		}
	}
	g.active.Store(time.Now().UnixNano())
	c.groups[k] = g
	return g, nil
}

// Holding returns the lowest committed offset among the groups of topic
// that this coordinator opened, or that fetched or committed, at or after
// since, and false when there is none: the offset from which retention's
// keep-unconsumed must keep the topic's data. Only groups used since the
// broker started count: a group's checkpoint on disk holds nothing until a
// consumer uses the group again.
func (c *Coordinator) Holding(topic string, since time.Time) (int64, bool) {
	_, off, ok := c.HoldingGroup(topic, since)
	return off, ok
}

// HoldingGroup is Holding with the name of the group at that offset (the
// first by name when several are).
func (c *Coordinator) HoldingGroup(topic string, since time.Time) (group string, offset int64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, g := range c.groups {
		if k.topic != topic || g.active.Load() < since.UnixNano() {
			continue
		}
		if off := g.cp.Offset(); !ok || off < offset || off == offset && k.group < group {
			group, offset, ok = k.group, off, true
		}
	}
	return group, offset, ok
}

// CheckpointError returns the error of the latest failed open of the
// checkpoint of a group of topic (an I/O error reading
// <topic>/checkpoints/<group>.checkpoint) that a consumer tried to use at
// or after since, or nil when there is none. A failed group is not in
// Holding: its committed offset is unknown, so retention's keep-unconsumed
// keeps the topic whole while this is non-nil (modules/retention). The
// failure is forgotten once the group's checkpoint opens, or when the
// topic is deleted. With several failed groups the error is the one of
// the first group by name.
func (c *Coordinator) CheckpointError(topic string, since time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first *key
	for k, e := range c.cpErrs {
		if k.topic != topic || e.at < since.UnixNano() {
			continue
		}
		if first == nil || k.group < first.group {
			k := k
			first = &k
		}
	}
	if first == nil {
		return nil
	}
	return c.cpErrs[*first].err
}

// GroupStatus describes one consumer group known to the coordinator.
type GroupStatus struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Committed int64  `json:"committed"` // durable committed offset
	Held      bool   `json:"held"`      // a live session holds the group
	Next      int64  `json:"next"`      // the holder's delivered-up-to; Committed when free (shared: the next offset to read)
	Mode      string `json:"mode,omitempty"`
	Sessions  int    `json:"sessions,omitempty"` // shared: live sessions
	InFlight  int    `json:"inFlight,omitempty"` // shared: messages leased
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
		st := GroupStatus{Topic: topic, Group: g.name, Committed: g.cp.Offset(), Mode: g.mode}
		st.Next = st.Committed
		if g.lease != nil {
			st.Held, st.Next = true, g.lease.next
		}
		if s := g.shared; s != nil {
			c.expireShared(g, now)
			st.Held, st.Next, st.Sessions, st.InFlight = len(s.sessions) > 0, s.scan, len(s.sessions), len(s.out)
		}
		g.mu.Unlock()
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// Topics returns the names of the topics with a consumer group this
// coordinator used since it started, sorted, without duplicates: the
// topics worth a List when there are many (List reads the topic's stored
// checkpoints), as the status page (plugins/ui) does.
func (c *Coordinator) Topics() []string {
	c.mu.Lock()
	seen := map[string]bool{}
	for k := range c.groups {
		seen[k.topic] = true
	}
	c.mu.Unlock()
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
