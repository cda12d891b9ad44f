package jetstream_test

import (
	"testing"

	"github.com/mmmq/mmmq/plugins/jetstream/jstest"

	"github.com/stretchr/testify/assert"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/jetstream"
)

// The stock application's registry uses the JetStream backend exactly when
// mmmq.broker.storage.backend says so, and closes its connection on stop.
func TestModuleSelectsBackend(t *testing.T) {
	s := jstest.Start(t, "", nil)

	for _, backend := range []string{topicqueue.BackendLocal, topicqueue.BackendJetStream} {
		t.Run(backend, func(t *testing.T) {
			cfg := config.Default()
			cfg.Server.Host, cfg.Server.Port = "127.0.0.1", 0
			config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) {
				st.RootDir = t.TempDir()
				st.Backend = backend
			})
			jc := jetstream.ConfigSection.Default()
			jc.Servers, jc.Replicas = s.ClientURL(), 1
			config.SetSectionValue(cfg, jetstream.ConfigSection, jc)
			var reg *topicqueue.Registry
			a := fxtest.New(t, app.Options(config.Supply(cfg), fx.Populate(&reg)))
			a.RequireStart()
			jb, isJS := reg.Backend().(*jetstream.Backend)
			assert.Equal(t, backend == topicqueue.BackendJetStream, isJS)
			_, isLocal := reg.Backend().(*topicqueue.LocalBackend)
			assert.Equal(t, backend == topicqueue.BackendLocal, isLocal)
			a.RequireStop()
			if isJS {
				assert.True(t, jb.Conn().IsClosed(), "the connection is closed on stop")
			}
		})
	}
}
