package topicqueue

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestFxModule: Module builds the local backend and the registry from
// mmmq.broker.storage / segment / memory / dedup on the graph's
// filesystem (storage.Module replaced by an in-memory one, as its doc
// says), takes the data root's lock on start and closes the logs and
// releases the lock on stop.
func TestFxModule(t *testing.T) {
	cfg := config.Default()
	config.EditSection(cfg, StorageSection, func(st *StorageConfig) {
		st.RootDir = "/data"
		st.MinFreeBytes = 0
	})
	config.EditSection(cfg, SegmentSection, func(seg *SegmentConfig) {
		seg.MaxBytes = 1 << 10
		seg.MaxRecordBytes = 1 << 10
	})
	config.EditSection(cfg, MemorySection, func(m *MemoryConfig) { m.MaxInflightBytes = 12345 })
	mem := vfs.NewMem()
	var (
		reg    *Registry
		budget *contract.Budget
		tr     *dedup.Tracker
		guard  *storage.SpaceGuard
		fsys   vfs.FS
	)
	app := fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, fx.Replace(fx.Annotate(mem, fx.As(new(vfs.FS)))),
		Module,
		fx.Populate(&reg, &budget, &tr, &guard, &fsys),
	)
	app.RequireStart()
	assert.Same(t, mem, fsys, "storage.Module's filesystem replaced")
	assert.Equal(t, int64(12345), budget.Max(), "max-inflight-bytes")
	assert.NotNil(t, tr, "dedup window on by default")
	assert.Nil(t, guard, "min-free-bytes 0: no disk guard")
	_, err := reg.Lock()
	require.Error(t, err, "the registry took the data root's lock on start")

	payload := []byte(`{"topic":{"name":"t"},"content":"` + string(make([]byte, 600)) + `"}`)
	for range 3 {
		_, _, err := reg.Publish(context.Background(), "t", [][]byte{payload}, contract.Durable)
		require.NoError(t, err)
	}
	names, err := mem.List(filepath.Join("/data", "t"))
	require.NoError(t, err)
	segs := 0
	for _, n := range names {
		if filepath.Ext(n.Name) == ".mmm" {
			segs++
		}
	}
	assert.GreaterOrEqual(t, segs, 2, "segment.max-bytes 1 KiB: ~700-byte entries rotate")
	app.RequireStop()
	release, err := reg.Lock()
	require.NoError(t, err, "the lock is released on stop")
	require.NoError(t, release())
	_, _, err = reg.Publish(context.Background(), "t", [][]byte{payload}, contract.Durable)
	assert.ErrorIs(t, err, contract.ErrClosed, "logs closed on stop")
}
