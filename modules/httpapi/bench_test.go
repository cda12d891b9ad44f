package httpapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/topicqueue"
)

// BenchmarkPublishHandler measures the publish path without the network:
// the real router and a real registry on b.TempDir(), one topic, 200-byte
// content, DURABLE (segment and index fsynced before the answer). Each
// sub-benchmark runs `producers` concurrent goroutines (SetParallelism), so
// group commit is exercised as under that many HTTP producers. It reports
// msgs/s and fsyncs/msg (segment + index fsyncs of the topic).
//
//	go test -run '^$' -bench PublishHandler -benchtime 2s ./modules/httpapi/
//	go test -run '^$' -bench 'PublishHandler/producers=128' -cpuprofile cpu.out ./modules/httpapi/
func BenchmarkPublishHandler(b *testing.B) {
	for _, producers := range []int{1, 8, 32, 128} {
		b.Run(fmt.Sprintf("producers=%d", producers), func(b *testing.B) {
			benchPublish(b, producers, "durable")
		})
	}
}

func benchPublish(b *testing.B, producers int, ack string) {
	benchPublishWith(b, producers, ack, Options{}, nil)
}

// benchPublishWith is benchPublish with the server's Options (a Tracer,
// say) and headers sent with every publish (a traceparent, say).
func benchPublishWith(b *testing.B, producers int, ack string, opts Options, header http.Header) {
	reg := topicqueue.New(topicqueue.Options{Root: b.TempDir()})
	b.Cleanup(func() { _ = reg.Close() })
	s := New(opts, reg, nil, zap.NewNop())
	h := s.Handler()
	const topic = "bench.publish"
	body := []byte(`{"topic":"` + topic + `","content":{"p":"` + strings.Repeat("x", 200-8) + `"}}`)
	target := "/messages?ack=" + ack

	// Create the topic outside the measurement.
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, publishRequest(target, body, header))
	if rec.Code != http.StatusOK {
		b.Fatalf("first publish: HTTP %d %s", rec.Code, rec.Body)
	}
	q, ok := reg.Get(topic)
	if !ok {
		b.Fatal("topic not created")
	}
	before := q.Stats().Fsyncs

	par := producers / runtime.GOMAXPROCS(0)
	if par < 1 {
		par = 1
	}
	if producers == 1 {
		b.SetParallelism(1)
		// RunParallel would still start GOMAXPROCS goroutines; run serially.
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			publishOnceWith(b, h, target, body, header)
		}
	} else {
		b.SetParallelism(par)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !publishOnceWith(b, h, target, body, header) {
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	b.ReportMetric(float64(q.Stats().Fsyncs-before)/float64(b.N), "fsyncs/msg")
}

func publishOnce(b *testing.B, h http.Handler, target string, body []byte) bool {
	return publishOnceWith(b, h, target, body, nil)
}

func publishOnceWith(b *testing.B, h http.Handler, target string, body []byte, header http.Header) bool {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, publishRequest(target, body, header))
	if rec.Code != http.StatusOK {
		b.Errorf("publish: HTTP %d %s", rec.Code, rec.Body)
		return false
	}
	return true
}

// publishRequest is a POST of body to target with header's values added.
func publishRequest(target string, body []byte, header http.Header) *http.Request {
	r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
	for k, v := range header {
		r.Header[k] = v
	}
	return r
}
