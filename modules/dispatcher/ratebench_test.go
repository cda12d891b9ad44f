package dispatcher

import (
	"flag"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	rateFor   = flag.Duration("dispatch.rate-for", 30*time.Second, "how long BenchmarkRateLimit pushes at its rate")
	rateLimit = flag.Float64("dispatch.rate", 500, "the rate-limit of BenchmarkRateLimit, messages per second")
	rateIn    = flag.String("dispatch.rate-in-flight", "1,8,64", "the max-in-flight levels BenchmarkRateLimit runs at, comma-separated")
)

// BenchmarkRateLimit measures what a rate limit lets through over a long
// window: one dispatcher with rate-limit r (burst r/10), max-in-flight 1,
// 8 and 64 (one sub-benchmark each, dispatch.rate-in-flight),
// on 4 topics holding more than r × dispatch.rate-for messages, pushing
// over HTTP to an httptest consumer that ACKs at once. After the first
// burst the arrivals come at r per second: it reports the rate seen by
// the consumer from the first arrival to the last (the burst left out)
// and its error against r in percent (the goal: within ±5 %). Run with
//
//	go test -run '^$' -bench RateLimit -benchtime 1x ./modules/dispatcher/ -dispatch.rate-for 30s
func BenchmarkRateLimit(b *testing.B) {
	for _, f := range strings.Split(*rateIn, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			b.Fatalf("-dispatch.rate-in-flight: %q is not a max-in-flight", f)
		}
		b.Run(fmt.Sprintf("max-in-flight=%d", n), func(b *testing.B) { benchRateLimit(b, n) })
	}
}

func benchRateLimit(b *testing.B, inFlight int) {
	r, dur := *rateLimit, *rateFor
	burst := max(1, int(r/10))
	const topics = 4
	per := int(r*dur.Seconds())/topics + burst
	for range b.N {
		var mu sync.Mutex
		var at []time.Time
		c := newConsumer(b, func(_ received, w http.ResponseWriter, _ *http.Request) {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			answer(w, ACK)
		})
		var tps []*memTopic
		for i := range topics {
			tp := newMemTopic(b, b.TempDir(), "rate."+string(rune('a'+i)))
			tp.publish(per)
			tps = append(tps, tp)
		}
		d := New("rate", c.host(b), MustPattern("rate.*")).WithMaxInFlight(inFlight).WithRateLimit(r, burst)
		opts := testOptions()
		opts.BatchSize = 256
		m := startWith(b, NewHTTPSender(opts), opts, tps, d)
		for deadline := time.Now().Add(dur*2 + time.Minute); ; time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			n := len(at)
			mu.Unlock()
			if n >= per*topics {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d messages pushed in %s", n, per*topics, dur*2+time.Minute)
			}
		}
		stopManager(b, m)
		mu.Lock()
		span := at[len(at)-1].Sub(at[0])
		got := float64(len(at)-burst) / span.Seconds()
		// The largest burst seen: over every window [t_i, t_j] of the
		// arrivals, (j - i + 1) - r × (t_j - t_i), the messages beyond what
		// the rate alone lets through (a token bucket keeps it at most
		// burst), in one pass: the best j - r·t_j minus the lowest i - r·t_i
		// before it.
		seen, low := 0.0, 0.0
		for i, t := range at {
			v := float64(i) - r*t.Sub(at[0]).Seconds()
			if i == 0 || v < low {
				low = v
			}
			seen = max(seen, v-low+1)
		}
		mu.Unlock()
		errPct := (got/r - 1) * 100
		b.ReportMetric(got, "msgs/s")
		b.ReportMetric(errPct, "err%")
		b.ReportMetric(seen, "burst-seen")
		b.Logf("rate-limit %v/s, burst %d, max-in-flight %d: %d messages over %s, %.1f/s (%+.2f%%), largest burst beyond the rate %.1f", r, burst, inFlight, per*topics, span.Round(time.Millisecond), got, errPct, seen)
	}
}
