package metrics

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestPublishDurationByLevel: publishes through the HTTP API at each ack
// level (single messages and a batch, whose every message counts) are
// counted in mmmq_publish_duration_seconds{level} per level, the +Inf
// bucket equal to the count; a refused publish is not counted.
func TestPublishDurationByLevel(t *testing.T) {
	m := New()
	log := zaptest.NewLogger(t)
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: vfs.NewMem(), Logger: log}, PublishObserver: m})
	t.Cleanup(func() { _ = reg.Close() })
	h := httpapi.New(httpapi.Options{}, reg, nil, log).Handler()
	post := func(target, body string, want int) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, target, strings.NewReader(body)))
		if rec.Code != want {
			t.Fatalf("POST %s: HTTP %d %s, want %d", target, rec.Code, rec.Body, want)
		}
	}
	const one = `{"topic":"t","content":{"n":1}}`
	post("/messages?ack=accepted", one, http.StatusOK)
	for range 2 {
		post("/messages?ack=written", one, http.StatusOK)
	}
	for range 3 {
		post("/messages", one, http.StatusOK) // durable, the default
	}
	post("/messages/batch?ack=durable", "["+strings.Repeat(one+",", 3)+one+"]", http.StatusOK)
	post("/messages", `{"topic":"no such topic","content":1}`, http.StatusBadRequest)

	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	s := rec.Body.String()
	for _, want := range []string{
		`mmmq_publish_duration_seconds_count{level="accepted"} 1` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="accepted",le="+Inf"} 1` + "\n",
		`mmmq_publish_duration_seconds_count{level="written"} 2` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="written",le="+Inf"} 2` + "\n",
		`mmmq_publish_duration_seconds_count{level="durable"} 7` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="durable",le="+Inf"} 7` + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("scrape lacks %q:\n%s", want, grepLines(s, "mmmq_publish_duration_seconds_count", "mmmq_publish_duration_seconds_bucket{level=\"durable\",le=\"+Inf\"}"))
		}
	}
}

// TestPublishHistogramBuckets: ObservePublish puts n observations of one
// duration into the first bucket whose bound is not below it (a bound is
// inclusive), adds n times the duration to the sum, and ignores other
// levels and counts below 1.
func TestPublishHistogramBuckets(t *testing.T) {
	m := New()
	m.ObservePublish(contract.Written, 3, 20*time.Microsecond) // le 2e-05 exactly
	m.ObservePublish(contract.Written, 1, 21*time.Microsecond) // le 4e-05
	m.ObservePublish(contract.Written, 2, time.Hour)           // +Inf only
	m.ObservePublish(contract.Written, 0, time.Second)
	m.ObservePublish(contract.AckLevel(0), 5, time.Second)
	m.ObservePublish(contract.AckLevel(4), 5, time.Second)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	s := rec.Body.String()
	for _, want := range []string{
		`mmmq_publish_duration_seconds_bucket{level="written",le="1e-05"} 0` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="written",le="2e-05"} 3` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="written",le="4e-05"} 4` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="written",le="1.31072"} 4` + "\n",
		`mmmq_publish_duration_seconds_bucket{level="written",le="+Inf"} 6` + "\n",
		`mmmq_publish_duration_seconds_sum{level="written"} 7200.000081` + "\n",
		`mmmq_publish_duration_seconds_count{level="written"} 6` + "\n",
		`mmmq_publish_duration_seconds_count{level="accepted"} 0` + "\n",
		`mmmq_publish_duration_seconds_count{level="durable"} 0` + "\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("scrape lacks %q:\n%s", want, grepLines(s, "mmmq_publish_duration_seconds"))
		}
	}
}

// TestObservePublishAllocatesNothing: the observer runs on the publish
// path, once per call.
func TestObservePublishAllocatesNothing(t *testing.T) {
	m := New()
	if n := testing.AllocsPerRun(100, func() { m.ObservePublish(contract.Durable, 8, time.Millisecond) }); n != 0 {
		t.Fatalf("ObservePublish allocates %v times", n)
	}
}
