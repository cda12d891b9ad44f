package jetstream

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	js "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// kvLeaseTimeout is the lease timeout of the tests: short, so that expiry
// tests take about a second each.
const kvLeaseTimeout = time.Second

// kvLeaseStores returns n lease stores over one embedded server, each on
// its own connection (n nodes), and the server.
func kvLeaseStores(t *testing.T, n int) ([]*LeaseStore, *server.Server) {
	t.Helper()
	s := kvServer(t)
	stores := make([]*LeaseStore, n)
	for i := range stores {
		ls, err := NewLeaseStore(context.Background(), kvConnect(t, s), "mmmq", 1, kvLeaseTimeout)
		require.NoError(t, err)
		stores[i] = ls
	}
	return stores, s
}

// kvAcquireEventually retries Acquire while the lease is held, for up to
// 15 s (far above the 1 s timeout: no assertion on how fast the server
// expires keys, only that it does).
func kvAcquireEventually(t *testing.T, s *LeaseStore, key, holder string) *Lease {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		l, err := s.Acquire(context.Background(), key, holder)
		if err == nil {
			return l
		}
		require.ErrorIs(t, err, ErrLeaseHeld)
		if time.Now().After(deadline) {
			t.Fatalf("lease %s still held after 15s: %v", key, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestLeaseHeldNamesHolder(t *testing.T) {
	st, _ := kvLeaseStores(t, 2)
	ctx := context.Background()
	a, err := st[0].Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	require.NotZero(t, a.Epoch())
	require.Equal(t, "billing/orders", a.Key())
	require.Equal(t, "node-a", a.Holder())
	require.WithinDuration(t, time.Now().Add(kvLeaseTimeout), a.Expires(), kvLeaseTimeout)

	_, err = st[1].Acquire(ctx, "billing/orders", "node-b")
	require.ErrorIs(t, err, ErrLeaseHeld)
	require.Contains(t, err.Error(), `"node-a"`)
	_, err = st[0].Acquire(ctx, "billing/orders", "node-a")
	require.ErrorIs(t, err, ErrLeaseHeld, "the same holder name does not get a second lease")

	b, err := st[1].Acquire(ctx, "billing/other", "node-b")
	require.NoError(t, err, "another key is independent")
	require.NotZero(t, b.Epoch())

	require.NoError(t, a.Renew(ctx))
	_, err = st[1].Acquire(ctx, "", "node-b")
	require.ErrorIs(t, err, ErrInvalidName)
}

func TestLeaseExpiresAndTakeoverHasGreaterEpoch(t *testing.T) {
	t.Parallel()
	st, _ := kvLeaseStores(t, 2)
	ctx := context.Background()
	a, err := st[0].Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)

	// node-a stops renewing; the server deletes the key within the timeout.
	b := kvAcquireEventually(t, st[1], "billing/orders", "node-b")
	require.Greater(t, b.Epoch(), a.Epoch())

	err = a.Renew(ctx)
	require.ErrorIs(t, err, ErrLeaseLost)
	require.ErrorIs(t, a.Release(ctx), ErrLeaseLost, "a lost lease is not released")
	_, err = st[0].Acquire(ctx, "billing/orders", "node-a")
	require.ErrorIs(t, err, ErrLeaseHeld, "node-a's Release did not free node-b's lease")

	// The lease key expires again; the epoch survives it.
	c := kvAcquireEventually(t, st[0], "billing/orders", "node-a")
	require.Greater(t, c.Epoch(), b.Epoch())
	require.ErrorIs(t, b.Renew(ctx), ErrLeaseLost)
}

func TestLeaseEpochsGrowAcrossManyTakeovers(t *testing.T) {
	st, s := kvLeaseStores(t, 2)
	ctx := context.Background()
	var last uint64
	for i := range 20 {
		l, err := st[i%2].Acquire(ctx, "billing/orders", []string{"node-a", "node-b"}[i%2])
		require.NoError(t, err)
		require.Greater(t, l.Epoch(), last)
		last = l.Epoch()
		require.NoError(t, l.Release(ctx))
		require.ErrorIs(t, l.Renew(ctx), ErrLeaseLost, "a released lease cannot be renewed")
	}
	// A node that starts later continues from the stored epoch.
	late, err := NewLeaseStore(ctx, kvConnect(t, s), "mmmq", 1, kvLeaseTimeout)
	require.NoError(t, err)
	l, err := late.Acquire(ctx, "billing/orders", "node-c")
	require.NoError(t, err)
	require.Greater(t, l.Epoch(), last)
}

func TestLeaseEpochSurvivesKeyDeletionAndRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	s := kvServerAt(t, dir)
	ls, err := NewLeaseStore(ctx, kvConnect(t, s), "mmmq", 1, kvLeaseTimeout)
	require.NoError(t, err)
	a, err := ls.Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx))

	// An operator deletes the key's epoch entry: epochs still grow.
	require.NoError(t, ls.epochs.Purge(ctx, escapeKeyPart("billing/orders")))
	b, err := ls.Acquire(ctx, "billing/orders", "node-b")
	require.NoError(t, err)
	require.Greater(t, b.Epoch(), a.Epoch())

	// The server restarts after the lease key expired.
	c := kvAcquireEventually(t, ls, "billing/orders", "node-c")
	require.Greater(t, c.Epoch(), b.Epoch())
	s.Shutdown()
	s.WaitForShutdown()
	s = kvServerAt(t, dir)
	ls, err = NewLeaseStore(ctx, kvConnect(t, s), "mmmq", 1, kvLeaseTimeout)
	require.NoError(t, err)
	d := kvAcquireEventually(t, ls, "billing/orders", "node-d")
	require.Greater(t, d.Epoch(), c.Epoch())
}

func TestLeaseConcurrentAcquireHasOneWinner(t *testing.T) {
	st, _ := kvLeaseStores(t, 4)
	var wins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			_, err := st[i%4].Acquire(context.Background(), "billing/orders", "node")
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, ErrLeaseHeld):
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.Equal(t, int32(1), wins.Load())
}

func TestLeaseStoreRefusesAnotherTimeout(t *testing.T) {
	_, s := kvLeaseStores(t, 1)
	_, err := NewLeaseStore(context.Background(), kvConnect(t, s), "mmmq", 1, 2*kvLeaseTimeout)
	require.ErrorContains(t, err, "every node must use the same timeout")
	_, err = NewLeaseStore(context.Background(), kvConnect(t, s), "mmmq", 1, 10*time.Millisecond)
	require.Error(t, err)
	_, err = NewLeaseStore(context.Background(), kvConnect(t, s), "", 1, kvLeaseTimeout)
	require.ErrorIs(t, err, ErrInvalidName)
}

func TestKeepHoldsLeaseAndStopsCleanly(t *testing.T) {
	st, _ := kvLeaseStores(t, 2)
	ctx := context.Background()
	a, err := st[0].Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	require.NoError(t, a.Renew(ctx)) // the connection's request plumbing exists before the leak baseline
	baseline := goleak.IgnoreCurrent()

	var lost atomic.Int32
	stop := Keep(ctx, a, kvLeaseTimeout/5, func(error) { lost.Add(1) })
	// Over two timeouts the kept lease stays held.
	for end := time.Now().Add(2 * kvLeaseTimeout); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		_, err := st[1].Acquire(ctx, "billing/orders", "node-b")
		require.ErrorIs(t, err, ErrLeaseHeld)
	}
	stop()
	stop()                         // idempotent
	goleak.VerifyNone(t, baseline) // while the lease is still live: stop, not a loss, ended the renewals
	require.Zero(t, lost.Load())
	require.NoError(t, a.Renew(ctx), "Keep renewed it and did not release it")
	require.NoError(t, a.Release(ctx))
}

func TestKeepReportsLossOnce(t *testing.T) {
	st, _ := kvLeaseStores(t, 2)
	ctx := context.Background()
	a, err := st[0].Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	require.NoError(t, a.Renew(ctx))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	lostc := make(chan error, 2)
	stop := Keep(ctx, a, kvLeaseTimeout/5, func(err error) { lostc <- err })
	defer stop()
	// An operator removes the lease and node-b takes it at once.
	require.NoError(t, st[0].leases.Delete(ctx, escapeKeyPart("billing/orders")))
	b, err := st[1].Acquire(ctx, "billing/orders", "node-b")
	require.NoError(t, err)
	require.Greater(t, b.Epoch(), a.Epoch())

	waitLost(t, lostc)
	stop()
	require.Empty(t, lostc, "onLost is called once")
}

func TestStaleNodeCommitIsRejectedAfterTakeover(t *testing.T) {
	t.Parallel()
	s := kvServer(t)
	ctx := context.Background()
	type node struct {
		leases *LeaseStore
		cps    *CheckpointStore
	}
	var nodes [2]node
	for i := range nodes {
		j := kvConnect(t, s)
		ls, err := NewLeaseStore(ctx, j, "mmmq", 1, kvLeaseTimeout)
		require.NoError(t, err)
		cs, err := NewCheckpointStore(ctx, j, "mmmq", 1, nil)
		require.NoError(t, err)
		nodes[i] = node{ls, cs}
	}

	la, err := nodes[0].leases.Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	ca := kvOpen(t, nodes[0].cps, "orders", "billing")
	ca.SetEpoch(la.Epoch())
	require.NoError(t, ca.Commit(10))

	// node-a stalls (no renewals); node-b takes over and commits.
	lb := kvAcquireEventually(t, nodes[1].leases, "billing/orders", "node-b")
	cb := kvOpen(t, nodes[1].cps, "orders", "billing")
	cb.SetEpoch(lb.Epoch())
	require.Equal(t, int64(10), cb.Offset())
	require.NoError(t, cb.Commit(20))

	// node-a wakes up: its commit is refused, before and after a reload.
	require.ErrorIs(t, ca.Commit(15), ErrStaleCommit)
	require.Equal(t, int64(10), ca.Offset())
	require.NoError(t, ca.Reload())
	err = ca.Commit(25)
	require.ErrorIs(t, err, ErrStaleCommit)
	require.Contains(t, err.Error(), "epoch")
	require.Equal(t, int64(20), kvOpen(t, nodes[1].cps, "orders", "billing").Offset())
	require.ErrorIs(t, la.Renew(ctx), ErrLeaseLost)
}

func TestKeepDeclaresLossWhenRenewalsKeepFailing(t *testing.T) {
	s := kvServer(t)
	ctx := context.Background()
	j := kvConnect(t, s)
	ls, err := NewLeaseStore(ctx, j, "mmmq", 1, kvLeaseTimeout)
	require.NoError(t, err)
	a, err := ls.Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	require.NoError(t, a.Renew(ctx))
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	lostc := make(chan error, 2)
	stop := Keep(ctx, a, kvLeaseTimeout/5, func(err error) { lostc <- err })
	defer stop()
	j.Conn().Close() // node-a is cut off: every renewal fails, none says "lost"

	err = waitLost(t, lostc)
	require.ErrorContains(t, err, "no renewal succeeded")
	require.False(t, time.Now().Before(a.Expires()), "loss declared only once the lease may have expired")
	stop()
	require.Empty(t, lostc, "onLost is called once")
}

// TestReplicatedBucketsOnThreeServers runs the fencing story on a
// three-server cluster with replicas 3, each node on its own server: lost
// creates and updates, lease expiry and takeover go through replication.
func TestReplicatedBucketsOnThreeServers(t *testing.T) {
	t.Parallel()
	servers := kvCluster(t, 3)
	ctx := context.Background()
	type node struct {
		leases *LeaseStore
		cps    *CheckpointStore
	}
	var nodes [3]node
	for i, s := range servers {
		j := kvConnect(t, s)
		ls, err := kvRetry(t, func() (*LeaseStore, error) { return NewLeaseStore(ctx, j, "mmmq", 3, kvLeaseTimeout) })
		require.NoError(t, err)
		cs, err := kvRetry(t, func() (*CheckpointStore, error) { return NewCheckpointStore(ctx, j, "mmmq", 3, nil) })
		require.NoError(t, err)
		nodes[i] = node{ls, cs}
		kvWaitReadable(t, ls.leases, ls.epochs, cs.kv)
	}
	st, err := nodes[0].cps.kv.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, st.(*js.KeyValueBucketStatus).StreamInfo().Config.Replicas)

	la, err := nodes[0].leases.Acquire(ctx, "billing/orders", "node-a")
	require.NoError(t, err)
	_, err = nodes[1].leases.Acquire(ctx, "billing/orders", "node-b")
	require.ErrorIs(t, err, ErrLeaseHeld)
	ca := kvOpen(t, nodes[0].cps, "orders", "billing")
	ca.SetEpoch(la.Epoch())
	require.NoError(t, ca.Commit(10))
	early := kvOpen(t, nodes[2].cps, "orders", "new-group")
	require.NoError(t, kvOpen(t, nodes[1].cps, "orders", "new-group").Commit(1))
	require.ErrorIs(t, early.Commit(2), ErrStaleCommit, "a lost create")
	other := kvOpen(t, nodes[2].cps, "orders", "billing")
	other.SetEpoch(la.Epoch()) // a duplicate worker under the same epoch, racing
	require.NoError(t, other.Commit(11))
	require.ErrorIs(t, ca.Commit(12), ErrStaleCommit, "a lost update")

	lb := kvAcquireEventually(t, nodes[1].leases, "billing/orders", "node-b")
	require.Greater(t, lb.Epoch(), la.Epoch())
	require.ErrorIs(t, la.Renew(ctx), ErrLeaseLost)
	cb := kvOpen(t, nodes[1].cps, "orders", "billing")
	cb.SetEpoch(lb.Epoch())
	require.NoError(t, cb.Commit(cb.Offset()))
	require.NoError(t, ca.Reload())
	require.ErrorIs(t, ca.Commit(20), ErrStaleCommit)
}

// kvRetry calls f until it succeeds or 10 s passed: right after the meta
// leader is elected, creating a replicated stream can fail while the
// servers still learn about each other.
func kvRetry[T any](t *testing.T, f func() (T, error)) (T, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := f()
		if err == nil || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kvWaitReadable waits until every bucket answers reads through this
// connection: right after a replicated bucket is created, a read can find
// no responder while the replicas set up direct gets.
func kvWaitReadable(t *testing.T, buckets ...js.KeyValue) {
	t.Helper()
	for _, kv := range buckets {
		_, err := kvRetry(t, func() (js.KeyValueEntry, error) {
			e, err := kv.Get(context.Background(), "kv-probe")
			if errors.Is(err, js.ErrKeyNotFound) {
				err = nil
			}
			return e, err
		})
		require.NoError(t, err, "bucket %s", kv.Bucket())
	}
}

// waitLost waits up to 10 s for the one onLost call reported on lostc and
// returns its error, which must be ErrLeaseLost.
func waitLost(t *testing.T, lostc <-chan error) error {
	t.Helper()
	select {
	case err := <-lostc:
		require.ErrorIs(t, err, ErrLeaseLost)
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("onLost not called within 10s")
		return nil
	}
}
