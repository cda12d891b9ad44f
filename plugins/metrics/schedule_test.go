package metrics

import (
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/schedule"
)

// TestScheduleSeries: the scheduled-message gauge, counter and lateness
// histogram, read from the store's Stats at scrape time.
func TestScheduleSeries(t *testing.T) {
	m := New()
	st := schedule.Stats{Pending: 5, Moved: 2, LatenessCount: 2, LatenessSum: 0.75, LatenessCounts: make([]uint64, len(schedule.LatenessBuckets)),
		MoveFailures: map[string]uint64{"too_large": 3},
		Stuck:        []schedule.StuckTopic{{Topic: "a", Pending: 4}, {Topic: "b", Pending: 1}}}
	for i, b := range schedule.LatenessBuckets {
		switch {
		case b >= 0.5:
			st.LatenessCounts[i] = 2
		case b >= 0.25:
			st.LatenessCounts[i] = 1
		}
	}
	m.WatchSchedule(func() schedule.Stats { return st })
	body := scrape(m)
	for _, want := range []string{
		"# TYPE mmmq_scheduled_pending gauge", "mmmq_scheduled_pending 5",
		"# TYPE mmmq_scheduled_moved_total counter", "mmmq_scheduled_moved_total 2",
		"# TYPE mmmq_scheduled_lateness_seconds histogram",
		`mmmq_scheduled_lateness_seconds_bucket{le="0.1"} 0`,
		`mmmq_scheduled_lateness_seconds_bucket{le="0.25"} 1`,
		`mmmq_scheduled_lateness_seconds_bucket{le="0.5"} 2`,
		`mmmq_scheduled_lateness_seconds_bucket{le="+Inf"} 2`,
		"mmmq_scheduled_lateness_seconds_sum 0.75", "mmmq_scheduled_lateness_seconds_count 2",
		"# TYPE mmmq_scheduled_move_failures_total counter", `mmmq_scheduled_move_failures_total{reason="too_large"} 3`,
		"# TYPE mmmq_scheduled_stuck_topics gauge", "mmmq_scheduled_stuck_topics 2",
		"mmmq_scheduled_stuck_pending 5",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
