package metrics

import (
	"strings"
	"testing"
)

// TestMessagesExpiredSeries: mmmq_messages_expired_total has exactly the
// two kind series, typed counter, read from the sources at scrape time
// (0 for a missing one), and no other label.
func TestMessagesExpiredSeries(t *testing.T) {
	m := New()
	n := uint64(3)
	m.WatchExpired(func() uint64 { return n }, nil)
	n = 7
	body := scrape(m)
	for _, want := range []string{
		"# TYPE mmmq_messages_expired_total counter",
		`mmmq_messages_expired_total{kind="dispatcher"} 7`,
		`mmmq_messages_expired_total{kind="group"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q:\n%s", want, body)
		}
	}
	if c := strings.Count(body, "mmmq_messages_expired_total{"); c != 2 {
		t.Errorf("%d series of mmmq_messages_expired_total, want 2:\n%s", c, body)
	}
}
