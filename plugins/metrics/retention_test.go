package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestRetentionCheckpointErrorsSeries: mmmq_retention_checkpoint_errors_total
// has one series per topic RetentionSource.CheckpointErrors reports, with
// its count, typed counter, and none when there is no source.
func TestRetentionCheckpointErrorsSeries(t *testing.T) {
	scrape := func(m *Metrics) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
	m := New()
	m.WatchRetention(RetentionSource{CheckpointErrors: func() map[string]uint64 { return map[string]uint64{"held": 3, "a.b": 1} }})
	body := scrape(m)
	for _, want := range []string{
		"# TYPE mmmq_retention_checkpoint_errors_total counter",
		`mmmq_retention_checkpoint_errors_total{topic="held"} 3`,
		`mmmq_retention_checkpoint_errors_total{topic="a.b"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	m = New()
	m.WatchRetention(RetentionSource{})
	if body := scrape(m); strings.Contains(body, "mmmq_retention_checkpoint_errors_total{") {
		t.Errorf("a series without a source:\n%s", body)
	}
}
