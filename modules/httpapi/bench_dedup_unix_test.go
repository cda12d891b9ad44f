//go:build unix

package httpapi

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// BenchmarkPublishDedup measures what the idempotent-publish window costs:
// every message carries a fresh producer id, with the window off and on
// (2m, the default), through the real handler and storage on disk,
// DURABLE. The figure to compare is cpu-us/msg, the process's user +
// system CPU time per publish (getrusage), most of it the fsyncs' (their
// CPU swings with the shared machine's load: compare medians of
// alternating runs). The window's own work per id is measured apart, without
// that noise, by dedup's BenchmarkBeginResolve.
//
//	for i in 1 2 3 4 5 6; do go test -run '^$' -bench 'PublishDedup/producers=8' -benchtime 3000x ./modules/httpapi/; done
func BenchmarkPublishDedup(b *testing.B) {
	for _, producers := range []int{1, 8} {
		for _, on := range []bool{false, true} {
			name := fmt.Sprintf("producers=%d/dedup=%s", producers, map[bool]string{false: "off", true: "on"}[on])
			b.Run(name, func(b *testing.B) { benchPublishIDs(b, producers, on) })
		}
	}
}

func benchPublishIDs(b *testing.B, producers int, on bool) {
	ropts := topicqueue.Options{Root: b.TempDir()}
	if on {
		ropts.Dedup = dedup.New(dedup.Options{Window: 2 * time.Minute})
	}
	reg := topicqueue.New(ropts)
	b.Cleanup(func() { _ = reg.Close() })
	h := New(Options{}, reg, nil, zap.NewNop()).Handler()
	const topic = "bench.dedup"
	pad := strings.Repeat("x", 180)
	var seq atomic.Int64
	body := func() []byte {
		return []byte(`{"topic":"` + topic + `","id":"producer-7-` + strconv.FormatInt(seq.Add(1), 10) + `","content":{"p":"` + pad + `"}}`)
	}
	publishOnce(b, h, "/messages", body()) // creates the topic outside the measurement
	par := max(1, producers/runtime.GOMAXPROCS(0))
	b.SetParallelism(par)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	if producers == 1 {
		for i := 0; i < b.N; i++ {
			publishOnce(b, h, "/messages", body())
		}
	} else {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !publishOnce(b, h, "/messages", body()) {
					return
				}
			}
		})
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-us/msg")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
	if q, ok := reg.Get(topic); !ok || q.HighWatermark() != int64(b.N)+1 {
		b.Fatalf("stored %d messages, want %d (every id was fresh)", q.HighWatermark(), b.N+1)
	}
}

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
