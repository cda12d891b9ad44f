package metrics

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestFxModule: Module provides *Metrics as the storage engine's
// Observer (a durable publish counts its fsyncs), as the topic registry's
// PublishObserver (the publish is in mmmq_publish_duration_seconds) and
// the /metrics route;
// with mmmq.metrics.enabled false (MMMQ_METRICS_ENABLED) it contributes no
// route.
func TestFxModule(t *testing.T) {
	for _, enabled := range []string{"true", "false"} {
		t.Run("enabled="+enabled, func(t *testing.T) {
			root := t.TempDir()
			var (
				m      *Metrics
				reg    *topicqueue.Registry
				routes struct {
					fx.In
					Routes []contract.Route `group:"routes"`
				}
			)
			env := []string{"MMMQ_BROKER_STORAGE_ROOT_DIR=" + root, "MMMQ_METRICS_ENABLED=" + enabled}
			app := fxtest.New(t,
				config.Module, fx.Supply(config.LoadOptions{Path: "/nonexistent.yaml", Environ: env, Sections: []config.Section{ConfigSection}}),
				fx.Supply(zaptest.NewLogger(t)),
				storage.Module, topicqueue.Module, recovery.Module, dispatcher.Module,
				Module,
				fx.Populate(&m, &reg, &routes),
			)
			app.RequireStart()
			defer app.RequireStop()
			var ours []contract.Route
			for _, r := range routes.Routes {
				if r != nil {
					ours = append(ours, r)
				}
			}
			if enabled == "false" {
				assert.Empty(t, ours, "no /metrics route when disabled")
				return
			}
			require.Len(t, ours, 1)
			assert.Same(t, m, ours[0])
			_, _, err := reg.Publish(context.Background(), "t", [][]byte{[]byte(`{"topic":{"name":"t"},"content":1}`)}, contract.Durable)
			require.NoError(t, err)
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			// The counters exist at 0 from the start: the segment's must have moved.
			assert.NotContains(t, rec.Body.String(), `mmmq_fsyncs_total{file="segment"} 0`+"\n")
			assert.Contains(t, rec.Body.String(), `mmmq_fsyncs_total{file="segment"} `, "a durable publish observed through the graph's Observer")
			assert.Contains(t, rec.Body.String(), `mmmq_publish_duration_seconds_count{level="durable"} 1`+"\n", "the publish observed through the graph's PublishObserver")
		})
	}
}
