package groups

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// GroupInfo is one consumer group of a Listing.
type GroupInfo struct {
	// Group is the group name.
	Group string `json:"group"`
	// Committed is the group's durable committed offset: the next offset
	// it has not acknowledged (0 for a group that never committed).
	Committed int64 `json:"committed"`
	// Lag is the messages the group has still to acknowledge:
	// highWatermark - max(committed, startOffset), never below 0. Messages
	// retention deleted before the group read them are not lag.
	Lag int64 `json:"lag"`
	// Held: a live session holds the group.
	Held bool `json:"held"`
	// LeaseExpiresInMs is the milliseconds left on the holder's lease
	// (renewed by its every fetch and ack; a waiting fetch holds it for at
	// least another lease). Only when Held.
	LeaseExpiresInMs *int64 `json:"leaseExpiresInMs,omitempty"`
	// Mode is "exclusive" or "shared"; omitted for a group whose mode is
	// not stored (never used, or a backend that does not store modes).
	Mode string `json:"mode,omitempty"`
	// InFlight (shared groups) is the messages handed out and not
	// finished; Redelivered the hand-outs of a message handed out before
	// and DeadLettered the messages sent to the dead-letter topic, both
	// since the broker started; Sessions the live sessions, by id.
	InFlight     *int64        `json:"inFlight,omitempty"`
	Redelivered  *uint64       `json:"redelivered,omitempty"`
	DeadLettered *uint64       `json:"deadLettered,omitempty"`
	Sessions     []SessionInfo `json:"sessions,omitempty"`
}

// Listing is the consumer groups of one topic (GET /topics/{topic}/groups).
type Listing struct {
	Topic string `json:"topic"`
	// HighWatermark is one past the last readable offset.
	HighWatermark int64 `json:"highWatermark"`
	// StartOffset is the log start offset: the first offset still stored.
	StartOffset int64 `json:"startOffset"`
	// Groups is sorted by name; [] (never null) when there is none.
	Groups []GroupInfo `json:"groups"`
}

// List returns the consumer groups of topic, sorted by name: the groups
// this coordinator used since it started, and the checkpoints stored for
// the topic that are not a dispatcher's (Options.Reserved), so that groups
// show after a restart too. Stored checkpoints are listed only when the
// topic's log can enumerate them (contract.CheckpointLister). Listing a
// group does not make it count for retention's keep-unconsumed (Holding).
// Errors: ErrInvalidName, ErrUnknownTopic, or the listing's or a
// checkpoint's I/O error.
func (c *Coordinator) List(topic string) (Listing, error) {
	if err := contract.ValidateTopic(topic); err != nil {
		return Listing{}, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	q, ok := c.reg.Get(topic)
	if !ok {
		return Listing{}, fmt.Errorf("%w: %q", ErrUnknownTopic, topic)
	}
	out := Listing{Topic: topic, StartOffset: q.StartOffset(), HighWatermark: q.HighWatermark(), Groups: []GroupInfo{}}
	now := time.Now()
	known := map[string]bool{}
	for _, g := range c.topicGroups(q) {
		known[g.name] = true
		out.Groups = append(out.Groups, c.infoOf(g, now, out))
	}
	stored, err := c.storedCheckpoints(q)
	if err != nil {
		return Listing{}, fmt.Errorf("list groups of topic %s: %w", topic, err)
	}
	for _, name := range stored {
		if known[name] || (c.opts.Reserved != nil && c.opts.Reserved(name)) {
			continue
		}
		cp, err := q.Checkpoint(name)
		if err != nil {
			return Listing{}, fmt.Errorf("list groups of topic %s: open checkpoint %s: %w", topic, name, err)
		}
		info := GroupInfo{Group: name, Committed: cp.Offset(), Lag: lag(out, cp.Offset())}
		if gm, ok := cp.(contract.GroupModer); ok {
			var err error
			if info.Mode, err = gm.GroupMode(); err != nil {
				// One unreadable mode hides no other group: it is
				// listed without a mode (its fetch names the file).
				c.log.Warn("consumer group listed without its mode", zap.String("topic", topic), zap.String("group", name), zap.Error(err))
			}
		}
		if info.Mode == contract.GroupShared {
			// Not used since the broker started: no session, nothing in flight.
			var zero int64
			var none uint64
			info.InFlight, info.Redelivered, info.DeadLettered, info.Sessions = &zero, &none, &none, []SessionInfo{}
		}
		out.Groups = append(out.Groups, info)
	}
	sort.Slice(out.Groups, func(i, j int) bool { return out.Groups[i].Group < out.Groups[j].Group })
	return out, nil
}

// topicGroups returns the groups of q (this incarnation of the topic) the
// coordinator tracks.
func (c *Coordinator) topicGroups(q *topicqueue.TopicQueue) []*group {
	c.mu.Lock()
	defer c.mu.Unlock()
	var gs []*group
	for k, g := range c.groups {
		if k.topic == q.Name() && g.topic == q {
			gs = append(gs, g)
		}
	}
	return gs
}

// infoOf is g's GroupInfo at now, its lag measured against l's offsets.
func (c *Coordinator) infoOf(g *group, now time.Time, l Listing) GroupInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	c.expireLocked(g, now)
	info := GroupInfo{Group: g.name, Committed: g.cp.Offset(), Mode: g.mode}
	info.Lag = lag(l, info.Committed)
	if g.shared != nil {
		c.sharedInfo(g, now, &info)
	}
	if g.lease != nil {
		ms := c.leaseLeft(g.lease, now).Milliseconds()
		info.Held, info.LeaseExpiresInMs = true, &ms
	}
	return info
}

// lag is l.HighWatermark - max(committed, l.StartOffset), at least 0.
func lag(l Listing, committed int64) int64 {
	return max(l.HighWatermark-max(committed, l.StartOffset), 0)
}

// warnNoLister logs, once per process, that a backend cannot list its
// stored checkpoints.
var warnNoLister sync.Once

// storedCheckpoints is the names of q's stored checkpoints, or none when
// its log cannot list them (no contract.CheckpointLister: a warning, once,
// says that the listings then miss the groups not used since it opened).
func (c *Coordinator) storedCheckpoints(q *topicqueue.TopicQueue) ([]string, error) {
	if cl, ok := q.Log().(contract.CheckpointLister); ok {
		return cl.Checkpoints()
	}
	warnNoLister.Do(func() {
		c.log.Warn("the storage backend cannot list stored checkpoints: consumer-group listings show only the groups used since their topic was opened",
			zap.String("topic", q.Name()), zap.String("log-type", fmt.Sprintf("%T", q.Log())))
	})
	return nil, nil
}

// Seeked is the result of SeekCommitted.
type Seeked struct {
	Previous  int64 // the committed offset before the seek
	Committed int64 // the committed offset now, durable
}

// SeekCommitted moves the durable committed offset of group on topic to
// the offset to names, forwards or backwards (the one way a committed
// offset moves back), and returns after the fsync. The next session of the
// group starts there, and retention's keep-unconsumed (Holding) counts the
// new value at once (a seek is activity). A group never used before may be
// sought: its checkpoint is created. It is refused while a session holds
// the group, so that a consumer's acks never race it.
//
// Errors: *BusyError (ErrGroupBusy) while a live session holds the group;
// an offset below the log start offset is a *contract.OffsetExpiredError
// (410 OFFSET_EXPIRED with the start offset); an offset above the high
// watermark is ErrBeyondHighWatermark; a negative offset or an unknown
// Kind is a 400 *contract.InputError; ErrInvalidName, ErrNameTaken,
// ErrUnknownTopic, ErrTooManyGroups; a read error of the timestamp search;
// the checkpoint's write or fsync error (the stored value is then unknown).
func (c *Coordinator) SeekCommitted(topic, group string, to contract.SeekTarget) (Seeked, error) {
	q, err := c.lookup(topic, group)
	if err != nil {
		return Seeked{}, err
	}
	// Resolved before the group is tracked: a refused seek of a new name
	// leaves nothing behind (a tracked group counts for Holding).
	target, err := seekOffset(q, to)
	if err != nil {
		return Seeked{}, fmt.Errorf("seek group %s of topic %s: %w", group, topic, err)
	}
	g, err := c.group(topic, group)
	if err != nil {
		return Seeked{}, err
	}
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	c.expireLocked(g, now)
	if l := g.lease; l != nil {
		return Seeked{}, &BusyError{Topic: topic, Group: group, LeaseLeft: c.leaseLeft(l, now)}
	}
	if s := g.shared; s != nil {
		c.expireShared(g, now)
		if n := len(s.sessions); n > 0 {
			return Seeked{}, &BusyError{Topic: topic, Group: group, LeaseLeft: c.opts.LeaseTimeout,
				Full: fmt.Sprintf("%d live sessions (a seek of a shared group waits until none is left)", n)}
		}
	}
	// On a backend shared by several nodes the group may be held through
	// another node: busy too. Held here for the seek, then given back.
	work, err := c.acquireWork(g)
	if err != nil {
		return Seeked{}, err
	}
	if work != nil {
		defer func() { _ = work.Release() }()
	}
	prev := g.cp.Offset()
	if err := contract.SeekCheckpoint(g.cp, target); err != nil {
		return Seeked{}, fmt.Errorf("seek group %s of topic %s to %d: %w", group, topic, target, err)
	}
	if s := g.shared; s != nil {
		// Acks past the old offset and delivery counts are forgotten
		// (SeekCheckpoint cleared them durably): a replay delivers anew.
		g.shared = newShared(g, s.rec)
		g.shared.redelivered, g.shared.deadLettered, g.shared.expiredLeases = s.redelivered, s.deadLettered, s.expiredLeases
		s.signal()
	}
	g.active.Store(time.Now().UnixNano())
	return Seeked{Previous: prev, Committed: target}, nil
}

// seekOffset resolves to against q's current offsets.
func seekOffset(q *topicqueue.TopicQueue, to contract.SeekTarget) (int64, error) {
	switch to.Kind {
	case contract.SeekEarliest:
		return q.StartOffset(), nil
	case contract.SeekLatest:
		return q.HighWatermark(), nil
	case contract.SeekTimestamp:
		off, err := q.OffsetAt(to.Time)
		if err != nil {
			return 0, fmt.Errorf("find the offset of timestamp %d: %w", to.Time.UnixMilli(), err)
		}
		return off, nil
	case contract.SeekOffset:
		off := to.Offset
		switch start, hw := q.StartOffset(), q.HighWatermark(); {
		case off < 0:
			return 0, contract.BadRequest("offset %d is negative", off)
		case off < start:
			return 0, &contract.OffsetExpiredError{Topic: q.Name(), Offset: off, StartOffset: start}
		case off > hw:
			return 0, fmt.Errorf("%w: offset %d is above the high watermark %d of topic %s", ErrBeyondHighWatermark, off, hw, q.Name())
		}
		return off, nil
	}
	return 0, contract.BadRequest("unknown seek kind %d", to.Kind)
}
