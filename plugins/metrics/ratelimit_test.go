package metrics

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// TestRateLimitSeries: a dispatcher with a rate-limit shows its limit, the
// workers waiting for tokens, the pushes held and, once a wait ended (here
// by a pause), the time held, labelled by dispatcher only; a dispatcher
// without one shows none of them.
func TestRateLimitSeries(t *testing.T) {
	reg, host := memRegistryAndConsumer(t, "ACK")
	// One token per 1000 s: the first push goes, the second waits.
	mgr, scrape := watchedManager(t, reg, dispatcher.Options{},
		dispatcher.New("slow", host, dispatcher.MustPattern("t.*")).WithRateLimit(0.001, 0), dispatcher.New("free", host, dispatcher.MustPattern("t.*")))
	for _, topic := range []string{"t.a", "t.b"} {
		for range 2 {
			if _, _, err := reg.Publish(context.Background(), topic, [][]byte{[]byte(`{"topic":{"name":"` + topic + `"},"content":1}`)}, contract.Durable); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor := func(want ...string) string {
		t.Helper()
		return scrapedWith(t, scrape, want...)
	}
	// Two topics, one bucket of 1: one message pushed in all, each
	// worker holding its next push.
	s := waitFor(`mmmq_dispatch_rate_limit{dispatcher="slow"} 0.001`,
		`mmmq_dispatch_rate_limited_workers{dispatcher="slow"} 2`,
		`mmmq_dispatch_rate_limited_pushes_total{dispatcher="slow"} 2`,
		`mmmq_dispatch_rate_limited_seconds_total{dispatcher="slow"} 0`,
		"# TYPE mmmq_dispatch_rate_limited_seconds_total counter")
	if regexp.MustCompile(`mmmq_dispatch_rate_\w+\{dispatcher="free"`).MatchString(s) {
		t.Errorf("rate-limit series for a dispatcher without one:\n%s", s)
	}
	time.Sleep(20 * time.Millisecond) // a wait of some length, counted when it ends
	if err := mgr.Pause("slow"); err != nil {
		t.Fatal(err)
	}
	s = waitFor(`mmmq_dispatch_rate_limited_workers{dispatcher="slow"} 0`)
	sec := regexp.MustCompile(`mmmq_dispatch_rate_limited_seconds_total\{dispatcher="slow"\} (\S+)`).FindStringSubmatch(s)
	if v, err := strconv.ParseFloat(sec[1], 64); err != nil || v < 0.04 {
		t.Errorf("rate_limited_seconds_total after two waits of at least 20ms each ended: %s, want >= 0.04", sec[1])
	}
}
