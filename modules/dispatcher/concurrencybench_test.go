package dispatcher

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
)

var (
	aimdPhase    = flag.Duration("dispatch.aimd-phase", 6*time.Second, "how long each capacity of BenchmarkAdaptiveConcurrency lasts")
	aimdService  = flag.Duration("dispatch.aimd-service", 20*time.Millisecond, "how long BenchmarkAdaptiveConcurrency's consumer takes per message")
	aimdOrdering = flag.String("dispatch.aimd-ordering", "key", "the ordering of BenchmarkAdaptiveConcurrency's dispatcher: key or none")
)

// BenchmarkAdaptiveConcurrency: a consumer that serves at most cap
// requests at once, each for dispatch.aimd-service (20 ms), and answers
// 429 at once (no Retry-After) to any request above cap; cap is 10 for
// dispatch.aimd-phase (6 s), then 40 for as long. One dispatcher,
// max-in-flight 64, ordering key over 1000 keys (dispatch.aimd-ordering;
// a 429'd message's key waits out its backoff, the broker's defaults: 1 s
// doubling; under none the whole topic waits), on one
// topic with a backlog, and adaptive-concurrency aimd; then the same with
// adaptive-concurrency off for one phase at cap 10 (the control). Every
// 250 ms it prints the limit, the pushes outstanding (mean of 10 ms
// samples), busy% (the consumer's requests in service over cap, mean)
// and the 429s of the window; at the end per phase, from 2 s into it on,
// the mean outstanding, busy%, 429s per second and ACKs per second. Run
// with
//
//	go test -run '^$' -bench AdaptiveConcurrency -benchtime 1x -v ./modules/dispatcher/
func BenchmarkAdaptiveConcurrency(b *testing.B) {
	for range b.N {
		aimd := runAdaptive(b, AdaptiveAIMD, []int{10, 40})
		off := runAdaptive(b, AdaptiveOff, []int{10})
		b.ReportMetric(aimd[0].busy, "busy%-cap10")
		b.ReportMetric(aimd[0].outstanding, "outstanding-cap10")
		b.ReportMetric(aimd[1].busy, "busy%-cap40")
		b.ReportMetric(aimd[1].outstanding, "outstanding-cap40")
		b.ReportMetric(aimd[0].rejected, "429/s-cap10")
		b.ReportMetric(off[0].rejected, "429/s-cap10-off")
		b.ReportMetric(aimd[0].acks+aimd[1].acks, "msgs/s")
	}
}

// phaseFigures are one capacity's figures from 2 s into it on.
type phaseFigures struct{ outstanding, busy, rejected, acks float64 }

func runAdaptive(b *testing.B, mode AdaptiveConcurrency, caps []int) []phaseFigures {
	phase, service := *aimdPhase, *aimdService
	var capacity, active atomic.Int64
	var rejected, acked atomic.Int64
	capacity.Store(int64(caps[0]))
	c := newConsumer(b, func(_ received, w http.ResponseWriter, _ *http.Request) {
		if active.Add(1) > capacity.Load() {
			active.Add(-1)
			rejected.Add(1)
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		time.Sleep(service)
		active.Add(-1)
		acked.Add(1)
		answer(w, ACK)
	})
	name := "aimd-" + string(mode)
	tp := newMemTopic(b, b.TempDir(), name)
	total := int(float64(phase.Seconds()*float64(len(caps))) * 2200 / (float64(service) / float64(20*time.Millisecond)))
	msgs := make([][]byte, 0, total)
	for i := range total {
		msgs = append(msgs, keyMsg(b, name, i, fmt.Sprintf("k%d", i%1000)))
	}
	tp.appendStored(msgs...)
	d := New(name, c.host(b), MustPattern(name)).WithMaxInFlight(64).WithOrdering(Ordering(*aimdOrdering)).WithAdaptiveConcurrency(mode)
	set, err := SetOf(d)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{BatchSize: 256}
	sender := NewHTTPSender(opts)
	defer sender.CloseIdleConnections()
	m := NewManager(set, newMemSource(tp), sender, opts, zap.NewNop())
	start := time.Now()
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	var rows strings.Builder
	fmt.Fprintf(&rows, "adaptive-concurrency %s, max-in-flight 64, ordering %s, consumer capacity %v, %s per message\n", mode, *aimdOrdering, caps, service)
	fmt.Fprintf(&rows, "%6s %4s %6s %12s %6s %6s\n", "t", "cap", "limit", "outstanding", "busy%", "429s")
	figs := make([]phaseFigures, len(caps))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var sumOut, sumBusy float64
	var n int
	var lastRej int64
	var phaseSumOut, phaseSumBusy float64
	var phaseN int
	var phaseRej0, phaseAck0 int64
	var phaseT0 time.Time
	for p, cp := range caps {
		capacity.Store(int64(cp))
		pStart := time.Now()
		phaseSumOut, phaseSumBusy, phaseN = 0, 0, 0
		phaseT0 = time.Time{}
		next := pStart.Add(250 * time.Millisecond)
		for now := range tick.C {
			st := ConcurrencyStatus{Limit: 64, Max: 64}
			if mode == AdaptiveAIMD {
				st, _ = m.ConcurrencyStatus(name)
			} else {
				st.InFlight = status(m, name, name).InFlight
			}
			busy := float64(min(active.Load(), int64(cp))) / float64(cp) * 100
			sumOut += float64(st.InFlight)
			sumBusy += busy
			n++
			if now.Sub(pStart) >= 2*time.Second {
				if phaseT0.IsZero() {
					phaseT0, phaseRej0, phaseAck0 = now, rejected.Load(), acked.Load()
				}
				phaseSumOut += float64(st.InFlight)
				phaseSumBusy += busy
				phaseN++
			}
			if !now.Before(next) {
				rej := rejected.Load()
				mu.Lock()
				fmt.Fprintf(&rows, "%6.2f %4d %6d %12.1f %6.0f %6d\n", now.Sub(start).Seconds(), cp, st.Limit, sumOut/float64(n), sumBusy/float64(n), rej-lastRej)
				mu.Unlock()
				sumOut, sumBusy, n, lastRej = 0, 0, 0, rej
				next = next.Add(250 * time.Millisecond)
			}
			if now.Sub(pStart) >= phase {
				break
			}
		}
		secs := time.Since(phaseT0).Seconds()
		figs[p] = phaseFigures{outstanding: phaseSumOut / float64(phaseN), busy: phaseSumBusy / float64(phaseN),
			rejected: float64(rejected.Load()-phaseRej0) / secs, acks: float64(acked.Load()-phaseAck0) / secs}
		fmt.Fprintf(&rows, "capacity %d, from 2 s on: outstanding %.1f, busy %.1f%%, %.1f 429s/s, %.0f ACKs/s\n",
			cp, figs[p].outstanding, figs[p].busy, figs[p].rejected, figs[p].acks)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if acked.Load() >= int64(total) {
		b.Fatalf("the backlog of %d ran out: make it longer", total)
	}
	b.Log("\n" + rows.String())
	return figs
}
