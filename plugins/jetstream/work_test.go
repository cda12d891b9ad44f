package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// Two brokers on one server: one holds the work lease of (reader, topic),
// the other is refused with contract.ErrLeaseHeld naming it; once the
// first releases it the second gets a greater epoch, binds the checkpoint
// to it, and the first's late commit is refused as stale.
func TestWorkLeaseAndEpochCheckpoint(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	a.opts.Holder, b.opts.Holder = "node-a", "node-b"
	la, lb := open(t, a, "work.topic"), open(t, b, "work.topic")
	ctx := context.Background()

	wa, err := la.AcquireWork(ctx, "d")
	require.NoError(t, err)
	_, err = lb.AcquireWork(ctx, "d")
	require.ErrorIs(t, err, contract.ErrLeaseHeld)
	require.Contains(t, err.Error(), "node-a")

	cpa, err := la.OpenCheckpoint("d")
	require.NoError(t, err)
	require.NoError(t, cpa.(contract.EpochCheckpoint).BindEpoch(wa.Epoch()))
	require.NoError(t, cpa.Commit(3))

	require.NoError(t, wa.Release())
	wb, err := lb.AcquireWork(ctx, "d")
	require.NoError(t, err)
	defer wb.Release()
	require.Greater(t, wb.Epoch(), wa.Epoch())
	cpb, err := lb.OpenCheckpoint("d")
	require.NoError(t, err)
	require.NoError(t, cpb.(contract.EpochCheckpoint).BindEpoch(wb.Epoch()))
	require.EqualValues(t, 3, cpb.Offset(), "the new holder continues from what the old one committed")

	err = cpa.Commit(5) // node a, paused past its lease, wakes up
	require.ErrorIs(t, err, contract.ErrStaleCommit)
	require.NoError(t, cpb.Commit(4))
	select {
	case <-wb.Lost():
		t.Fatal("a held lease reported lost")
	default:
	}
}

// The api dispatchers' store shared by two brokers: a save through one is
// seen by the other's watch; a save based on an older revision is refused
// with admin.ErrConflict and stores nothing.
func TestDispatcherStoreShared(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	sa, err := a.DispatcherStore()
	require.NoError(t, err)
	sb, err := b.DispatcherStore()
	require.NoError(t, err)
	for _, st := range []admin.SpecStore{sa, sb} {
		got, err := st.Load()
		require.NoError(t, err)
		require.Empty(t, got)
	}
	seen := make(chan []admin.Spec, 4)
	stop, err := sb.(admin.SpecWatcher).Watch(func(specs []admin.Spec) { seen <- specs })
	require.NoError(t, err)
	defer stop()

	require.NoError(t, sa.Save([]admin.Spec{{Settings: dispatcher.Settings{Name: "orders", Host: "http://127.0.0.1:9", Patterns: []string{"order.*"}}}}))
	select {
	case specs := <-seen:
		require.Len(t, specs, 1)
		require.Equal(t, "orders", specs[0].Name)
	case <-time.After(10 * time.Second):
		t.Fatal("the other broker's watch did not see the save")
	}
	require.NoError(t, sb.Save(nil), "b was told of a's save: its revision is current")

	err = sa.Save([]admin.Spec{{Settings: dispatcher.Settings{Name: "late", Host: "http://127.0.0.1:9", Patterns: []string{"x"}}}})
	require.True(t, errors.Is(err, admin.ErrConflict), "a save on a list changed through another broker: %v", err)
	got, err := sb.Load()
	require.NoError(t, err)
	require.Empty(t, got, "the refused save stored nothing")
}

// An operator's seek moves a checkpoint back (contract.SeekCheckpoint uses
// SeekTo: Commit alone refuses to go back), and removing a checkpoint (a
// dispatcher deleted with its checkpoints) makes the name start at 0.
func TestCheckpointSeekAndRemove(t *testing.T) {
	s := startServer(t)
	l := open(t, connect(t, s), "seek.topic")
	cp, err := l.OpenCheckpoint("d")
	require.NoError(t, err)
	require.NoError(t, cp.Commit(9))
	require.Error(t, cp.Commit(2), "a plain commit never moves back")
	require.NoError(t, contract.SeekCheckpoint(cp, 2))
	require.EqualValues(t, 2, cp.Offset())

	require.NoError(t, l.RemoveCheckpoint("d"))
	names, err := l.Checkpoints()
	require.NoError(t, err)
	require.NotContains(t, names, "d")
	again, err := l.OpenCheckpoint("d")
	require.NoError(t, err)
	require.EqualValues(t, 0, again.Offset(), "a removed checkpoint starts again at 0")
}

// Healthy (behind /readyz) is nil while the cluster answers and an error
// once the server is gone.
func TestHealthy(t *testing.T) {
	s := startServer(t)
	b := connect(t, s)
	require.NoError(t, b.Healthy())
	s.Shutdown()
	s.WaitForShutdown()
	require.Eventually(t, func() bool { return b.Healthy() != nil }, 10*time.Second, 100*time.Millisecond,
		"Healthy still nil after the server shut down")
}

// With a duplicate window, a message published again with the same id
// through another broker (whose own window has not seen it) is not stored
// twice: its answer is the first offset. Without one, both are stored.
func TestDuplicateIDAcrossBrokers(t *testing.T) {
	for _, window := range []time.Duration{2 * time.Minute, 0} {
		s := startServer(t)
		a, b := connect(t, s), connect(t, s)
		a.opts.DedupWindow, b.opts.DedupWindow = window, window
		la, lb := open(t, a, "dup.topic"), open(t, b, "dup.topic")
		msg := []byte(`{"topic":{"name":"dup.topic"},"content":1,"id":"order-42","timestamp":1}`)
		first, err := la.Append(context.Background(), msg, contract.Durable)
		require.NoError(t, err)
		again, err := lb.Append(context.Background(), msg, contract.Durable)
		require.NoError(t, err)
		if window > 0 {
			require.Equal(t, first, again, "window %s: the retry through the other broker got another offset", window)
			require.EqualValues(t, 1, lb.HighWatermark())
		} else {
			require.Equal(t, first+1, again, "without a window both are stored")
		}
	}
}
