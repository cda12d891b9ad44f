package metrics

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// TestBreakerSeries: a dispatcher with breaker-failures shows its
// breaker's state (1 once a dead consumer opened it), openings and
// probes, labelled by dispatcher only; one without shows none of them. A
// dispatcher with pause-after that paused itself shows
// mmmq_dispatch_paused{reason="auto"} 1; the others none.
func TestBreakerSeries(t *testing.T) {
	reg, host := memRegistryAndStatus(t, http.StatusServiceUnavailable)
	_, scrape := watchedManager(t, reg, dispatcher.Options{BackoffInitial: time.Millisecond, BackoffMax: 2 * time.Millisecond},
		dispatcher.New("guarded", host, dispatcher.MustPattern("t.*")).WithBreaker(2, time.Hour),
		dispatcher.New("plain", host, dispatcher.MustPattern("t.*")),
		dispatcher.New("quitter", host, dispatcher.MustPattern("t.*")).WithPauseAfter(50*time.Millisecond))
	if s := scrape(); !strings.Contains(s, `mmmq_dispatch_breaker_state{dispatcher="guarded"} 0`) {
		t.Fatalf("no closed breaker before any push:\n%s", s)
	}
	if _, _, err := reg.Publish(context.Background(), "t.a", [][]byte{[]byte(`{"topic":{"name":"t.a"},"content":1}`)}, contract.Durable); err != nil {
		t.Fatal(err)
	}
	var s string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s = scrape()
		if strings.Contains(s, `mmmq_dispatch_breaker_state{dispatcher="guarded"} 1`) && strings.Contains(s, `mmmq_dispatch_paused{dispatcher="quitter",reason="auto"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker never open, or quitter never paused itself:\n%s", s)
		}
	}
	for _, want := range []string{`mmmq_dispatch_breaker_opened_total{dispatcher="guarded"} 1`,
		`mmmq_dispatch_breaker_probes_total{dispatcher="guarded"} 0`, "# TYPE mmmq_dispatch_breaker_opened_total counter"} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
	if strings.Contains(s, `mmmq_dispatch_paused{dispatcher="plain"`) || strings.Contains(s, `mmmq_dispatch_paused{dispatcher="guarded"`) {
		t.Errorf("paused series for a dispatcher delivering:\n%s", s)
	}
	if regexp.MustCompile(`mmmq_dispatch_breaker_\w+\{dispatcher="plain"`).MatchString(s) {
		t.Errorf("breaker series for a dispatcher without one:\n%s", s)
	}
}
