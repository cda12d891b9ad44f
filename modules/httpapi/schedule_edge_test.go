package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// sizedBody returns a publish body for topic t whose stored message is
// exactly want bytes with extra (`,"delay":"1h"` or ""; with an "id", so
// that the length does not depend on the generated ids' counter).
func sizedBody(t *testing.T, want int, extra string) string {
	t.Helper()
	body := func(n int) string { return `{"topic":"t","content":"` + strings.Repeat("x", n) + `"` + extra + `}` }
	d, err := contract.DecodeMessage([]byte(body(0)), time.Now(), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := want - len(d.Stored)
	if n < 0 {
		t.Fatalf("want %d bytes, the smallest is %d", want, len(d.Stored))
	}
	if d, _ := contract.DecodeMessage([]byte(body(n)), time.Now(), nil); len(d.Stored) != want {
		t.Fatalf("stored %d bytes, want %d", len(d.Stored), want)
	}
	return body(n)
}

// A scheduled message whose stored JSON fits max-record-bytes but not with
// the schedule-id header the broker adds when it is due is 413 at publish
// (single and batch member), nothing stored or scheduled; the same message
// published now is taken, and a scheduled one that fits with the header is
// taken too.
func TestScheduledSizeCountsTheHeader(t *testing.T) {
	const max = 2000
	f := &fakeScheduler{}
	a := newAPI(t, Options{Scheduler: f, MaxRecordBytes: max}, topicqueue.Options{})
	over := sizedBody(t, max-10, `,"delay":"1h","id":"p-1"`)
	for _, c := range []struct{ path, body string }{
		{"/messages", over},
		{"/messages/batch", `[{"topic":"t","content":0},` + over + `]`},
	} {
		rec := a.call(http.MethodPost, c.path, "application/json", c.body)
		if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), contract.HeaderScheduleID) || !strings.Contains(rec.Body.String(), "max-record-bytes") {
			t.Errorf("%s: HTTP %d %s", c.path, rec.Code, rec.Body)
		}
	}
	if len(f.topics) != 0 {
		t.Fatalf("scheduled %v", f.topics)
	}
	a.noTopics()
	if rec := a.call(http.MethodPost, "/messages", "application/json", sizedBody(t, max-10, `,"id":"p-1"`)); rec.Code != http.StatusOK {
		t.Errorf("the same size now: HTTP %d %s", rec.Code, rec.Body)
	}
	if rec := a.call(http.MethodPost, "/messages", "application/json", sizedBody(t, max-contract.ScheduleHeaderMaxBytes, `,"delay":"1h","id":"p-2"`)); rec.Code != http.StatusOK {
		t.Errorf("fits with the header: HTTP %d %s", rec.Code, rec.Body)
	}
	if len(f.topics) != 1 {
		t.Errorf("scheduled %v", f.topics)
	}
}

// The largest scheduled message taken still enters its topic when due,
// with the real header (the bound is an upper bound of what is added).
func TestScheduledLargestFitsWhenDue(t *testing.T) {
	const max = 4096
	a := newAPI(t, Options{}, topicqueue.Options{Storage: storage.Options{MaxRecordBytes: max}})
	var shift atomic.Int64
	s, idem := realScheduler(t, a, &shift, nil)
	a.s = New(Options{Scheduler: idem, MaxRecordBytes: max}, a.reg, nil, zaptest.NewLogger(t))
	for _, body := range []string{
		sizedBody(t, max-contract.ScheduleHeaderMaxBytes, `,"delay":"1h","id":"p-1"`),
		sizedBody(t, max-contract.ScheduleHeaderMaxBytes, `,"delay":"1h","id":"p-2","headers":{"a":"b"}`),
	} {
		if rec := a.call(http.MethodPost, "/messages", "application/json", body); rec.Code != http.StatusOK {
			t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
		}
	}
	shift.Store(int64(time.Hour + time.Second))
	if n, _, err := s.MoveDue(context.Background()); err != nil || n != 2 {
		t.Fatalf("moved %d: %v", n, err)
	}
}

// A delay of exactly max-delay is taken (its due time is rounded up to
// the millisecond); 1ms more is refused, and the refusal states a distance
// over the maximum, never equal to it.
func TestScheduledMaxDelayBoundary(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	var shift atomic.Int64
	s, _ := realScheduler(t, a, &shift, func(o *schedule.Options) { o.MaxDelay = 720 * time.Hour })
	if rec := a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"720h"}`); rec.Code != http.StatusOK {
		t.Fatalf("delay of exactly max-delay: HTTP %d %s", rec.Code, rec.Body)
	}
	if rec := a.call(http.MethodPost, "/messages/batch", "application/json", `[{"topic":"t","content":1,"delay":"720h"}]`); rec.Code != http.StatusOK {
		t.Fatalf("batch member, exactly max-delay: HTTP %d %s", rec.Code, rec.Body)
	}
	rec := a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"720h0m0.002s"}`)
	if body := rec.Body.String(); rec.Code != http.StatusBadRequest || !strings.Contains(body, `"error":"delay 720h0m0.00`) ||
		!strings.Contains(body, "is over the maximum delay of 720h0m0s") || strings.Contains(body, "delay 720h0m0s is") {
		t.Fatalf("2ms over: HTTP %d %s", rec.Code, body)
	}
	if s.Pending("t") != 2 {
		t.Errorf("pending %d", s.Pending("t"))
	}

	// The refusal names the member that was sent, and states a distance
	// beyond what a time.Duration holds (about 292 years) as it is.
	farDays := (time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix() - time.Now().Unix()) / 86400
	for _, c := range []struct{ body, says, not string }{
		{`{"topic":"t","content":1,"delay":"721h"}`, `"error":"delay 721h0m0s is over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"`, "deliverAt"},
		{`{"topic":"t","content":1,"deliverAt":"` + time.Now().Add(800*time.Hour).UTC().Format(time.RFC3339) + `"}`,
			`"error":"deliverAt 2`, "delay 8"},
		{`{"topic":"t","content":1,"deliverAt":"9999-12-31T23:59:59Z"}`,
			fmt.Sprintf(`"error":"deliverAt 9999-12-31T23:59:59.000Z is %d days from now, over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"`, farDays),
			"2562047h"},
		{`[{"topic":"t","content":1,"deliverAt":253402300799000}]`, `message 0: deliverAt 9999-12-31T23:59:59.000Z is `, "2562047h"},
	} {
		rec := a.call(http.MethodPost, "/messages", "application/json", c.body)
		if strings.HasPrefix(c.body, "[") {
			rec = a.call(http.MethodPost, "/messages/batch", "application/json", c.body)
		}
		if body := rec.Body.String(); rec.Code != http.StatusBadRequest || !strings.Contains(body, c.says) || strings.Contains(body, c.not) {
			t.Errorf("%s: HTTP %d %s; want 400 saying %s, not %q", c.body, rec.Code, body, c.says, c.not)
		}
	}
	if s.Pending("t") != 2 {
		t.Errorf("pending %d after refusals", s.Pending("t"))
	}
}
