package metrics

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"

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

// TestPreallocMetrics: through the module graph (the budget made from
// mmmq.broker.storage.preallocate-max-bytes, reached through the backend),
// a busy topic with preallocation on shows preallocated bytes above 0 and
// at most the cap, and the cap configured; with preallocation off every
// series is there at 0, however many publishes. Without the wiring the
// series are missing or stay 0, and the test fails.
func TestPreallocMetrics(t *testing.T) {
	const maxBytes = 16 << 20
	for _, tc := range []struct {
		name        string
		preallocate int64
	}{
		{"on", storage.DefaultPreallocate},
		{"off", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				m   *Metrics
				reg *topicqueue.Registry
			)
			env := []string{
				"MMMQ_BROKER_STORAGE_ROOT_DIR=" + t.TempDir(),
				"MMMQ_BROKER_STORAGE_PREALLOCATE=" + strconv.FormatInt(tc.preallocate, 10),
				"MMMQ_BROKER_STORAGE_PREALLOCATE_MAX_BYTES=" + strconv.Itoa(maxBytes),
			}
			app := fxtest.New(t,
				config.Module, fx.Supply(config.LoadOptions{Path: "/nonexistent.yaml", Environ: env, Sections: []config.Section{ConfigSection}}),
				fx.Supply(zaptest.NewLogger(t)),
				storage.Module, topicqueue.Module, recovery.Module, dispatcher.Module,
				Module,
				fx.Populate(&m, &reg),
			)
			app.RequireStart()
			defer app.RequireStop()

			// A topic is preallocated once busy: a group commit within a
			// second of the previous one. Sequential DURABLE publishes
			// are one group commit each; the chunk is taken from the
			// budget right after a commit, before the next is written,
			// so a publish that returned after two quick ones sees it.
			var held float64
			for i := range 200 {
				_, _, err := reg.Publish(context.Background(), "p.t", [][]byte{fmt.Appendf(nil, `{"topic":{"name":"p.t"},"content":%d}`, i)}, contract.Durable)
				require.NoError(t, err)
				if held = scrapeValue(t, m, "mmmq_storage_preallocated_bytes"); held > 0 && tc.preallocate > 0 {
					break
				}
			}
			limit := scrapeValue(t, m, "mmmq_storage_preallocate_max_bytes")
			for _, reason := range []string{"budget", "disk", "concurrency"} {
				require.Zero(t, scrapeValue(t, m, `mmmq_storage_preallocate_skipped_total{reason="`+reason+`"}`),
					"one topic under a 16 MiB cap and no disk guard: no chunk refused for %s", reason)
			}
			if tc.preallocate == 0 {
				require.Zero(t, held, "preallocation off: nothing preallocated")
				require.Zero(t, limit, "preallocation off: the cap shows 0")
				return
			}
			require.Equal(t, float64(maxBytes), limit, "the cap is preallocate-max-bytes")
			require.Greater(t, held, float64(0), "200 quick publishes to one topic and nothing preallocated")
			require.LessOrEqual(t, held, limit)
			// The zeros are the budget's, not the topic's data.
			require.Less(t, scrapeValue(t, m, `mmmq_topic_bytes{topic="p.t"}`), held)
		})
	}
}

// scrapeValue scrapes m and returns the value of the sample named series
// (name and labels as in the text format); the test fails when the
// scrape has no such sample.
func scrapeValue(t *testing.T, m *Metrics, series string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	got := re.FindStringSubmatch(rec.Body.String())
	require.NotNil(t, got, "no sample %s in the scrape:\n%s", series, grepLines(rec.Body.String(), "mmmq_storage_"))
	v, err := strconv.ParseFloat(got[1], 64)
	require.NoError(t, err)
	return v
}
