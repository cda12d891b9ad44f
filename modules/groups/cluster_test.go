package groups

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// clusterNodes are two broker nodes (registry + coordinator each) over one
// store: the logs of one local backend, and leases and checkpoints in one
// lease table, as on a replicated backend.
type clusterNodes struct {
	table  *topicqueuetest.LeaseTable
	q      [2]*topicqueue.TopicQueue
	c      [2]*Coordinator
	topics [2]*topicqueue.Registry
}

func newClusterNodes(t *testing.T) *clusterNodes {
	t.Helper()
	root := t.TempDir()
	logs := &topicqueuetest.ClusterLogs{Inner: &topicqueue.LocalBackend{Root: root, Storage: storage.Options{Logger: zaptest.NewLogger(t)}}}
	s := &clusterNodes{table: topicqueuetest.NewLeaseTable()}
	for i, node := range []string{"a", "b"} {
		b := &topicqueuetest.ClusterBackend{Node: node, Logs: logs, Table: s.table}
		s.topics[i] = topicqueue.New(topicqueue.Options{Root: root, Backend: b})
		q, err := s.topics[i].GetOrCreate(testTopic)
		if err != nil {
			t.Fatal(err)
		}
		s.q[i] = q
		s.c[i] = New(s.topics[i], Options{Logger: zaptest.NewLogger(t), LeaseTimeout: time.Minute})
	}
	t.Cleanup(func() {
		for i := 1; i >= 0; i-- { // node a opened the logs: it closes them last
			_ = s.c[i].Stop(context.Background())
			if err := s.topics[i].Close(); err != nil {
				t.Error(err)
			}
		}
	})
	return s
}

// publish stores n durable messages through node a.
func (s *clusterNodes) publish(t *testing.T, n int) {
	t.Helper()
	for range n {
		if _, err := s.q[0].Log().Append(context.Background(), []byte(`{"n":1}`), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupHeldThroughOneNodeIsBusyOnAnother: a session started through
// node a holds the group on every node (GROUP_BUSY on b, naming where it
// is held); once a releases it, b's new session starts at what a
// committed.
func TestGroupHeldThroughOneNodeIsBusyOnAnother(t *testing.T) {
	s := newClusterNodes(t)
	s.publish(t, 4)
	sa, err := s.c[0].Acquire(testTopic, "g")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.c[1].Acquire(testTopic, "g"); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("acquire on node b while node a holds the group: %v, want GROUP_BUSY", err)
	}
	b, err := s.c[0].Fetch(context.Background(), testTopic, "g", sa, 2, 0)
	if err != nil || len(b.Entries) != 2 {
		t.Fatalf("fetch on a: %d entries, %v", len(b.Entries), err)
	}
	if _, err := s.c[0].Ack(testTopic, "g", sa, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := s.c[1].SeekCommitted(testTopic, "g", contract.SeekTarget{Kind: contract.SeekEarliest}); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("seek through node b while node a holds the group: %v, want GROUP_BUSY", err)
	}
	if released, err := s.c[0].Release(testTopic, "g", sa); err != nil || !released {
		t.Fatalf("release on a: %v, %v", released, err)
	}
	sb, err := s.c[1].Acquire(testTopic, "g")
	if err != nil {
		t.Fatalf("acquire on b after a released: %v", err)
	}
	b, err = s.c[1].Fetch(context.Background(), testTopic, "g", sb, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantOffsets(t, b, 2, 4)
}

// TestGroupSessionEndsWhenItsSharedLeaseIsLost: node a's session loses the
// group's shared lease (not renewed in time) and node b takes the group;
// a's late ack is refused (SESSION_EXPIRED) and never moves the committed
// offset, whether a noticed the loss or not.
func TestGroupSessionEndsWhenItsSharedLeaseIsLost(t *testing.T) {
	for _, notice := range []bool{true, false} {
		s := newClusterNodes(t)
		s.publish(t, 4)
		sa, err := s.c[0].Acquire(testTopic, "g")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.c[0].Fetch(context.Background(), testTopic, "g", sa, 4, 0); err != nil {
			t.Fatal(err)
		}
		s.table.Expire(testTopic, "g", notice)
		sb, err := s.c[1].Acquire(testTopic, "g")
		if err != nil {
			t.Fatalf("notice %v: acquire on b after a's lease expired: %v", notice, err)
		}
		if _, err := s.c[1].Fetch(context.Background(), testTopic, "g", sb, 4, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := s.c[1].Ack(testTopic, "g", sb, 0); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err = s.c[0].Ack(testTopic, "g", sa, 3)
			if errors.Is(err, ErrSessionExpired) || time.Now().After(deadline) {
				break
			}
			if err == nil {
				t.Fatalf("notice %v: node a's ack after losing the group was accepted", notice)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("notice %v: node a's late ack: %v, want SESSION_EXPIRED", notice, err)
		}
		if got := s.table.Committed(testTopic, "g"); got != 1 {
			t.Errorf("notice %v: committed = %d, want 1 (b's ack; a's late ack refused)", notice, got)
		}
	}
}

// A backend that cannot keep a shared group's per-message state (this
// test's cluster store, as JetStream) refuses mode=shared naming why, and
// exclusive groups work as before.
func TestSharedRefusedWithoutPerMessageState(t *testing.T) {
	s := newClusterNodes(t)
	_, err := s.c[0].AcquireMode(testTopic, "g", contract.GroupShared)
	if !errors.Is(err, ErrGroupMode) || !strings.Contains(err.Error(), "per-message state") {
		t.Fatalf("mode=shared on a cluster store: %v, want ErrGroupMode naming the per-message state", err)
	}
	if _, err := s.c[0].AcquireMode(testTopic, "g", contract.GroupExclusive); err != nil {
		t.Fatalf("exclusive after the refusal: %v", err)
	}
}
