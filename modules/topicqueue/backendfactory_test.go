package topicqueue

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// mmmq.broker.storage.backend picks the local backend or the factory of
// that name, calling only that one; a name no factory has is an error
// naming it. The disk guard is off for a backend other than local.
func TestBackendFactories(t *testing.T) {
	def := struct {
		Storage StorageConfig
		Segment SegmentConfig
	}{StorageSection.Default(), SegmentSection.Default()}
	mine := &LocalBackend{Root: "elsewhere"}
	calls := map[string]int{}
	factory := func(name string) BackendFactory {
		return BackendFactory{Name: name, New: func() (Backend, error) { calls[name]++; return mine, nil }}
	}
	p := Params{Storage: def.Storage, Segment: def.Segment, Logger: zaptest.NewLogger(t), FS: vfs.NewMem(),
		Factories: []BackendFactory{factory("other"), factory(BackendJetStream)}}
	p.Storage.RootDir = t.TempDir()

	b, err := NewBackendFromConfig(p)
	require.NoError(t, err)
	assert.NotSame(t, mine, b, "local by default")
	assert.Empty(t, calls)

	p.Storage.Backend = BackendJetStream
	b, err = NewBackendFromConfig(p)
	require.NoError(t, err)
	assert.Same(t, mine, b)
	assert.Equal(t, map[string]int{BackendJetStream: 1}, calls)

	p.Factories = nil
	_, err = NewBackendFromConfig(p)
	require.ErrorContains(t, err, `mmmq.broker.storage.backend is "jetstream", but this application has no jetstream module`)

	st := p.Storage
	st.MinFreeBytes = 1 << 20
	assert.Nil(t, NewSpaceGuardFromConfig(st, vfs.NewMem(), zaptest.NewLogger(t)))
	st.Backend = BackendLocal
	assert.NotNil(t, NewSpaceGuardFromConfig(st, vfs.NewMem(), zaptest.NewLogger(t)))
}
