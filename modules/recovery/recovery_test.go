package recovery_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

const root = "/srv/mmmq/data"

// broker is the part of the application recovery sits in: the registry on
// fsys, recovery.Module and recovery.Ready, as app.Modules lists them.
func broker(t *testing.T, fsys vfs.FS, policy topicqueue.OnCorruption, out ...any) *fx.App {
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) {
		st.RootDir = root
		st.MinFreeBytes = 0
		st.OnCorruption = policy
	})
	return fx.New(fx.NopLogger,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, fx.Replace(fx.Annotate(fsys, fx.As(new(vfs.FS)))),
		topicqueue.Module, recovery.Module, recovery.Ready,
		fx.Populate(out...),
	)
}

// TestFreshRootSurvivesPowerLoss: on a fresh install the start hook
// (recovery.Module, what the binary runs) creates the data root; it must be
// durable, or a power loss takes every topic created under it (found by app
// TestFsyncEIOFailsTopicUntilRestart). The second start opens the
// acknowledged topic again through the same hook.
func TestFreshRootSurvivesPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	var reg *topicqueue.Registry
	var ready *recovery.Readiness
	app := broker(t, mem, topicqueue.OnCorruptionFail, &reg, &ready)
	require.NoError(t, app.Err())
	require.False(t, ready.Ready(), "ready before start")
	require.NoError(t, app.Start(context.Background()))
	require.True(t, ready.Ready(), "ready once every start hook ran")
	_, off, err := reg.Publish(context.Background(), "orders", [][]byte{[]byte(`{"topic":{"name":"orders"},"content":1}`)}, contract.Durable)
	require.NoError(t, err)
	require.EqualValues(t, 0, off)
	require.NoError(t, app.Stop(context.Background()))
	require.False(t, ready.Ready(), "not ready once stopping began")

	crashed := mem.Crash(vfs.CrashOptions{})
	app = broker(t, crashed, topicqueue.OnCorruptionFail, &reg, &ready)
	require.NoError(t, app.Start(context.Background()))
	q, ok := reg.Get("orders")
	require.True(t, ok, "the acknowledged topic was opened at start")
	require.EqualValues(t, 1, q.HighWatermark())
	require.NoError(t, app.Stop(context.Background()))
}

// TestCorruptTopicPolicy: a topic whose sealed segment is shorter than its
// offset index says (corruption, not crash damage) stops startup under
// on-corruption: fail, naming the topic, and is quarantined under
// quarantine while the broker starts and is ready.
func TestCorruptTopicPolicy(t *testing.T) {
	mem := vfs.NewMem()
	// Segment 0 is sealed (segment 1 follows): its index names an entry at
	// byte 0 of an empty segment file.
	require.NoError(t, mem.MkdirAll(root+"/bad"))
	require.NoError(t, mem.WriteFile(root+"/bad/0000000000000000000.idx", make([]byte, 8), true))
	require.NoError(t, mem.WriteFile(root+"/bad/0000000000000000000.mmm", nil, true))
	require.NoError(t, mem.WriteFile(root+"/bad/0000000000000000001.idx", nil, true))
	require.NoError(t, mem.WriteFile(root+"/bad/0000000000000000001.mmm", nil, true))

	app := broker(t, mem, topicqueue.OnCorruptionFail)
	err := app.Start(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bad")

	var reg *topicqueue.Registry
	var ready *recovery.Readiness
	app = broker(t, mem, topicqueue.OnCorruptionQuarantine, &reg, &ready)
	require.NoError(t, app.Start(context.Background()))
	assert.True(t, ready.Ready())
	assert.Contains(t, reg.Quarantined(), "bad")
	require.NoError(t, app.Stop(context.Background()))
}

// The hook also starts and stops cleanly in an fxtest application.
func TestFxModule(t *testing.T) {
	var ready *recovery.Readiness
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	app := fxtest.New(t, config.Module, config.Supply(cfg), fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module, recovery.Module, recovery.Ready, fx.Populate(&ready))
	app.RequireStart()
	assert.True(t, ready.Ready())
	app.RequireStop()
	assert.False(t, ready.Ready())
}
