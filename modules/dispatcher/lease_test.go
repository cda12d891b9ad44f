package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// leaseTable is a store shared by several simulated broker nodes: leases
// per (reader, topic) and checkpoints fenced by lease epoch, as a
// replicated backend keeps them.
type leaseTable struct {
	mu     sync.Mutex
	holder map[string]*fakeLease // reader → live lease
	epochs map[string]uint64     // reader → last epoch granted
	cps    map[string][2]uint64  // reader → {offset, epoch of the commit}
	log    []string              // "node:offset:epoch" of every accepted commit
}

func newLeaseTable() *leaseTable {
	return &leaseTable{holder: map[string]*fakeLease{}, epochs: map[string]uint64{}, cps: map[string][2]uint64{}}
}

type fakeLease struct {
	node  string
	epoch uint64
	lost  chan struct{}
	once  sync.Once
}

func (l *fakeLease) Epoch() uint64         { return l.epoch }
func (l *fakeLease) Holder() string        { return l.node }
func (l *fakeLease) Lost() <-chan struct{} { return l.lost }
func (l *fakeLease) Release() error        { return nil }
func (l *fakeLease) lose()                 { l.once.Do(func() { close(l.lost) }) }

// expire drops reader's lease as if it was not renewed; notice false
// models a paused holder that has not noticed yet (its Lost stays open).
func (lt *leaseTable) expire(reader string, notice bool) *fakeLease {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	l := lt.holder[reader]
	delete(lt.holder, reader)
	if l != nil && notice {
		l.lose()
	}
	return l
}

func (lt *leaseTable) current(reader string) *fakeLease {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return lt.holder[reader]
}

// nodeTopic is one node's view of a shared topic: the payloads of tp, and
// leases and checkpoints from the shared table.
type nodeTopic struct {
	*memTopic
	node string
	lt   *leaseTable
}

func (n *nodeTopic) AcquireWork(_ context.Context, reader string) (contract.WorkLease, error) {
	n.lt.mu.Lock()
	defer n.lt.mu.Unlock()
	if l := n.lt.holder[reader]; l != nil && l.node != n.node {
		return nil, fmt.Errorf("acquire lease of %s: %w: %s", reader, contract.ErrLeaseHeld, l.node)
	}
	n.lt.epochs[reader]++
	l := &fakeLease{node: n.node, epoch: n.lt.epochs[reader], lost: make(chan struct{})}
	n.lt.holder[reader] = l
	return l, nil
}

func (n *nodeTopic) Checkpoint(name string) (contract.Checkpoint, error) {
	return &fencedCheckpoint{n: n, name: name}, nil
}

// fencedCheckpoint is one node's handle on a shared checkpoint.
type fencedCheckpoint struct {
	n      *nodeTopic
	name   string
	epoch  uint64
	offset int64
}

func (c *fencedCheckpoint) Name() string  { return c.name }
func (c *fencedCheckpoint) Path() string  { return "table/" + c.name }
func (c *fencedCheckpoint) Offset() int64 { return c.offset }

func (c *fencedCheckpoint) BindEpoch(epoch uint64) error {
	c.n.lt.mu.Lock()
	defer c.n.lt.mu.Unlock()
	c.epoch, c.offset = epoch, int64(c.n.lt.cps[c.name][0])
	return nil
}

func (c *fencedCheckpoint) Commit(next int64) error {
	lt := c.n.lt
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if cur := lt.cps[c.name]; cur[1] > c.epoch {
		return fmt.Errorf("commit %d under epoch %d (stored epoch %d): %w", next, c.epoch, cur[1], contract.ErrStaleCommit)
	}
	lt.cps[c.name] = [2]uint64{uint64(next), c.epoch}
	lt.log = append(lt.log, fmt.Sprintf("%s:%d:%d", c.n.node, next, c.epoch))
	c.offset = next
	return nil
}

func (lt *leaseTable) committed(reader string) int64 {
	lt.mu.Lock()
	defer lt.mu.Unlock()
	return int64(lt.cps[reader][0])
}

// TestLeaseOneNodeDeliversThenTakeover: two nodes run the same dispatcher
// over one shared topic; only the lease holder delivers (the other stands
// by), every push carries the holder's epoch, and when the holder's lease
// is lost the other node continues from the committed checkpoint under a
// greater epoch, in order, with nothing skipped.
func TestLeaseOneNodeDeliversThenTakeover(t *testing.T) {
	c := newConsumer(t, nil)
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(5)
	lt := newLeaseTable()
	a, b := &nodeTopic{tp, "a", lt}, &nodeTopic{tp, "b", lt}
	ma := startManager(t, newMemSource(a), testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "node a delivers 5", func() bool { return lt.committed("d") == 5 })
	mb := startManager(t, newMemSource(b), testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "node b stands by", func() bool { return status(mb, "d", "t").State == StateStandby })
	if st := status(ma, "d", "t"); st.LeaseEpoch != 1 || st.State == StateStandby {
		t.Fatalf("holder status = %+v, want lease epoch 1, not standby", st)
	}
	for _, r := range c.requests() {
		if r.LeaseEpoch != 1 {
			t.Fatalf("push of offset %d carried mmmq-lease-epoch %d, want 1", r.Offset, r.LeaseEpoch)
		}
	}

	lt.expire("d", true) // node a's lease is not renewed: a stops, b takes over
	tp.publish(5)
	eventually(t, "node b delivers the rest", func() bool { return lt.committed("d") == 10 })
	if st := status(mb, "d", "t"); st.LeaseEpoch != 2 {
		t.Errorf("new holder's lease epoch = %d, want 2", st.LeaseEpoch)
	}
	eventually(t, "node a stands by", func() bool { return status(ma, "d", "t").State == StateStandby })
	rs := c.requests()
	wantOffsets(t, "offsets delivered across the takeover", rs, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	for _, r := range rs[5:] {
		if r.LeaseEpoch != 2 {
			t.Errorf("push of offset %d after the takeover carried epoch %d, want 2", r.Offset, r.LeaseEpoch)
		}
	}
}

// TestLeaseStaleHolderCannotCommit: a holder paused past its lease (it has
// not noticed the loss) finishes a push after another node took over and
// committed; its commit is refused (the checkpoint never moves back), it
// stops delivering without retrying the commit, and it stands by.
func TestLeaseStaleHolderCannotCommit(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	held := make(chan struct{})
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.LeaseEpoch == 1 && r.Offset == 2 {
			once.Do(func() { close(held) })
			<-release // node a's push hangs: node a is "paused"
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(3)
	lt := newLeaseTable()
	a, b := &nodeTopic{tp, "a", lt}, &nodeTopic{tp, "b", lt}
	ma := startManager(t, newMemSource(a), testOptions(), New("d", c.host(t), MustPattern("t")))
	<-held
	stale := lt.expire("d", false) // a's lease expired; a has not noticed
	mb := startManager(t, newMemSource(b), testOptions(), New("d", c.host(t), MustPattern("t")))
	tp.publish(2)
	eventually(t, "node b delivers from a's checkpoint", func() bool { return lt.committed("d") == 5 })
	close(release) // a wakes up: its ACK of offset 2 arrives, its commit is refused
	eventually(t, "node a gives up its stale lease", func() bool { return status(ma, "d", "t").State == StateStandby })
	if got := lt.committed("d"); got != 5 {
		t.Errorf("checkpoint = %d after the stale holder's ACK, want 5 (never moved back)", got)
	}
	lt.mu.Lock()
	for _, e := range lt.log {
		var node string
		var off, epoch uint64
		if _, err := fmt.Sscanf(e, "%1s:%d:%d", &node, &off, &epoch); err == nil && node == "a" && epoch != stale.epoch {
			t.Errorf("commit %q by node a under an epoch it never held", e)
		}
		if node == "a" && off > 2 {
			t.Errorf("node a committed %q after its lease was taken over", e)
		}
	}
	lt.mu.Unlock()
	if cur := lt.current("d"); cur == nil || cur.node != "b" || cur.epoch != 2 {
		t.Errorf("lease = %+v, want held by b under epoch 2", cur)
	}
	_ = mb
}
