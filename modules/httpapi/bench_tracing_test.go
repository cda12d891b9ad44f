package httpapi

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/internal/allocs"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// benchTraceparent is a sampled producer context, as a traced producer
// sends it.
const benchTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// BenchmarkPublishTracing measures what tracing adds to a publish: the
// publish path of BenchmarkPublishHandler (8 producers, ack=written, so
// fsyncs do not drown the difference) with tracing off (Options.Tracer
// nil, what mmmq.tracing.exporter: none gives) and on at sampling ratio 1
// with an exporter that discards every span (the span is made, ended and
// handed to the export queue; no network). traceparent=header publishes
// carry a sampled traceparent header (the span is the producer's child);
// traceparent=none publishes carry none (with tracing on the broker starts
// the trace and stores its traceparent with the message). Besides ns/op
// and allocs/op it reports msgs/s and, with tracing on, spans dropped per
// publish (the export queue was full; 0 expected).
//
//	go test -run '^$' -bench PublishTracing -benchmem -count 5 ./modules/httpapi/
func BenchmarkPublishTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		for _, withHeader := range []bool{true, false} {
			name := "tracing=off"
			if on {
				name = "tracing=on"
			}
			name += "/traceparent=none"
			var header http.Header
			if withHeader {
				name = strings.Replace(name, "=none", "=header", 1)
				header = http.Header{"Traceparent": {benchTraceparent}}
			}
			b.Run(name, func(b *testing.B) {
				var opts Options
				if on {
					opts.Tracer = benchTracer(b)
				}
				benchPublishWith(b, 8, "written", opts, header)
				if on {
					st := opts.Tracer.Stats()
					b.ReportMetric(float64(st.Dropped)/float64(b.N), "dropped/op")
				}
			})
		}
	}
}

// benchTracer is a tracer at sampling ratio 1 whose exporter discards.
func benchTracer(tb testing.TB) *tracing.Tracer {
	c := tracing.DefaultConfig()
	c.SamplingRatio = 1
	tr, err := tracing.NewWithExporter(c, "", tracetest.NewNoopExporter(), nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}

// With tracing off (mmmq.tracing.exporter: none) a publish allocates
// exactly what it allocates on a server built without any tracing (the
// zero Options), with and without a traceparent header. Tracing on is
// measured too and must allocate more: the measurement sees a difference
// when there is one.
func TestPublishAllocsTracingOff(t *testing.T) {
	off, err := tracing.New(tracing.DefaultConfig(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if off != nil {
		t.Error("exporter none: want no tracer")
		defer func() { _ = off.Shutdown(context.Background()) }()
	}
	servers := []struct {
		name string
		opts Options
	}{
		{"zero Options", Options{}},
		{"tracing off", Options{Tracer: off}},
		{"tracing on", Options{Tracer: benchTracer(t)}},
	}
	for _, path := range []struct {
		name   string
		header http.Header
	}{
		{"traceparent header", http.Header{"Traceparent": {benchTraceparent}}},
		{"no traceparent", nil},
	} {
		allocs := make([]float64, len(servers))
		for i, srv := range servers {
			allocs[i] = publishAllocs(t, srv.opts, path.header)
		}
		t.Logf("%s: allocs per publish: zero Options %.2f, tracing off %.2f, tracing on %.2f", path.name, allocs[0], allocs[1], allocs[2])
		// One more allocation per publish moves the mean by 1; the race
		// detector's random pool drops move it by a few hundredths.
		if math.Abs(allocs[1]-allocs[0]) >= 0.5 {
			t.Errorf("%s: tracing off allocates %.2f per publish, the zero Options %.2f", path.name, allocs[1], allocs[0])
		}
		if allocs[2] < allocs[0]+1 {
			t.Errorf("%s: tracing on allocates %.2f per publish, not one more than off (%.2f): the measurement sees nothing", path.name, allocs[2], allocs[0])
		}
	}
}

// publishAllocs is the allocations of one publish (ack=written, 200-byte
// content, one topic created before) through the handler of a server with
// opts: the least of three unrounded means (allocs.Least).
func publishAllocs(t *testing.T, opts Options, header http.Header) float64 {
	t.Helper()
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir()})
	defer func() { _ = reg.Close() }()
	h := New(opts, reg, nil, zap.NewNop()).Handler()
	const topic = "alloc.publish"
	body := []byte(`{"topic":"` + topic + `","content":{"p":"` + strings.Repeat("x", 200-8) + `"}}`)
	const target = "/messages?ack=written"
	publish := func() {
		rec := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		for k, v := range header {
			r.Header[k] = v
		}
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusOK {
			t.Fatalf("publish: HTTP %d %s", rec.Code, rec.Body)
		}
	}
	for range 50 { // creates the topic, fills the pools
		publish()
	}
	return allocs.Least(3, 1000, publish)
}
