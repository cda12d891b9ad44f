package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// nodeTopic is one node's view of a shared topic: the payloads of
// memTopic, leases and checkpoints from the shared table.
type nodeTopic struct {
	*memTopic
	node string
	lt   *topicqueuetest.LeaseTable
}

func (n *nodeTopic) AcquireWork(_ context.Context, reader string) (contract.WorkLease, error) {
	return n.lt.Acquire(n.node, n.name, reader)
}

func (n *nodeTopic) Checkpoint(name string) (contract.Checkpoint, error) {
	return n.lt.Checkpoint(n.node, n.name, name), nil
}

// TestLeaseOneNodeDeliversThenTakeover: two nodes run the same dispatcher
// over one shared topic; only the lease holder delivers (the other stands
// by), every push carries the holder's epoch, and when the holder's node
// is gone the other node continues from the committed checkpoint under a
// greater epoch, in order, with nothing skipped. (A holder that loses its
// lease while alive races the other node for it: TestLeaseStaleHolderCannotCommit.)
func TestLeaseOneNodeDeliversThenTakeover(t *testing.T) {
	c := newConsumer(t, nil)
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(5)
	lt := topicqueuetest.NewLeaseTable()
	a, b := &nodeTopic{tp, "a", lt}, &nodeTopic{tp, "b", lt}
	ma := startManager(t, newMemSource(a), testOptions(), New("d", c.host(t), MustPattern("t")))
	eventually(t, "node a delivers 5", func() bool { return lt.Committed("t", "d") == 5 })
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

	stopManager(t, ma)        // node a is gone
	lt.Expire("t", "d", true) // and its lease is not renewed: b takes over
	tp.publish(5)
	eventually(t, "node b delivers the rest", func() bool { return lt.Committed("t", "d") == 10 })
	if st := status(mb, "d", "t"); st.LeaseEpoch != 2 || st.State == StateStandby {
		t.Errorf("new holder's status = %+v, want lease epoch 2, not standby", st)
	}
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
	lt := topicqueuetest.NewLeaseTable()
	a, b := &nodeTopic{tp, "a", lt}, &nodeTopic{tp, "b", lt}
	ma := startManager(t, newMemSource(a), testOptions(), New("d", c.host(t), MustPattern("t")))
	<-held
	stale := lt.Expire("t", "d", false) // a's lease expired; a has not noticed
	mb := startManager(t, newMemSource(b), testOptions(), New("d", c.host(t), MustPattern("t")))
	tp.publish(2)
	eventually(t, "node b delivers from a's checkpoint", func() bool { return lt.Committed("t", "d") == 5 })
	close(release) // a wakes up: its ACK of offset 2 arrives, its commit is refused
	eventually(t, "node a gives up its stale lease", func() bool { return status(ma, "d", "t").State == StateStandby })
	if got := lt.Committed("t", "d"); got != 5 {
		t.Errorf("checkpoint = %d after the stale holder's ACK, want 5 (never moved back)", got)
	}
	for _, c := range lt.Commits() {
		if c.Node == "a" && c.Epoch != stale.Epoch() {
			t.Errorf("commit %+v by node a under an epoch it never held", c)
		}
		if c.Node == "a" && c.Offset > 2 {
			t.Errorf("node a committed %+v after its lease was taken over", c)
		}
	}
	if node, epoch, ok := lt.Holder("t", "d"); !ok || node != "b" || epoch != 2 {
		t.Errorf("lease held by %q under epoch %d (held %v), want b under epoch 2", node, epoch, ok)
	}
	_ = mb
}
