package topicqueuetest

import (
	"context"
	"fmt"
	"sync"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// LeaseTable stands in for the store that several broker nodes share on a
// replicated backend: work leases per (topic, reader) with epochs that grow
// on every grant, and checkpoints fenced by epoch (a commit under an epoch
// older than the stored one is refused with contract.ErrStaleCommit). A
// lease lives until Expire or Release: there is no clock, so a test decides
// when a holder "was not renewed in time". Safe for concurrent use.
type LeaseTable struct {
	mu      sync.Mutex
	leases  map[readerKey]*Lease
	epochs  map[readerKey]uint64
	cps     map[readerKey]stored
	commits []Commit
	handles map[handleKey]*fencedCheckpoint
}

type handleKey struct {
	node string
	k    readerKey
}

type readerKey struct{ topic, reader string }

type stored struct {
	offset int64
	epoch  uint64
}

// Commit is one accepted checkpoint commit, in the order they happened.
type Commit struct {
	Node, Topic, Reader string
	Offset              int64
	Epoch               uint64
}

// NewLeaseTable returns an empty table.
func NewLeaseTable() *LeaseTable {
	return &LeaseTable{leases: map[readerKey]*Lease{}, epochs: map[readerKey]uint64{}, cps: map[readerKey]stored{},
		handles: map[handleKey]*fencedCheckpoint{}}
}

// Lease is a granted lease (contract.WorkLease).
type Lease struct {
	t     *LeaseTable
	k     readerKey
	node  string
	epoch uint64
	lost  chan struct{}
	once  sync.Once
}

func (l *Lease) Epoch() uint64         { return l.epoch }
func (l *Lease) Holder() string        { return l.node }
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Release gives the lease up when it is still the table's current one.
func (l *Lease) Release() error {
	l.t.mu.Lock()
	defer l.t.mu.Unlock()
	if l.t.leases[l.k] == l {
		delete(l.t.leases, l.k)
	}
	return nil
}

func (l *Lease) lose() { l.once.Do(func() { close(l.lost) }) }

// Acquire grants node the lease of reader on topic when no other node
// holds it (again to a node that holds it already: a new epoch, as after a
// restart), else an error wrapping contract.ErrLeaseHeld naming the holder.
func (t *LeaseTable) Acquire(node, topic, reader string) (contract.WorkLease, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := readerKey{topic, reader}
	if l := t.leases[k]; l != nil && l.node != node {
		return nil, fmt.Errorf("lease of %s on %s: %w: %s (epoch %d)", reader, topic, contract.ErrLeaseHeld, l.node, l.epoch)
	}
	t.epochs[k]++
	l := &Lease{t: t, k: k, node: node, epoch: t.epochs[k], lost: make(chan struct{})}
	t.leases[k] = l
	return l, nil
}

// Expire drops the current lease of reader on topic as if its holder had
// not renewed it in time, and returns it (nil when none). notice closes the
// holder's Lost channel; without it the holder is like a paused node that
// has not noticed yet.
func (t *LeaseTable) Expire(topic, reader string, notice bool) *Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := readerKey{topic, reader}
	l := t.leases[k]
	delete(t.leases, k)
	if l != nil && notice {
		l.lose()
	}
	return l
}

// Holder returns the node and epoch of the current lease of reader on
// topic; ok false when nobody holds it.
func (t *LeaseTable) Holder(topic, reader string) (node string, epoch uint64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.leases[readerKey{topic, reader}]; l != nil {
		return l.node, l.epoch, true
	}
	return "", 0, false
}

// Committed is the stored checkpoint of reader on topic (0 when none).
func (t *LeaseTable) Committed(topic, reader string) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cps[readerKey{topic, reader}].offset
}

// Commits returns every accepted commit so far, in order.
func (t *LeaseTable) Commits() []Commit {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Commit(nil), t.commits...)
}

// Checkpoint returns node's handle on the checkpoint of reader on topic
// (contract.EpochCheckpoint), the same one on every call, holding the
// stored offset as it was when first asked. Until BindEpoch it commits
// under epoch 0.
func (t *LeaseTable) Checkpoint(node, topic, reader string) contract.EpochCheckpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	hk := handleKey{node, readerKey{topic, reader}}
	if c := t.handles[hk]; c != nil {
		return c
	}
	c := &fencedCheckpoint{t: t, node: node, k: hk.k, offset: t.cps[hk.k].offset}
	t.handles[hk] = c
	return c
}

type fencedCheckpoint struct {
	t      *LeaseTable
	node   string
	k      readerKey
	mu     sync.Mutex
	epoch  uint64
	offset int64
}

func (c *fencedCheckpoint) Name() string { return c.k.reader }
func (c *fencedCheckpoint) Path() string { return "lease-table/" + c.k.topic + "/" + c.k.reader }

func (c *fencedCheckpoint) Offset() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

func (c *fencedCheckpoint) BindEpoch(epoch uint64) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch, c.offset = epoch, c.t.cps[c.k].offset
	return nil
}

func (c *fencedCheckpoint) Commit(next int64) error {
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.t.cps[c.k]; cur.epoch > c.epoch {
		return fmt.Errorf("commit %d of %s under epoch %d (stored epoch %d): %w", next, c.k.reader, c.epoch, cur.epoch, contract.ErrStaleCommit)
	}
	c.t.cps[c.k] = stored{next, c.epoch}
	c.t.commits = append(c.t.commits, Commit{Node: c.node, Topic: c.k.topic, Reader: c.k.reader, Offset: next, Epoch: c.epoch})
	c.offset = next
	return nil
}

// ClusterBackend is one broker node's view of a store shared by several
// nodes: the logs come from one Inner backend (opened once, whichever node
// asks first, and closed by the node that opened them), and leases and
// checkpoints from Table under the name Node. Give every node its own
// ClusterBackend over the same Logs and Table.
type ClusterBackend struct {
	Node  string
	Logs  *ClusterLogs
	Table *LeaseTable
}

// ClusterLogs opens each topic once through Inner for every node of a test.
type ClusterLogs struct {
	Inner topicqueue.Backend
	mu    sync.Mutex
	open  map[string]contract.Log
}

// Open returns the shared log of name wrapped as this node's.
func (b *ClusterBackend) Open(name string, create bool) (contract.Log, error) {
	s := b.Logs
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == nil {
		s.open = map[string]contract.Log{}
	}
	l, ok := s.open[name]
	first := !ok
	if !ok {
		var err error
		if l, err = s.Inner.Open(name, create); err != nil {
			return nil, err
		}
		s.open[name] = l
	}
	return &sharedLog{Log: l, b: b, topic: name, owner: first}, nil
}

// Topics lists Inner's topics.
func (b *ClusterBackend) Topics() (names, skipped []string, err error) { return b.Logs.Inner.Topics() }

// Lock takes nothing: nodes share the store.
func (b *ClusterBackend) Lock() (func() error, error) { return func() error { return nil }, nil }

type sharedLog struct {
	contract.Log
	b     *ClusterBackend
	topic string
	owner bool
}

func (l *sharedLog) AcquireWork(_ context.Context, reader string) (contract.WorkLease, error) {
	return l.b.Table.Acquire(l.b.Node, l.topic, reader)
}

func (l *sharedLog) OpenCheckpoint(name string) (contract.Checkpoint, error) {
	return l.b.Table.Checkpoint(l.b.Node, l.topic, name), nil
}

// Close closes the log for the node that opened it; the others' Close
// does nothing.
func (l *sharedLog) Close() error {
	if !l.owner {
		return nil
	}
	return l.Log.Close()
}
