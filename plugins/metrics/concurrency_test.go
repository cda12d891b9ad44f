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

// TestConcurrencySeries: a dispatcher with adaptive-concurrency aimd shows
// its limit (its max-in-flight before any push, lower once a consumer
// answered 429), its pushes in flight and its decreases, labelled by
// dispatcher only; one without shows none of them.
func TestConcurrencySeries(t *testing.T) {
	reg, host := memRegistryAndStatus(t, http.StatusTooManyRequests)
	_, scrape := watchedManager(t, reg, dispatcher.Options{BackoffInitial: time.Millisecond, BackoffMax: 2 * time.Millisecond},
		dispatcher.New("adaptive", host, dispatcher.MustPattern("t.*")).WithMaxInFlight(5).WithOrdering(dispatcher.OrderNone).
			WithAdaptiveConcurrency(dispatcher.AdaptiveAIMD),
		dispatcher.New("plain", host, dispatcher.MustPattern("t.*")))
	if s := scrape(); !strings.Contains(s, `mmmq_dispatch_concurrency_limit{dispatcher="adaptive"} 5`) {
		t.Fatalf("no limit at max-in-flight before any push:\n%s", s)
	}
	if _, _, err := reg.Publish(context.Background(), "t.a", [][]byte{[]byte(`{"topic":{"name":"t.a"},"content":1}`)}, contract.Durable); err != nil {
		t.Fatal(err)
	}
	var s string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s = scrape()
		if strings.Contains(s, `mmmq_dispatch_concurrency_limit{dispatcher="adaptive"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the limit never reached 1 under 429s:\n%s", s)
		}
	}
	for _, want := range []string{"# TYPE mmmq_dispatch_concurrency_decreases_total counter", "# TYPE mmmq_dispatch_concurrency_limit gauge",
		`mmmq_dispatch_concurrency_in_flight{dispatcher="adaptive"}`} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
	if !regexp.MustCompile(`mmmq_dispatch_concurrency_decreases_total\{dispatcher="adaptive"\} ([4-9]|\d\d+)\n`).MatchString(s) {
		t.Errorf("fewer than 4 decreases from 5 to 1:\n%s", s)
	}
	if regexp.MustCompile(`mmmq_dispatch_concurrency_\w+\{dispatcher="plain"`).MatchString(s) {
		t.Errorf("concurrency series for a dispatcher without aimd:\n%s", s)
	}
}
