package recovery_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestFreshRootSurvivesPowerLoss: on a fresh install Run creates the data
// root; it must be durable, or a power loss takes every topic created under
// it (found by app TestFsyncEIOFailsTopicUntilRestart).
func TestFreshRootSurvivesPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	reg := topicqueue.New(topicqueue.Options{Root: "/srv/mmmq/data", Storage: storage.Options{FS: mem}})
	_, err := recovery.Run(reg, config.OnCorruptionFail, zaptest.NewLogger(t))
	require.NoError(t, err)
	q, err := reg.GetOrCreate("orders")
	require.NoError(t, err)
	off, err := q.Offer(context.Background(), []byte(`{"topic":{"name":"orders"},"content":1}`), contract.Durable)
	require.NoError(t, err)
	require.EqualValues(t, 0, off)
	require.NoError(t, reg.Close())

	crashed := mem.Crash(vfs.CrashOptions{})
	reg2 := topicqueue.New(topicqueue.Options{Root: "/srv/mmmq/data", Storage: storage.Options{FS: crashed}})
	rep, err := recovery.Run(reg2, config.OnCorruptionFail, zaptest.NewLogger(t))
	require.NoError(t, err)
	require.Equal(t, 1, rep.Topics, "the acknowledged topic survived")
	q2, ok := reg2.Get("orders")
	require.True(t, ok)
	require.EqualValues(t, 1, q2.HighWatermark())
	require.NoError(t, reg2.Close())
}
