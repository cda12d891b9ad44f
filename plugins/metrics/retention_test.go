package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// scrape is m's /metrics page.
func scrape(m *Metrics) string {
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// TestRetentionCheckpointErrorsSeries: mmmq_retention_checkpoint_errors_total
// has one series per topic RetentionSource.CheckpointErrors reports, with
// its count, typed counter, and none when there is no source.
func TestRetentionCheckpointErrorsSeries(t *testing.T) {
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

// TestRetentionHolderSeries: each topic RetentionSource.Holds reports has
// mmmq_retention_held_bytes{topic} (the bytes kept, a gauge) and
// mmmq_retention_holder{topic,kind,reader} 1 naming the reader; none
// without holds.
func TestRetentionHolderSeries(t *testing.T) {
	m := New()
	m.WatchRetention(RetentionSource{Holds: func() map[string]contract.RetentionHold {
		return map[string]contract.RetentionHold{
			"held":  {Kind: "dispatcher", Name: "stuck", Committed: 0, HeldBytes: 40960},
			"g.top": {Kind: "group", Name: "billing", Committed: 7, HeldBytes: 1},
		}
	}})
	body := scrape(m)
	for _, want := range []string{
		"# TYPE mmmq_retention_held_bytes gauge",
		`mmmq_retention_held_bytes{topic="held"} 40960`,
		`mmmq_retention_holder{kind="dispatcher",reader="stuck",topic="held"} 1`,
		`mmmq_retention_holder{kind="group",reader="billing",topic="g.top"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	m = New()
	m.WatchRetention(RetentionSource{Holds: func() map[string]contract.RetentionHold { return nil }})
	if body := scrape(m); strings.Contains(body, "mmmq_retention_held") {
		t.Errorf("series without a hold:\n%s", body)
	}
}
