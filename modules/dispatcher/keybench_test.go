package dispatcher

import (
	"flag"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkKeyIsolation is the isolation run of ordering "key": producers
// offer -dispatch.isolation.rate messages/s over 100 ordering keys to one
// topic (an in-memory log whose checkpoint and finished offsets are real
// files, fsynced), a dispatcher with ordering key and max-in-flight 32
// pushes them to a consumer that takes 10 ms per message (sleeping) and
// answers 503 for every message of one key, "k0". Halfway through, the
// broker side is stopped and started again (the checkpoint and finished
// offsets reopened from the files). It reports, for the other 99 keys, the
// messages delivered as a percentage of those offered (delivered-%), the
// p99 time from append to first push (p99-ms), how many messages passed
// the stuck key (passed-stuck: finished past the checkpoint at the end),
// and the pushes after the restart of messages finished before it
// (redelivered-finished; the goal is 0); msgs/s is the other keys'
// messages delivered per second of offering. Run with
//
//	go test -run '^$' -bench KeyIsolation -benchtime 1x ./modules/dispatcher/ -dispatch.isolation 5m
var (
	isolationFor  = flag.Duration("dispatch.isolation", 30*time.Second, "how long BenchmarkKeyIsolation offers messages")
	isolationRate = flag.Int("dispatch.isolation.rate", 200, "messages/s BenchmarkKeyIsolation offers over 100 keys")
)

func BenchmarkKeyIsolation(b *testing.B) {
	for range b.N {
		runKeyIsolation(b, *isolationFor, *isolationRate)
	}
}

func runKeyIsolation(b *testing.B, dur time.Duration, rate int) {
	tp := newMemTopic(b, b.TempDir(), "iso")
	var mu sync.Mutex
	appended := map[int64]time.Time{}
	firstPush := map[int64]time.Time{}
	acked := map[int64]bool{}
	ackedBefore := map[int64]bool{} // finished before the restart
	restarted := false
	redelivered := 0
	c := newConsumer(b, func(r received, w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		if _, ok := firstPush[r.Offset]; !ok {
			firstPush[r.Offset] = time.Now()
		}
		if restarted && ackedBefore[r.Offset] {
			redelivered++
		}
		mu.Unlock()
		if r.Key == "k0" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(10 * time.Millisecond)
		if req.Context().Err() != nil {
			return // the broker gave up on this push (its stop): it never sees the ACK
		}
		mu.Lock()
		acked[r.Offset] = true
		mu.Unlock()
		answer(w, ACK)
	})
	d := New("iso", c.host(b), MustPattern("iso")).WithMaxInFlight(32).WithOrdering(OrderKey)
	opts := testOptions()
	opts.BackoffInitial, opts.BackoffMax, opts.BatchSize = time.Second, 60*time.Second, DefaultBatchSize
	start := func() *Manager { return startManager(b, newMemSource(tp), opts, d) }

	keys := map[int64]string{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			k := fmt.Sprintf("k%d", i%100)
			off := tp.HighWatermark()
			mu.Lock()
			appended[off], keys[off] = time.Now(), k
			mu.Unlock()
			tp.appendStored(keyMsg(b, "iso", i, k))
		}
	}()
	m := start()
	time.Sleep(dur / 2)
	stopManager(b, m)
	tp.closeCheckpoints()
	mu.Lock()
	for o := range acked {
		ackedBefore[o] = true
	}
	restarted = true
	mu.Unlock()
	m = start()
	time.Sleep(dur - dur/2)
	close(stop)
	<-done
	// A grace period for the last messages offered (10 ms each, 32 at once).
	time.Sleep(2 * time.Second)
	st := status(m, "iso", "iso")
	stopManager(b, m)

	mu.Lock()
	defer mu.Unlock()
	offered, delivered := 0, 0
	var lat []time.Duration
	for o, k := range keys {
		if k == "k0" {
			continue
		}
		offered++
		if acked[o] {
			delivered++
		}
		if p, ok := firstPush[o]; ok {
			lat = append(lat, p.Sub(appended[o]))
		}
	}
	slices.Sort(lat)
	p99 := time.Duration(0)
	if len(lat) > 0 {
		p99 = lat[len(lat)*99/100]
	}
	b.ReportMetric(float64(delivered)/dur.Seconds(), "msgs/s")
	b.ReportMetric(100*float64(delivered)/float64(max(offered, 1)), "delivered-%")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(st.Unacked), "passed-stuck")
	b.ReportMetric(float64(redelivered), "redelivered-finished")
	b.ReportMetric(float64(offered), "offered-others")
	b.Logf("%v at %d/s: others offered %d, delivered %d (%.1f%%), p99 append to push %v; stuck key parked (%d parked), checkpoint %d, window %d/%d; pushes after the restart of messages finished before it: %d",
		dur, rate, offered, delivered, 100*float64(delivered)/float64(max(offered, 1)), p99, st.ParkedKeys, st.Committed, st.Unacked, st.MaxUnacked, redelivered)
}
