package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"
)

// deliveryCounter is the consumer side of -mode deliver: it ACKs every
// delivery at once and tracks, per topic, which offsets arrived (a bitmap
// relative to the first offset seen), so duplicates (at-least-once
// redeliveries) and order violations (a new offset that is not the highest
// seen + 1) are counted exactly.
type deliveryCounter struct {
	mu         sync.Mutex
	topics     map[string]*topicArrivals
	arrivals   int64
	unique     int64
	dups       int64
	violations int64
	bad        int64 // deliveries without usable mmmq-topic / mmmq-offset headers
	first      time.Time
	last       time.Time
}

type topicArrivals struct {
	base int64    // first offset seen
	max  int64    // highest offset seen
	seen []uint64 // bit i: offset base+i arrived
}

func newDeliveryCounter() *deliveryCounter {
	return &deliveryCounter{topics: map[string]*topicArrivals{}}
}

// record counts one arrival of (topic, offset) at now.
func (d *deliveryCounter) record(topic string, off int64, now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.arrivals++
	if d.first.IsZero() {
		d.first = now
	}
	d.last = now
	t := d.topics[topic]
	if t == nil {
		t = &topicArrivals{base: off, max: off - 1}
		d.topics[topic] = t
	}
	if off < t.base {
		// Older than the first arrival: out of order and not tracked.
		d.violations++
		d.unique++
		return
	}
	i := off - t.base
	w, bit := int(i/64), uint64(1)<<(i%64)
	for w >= len(t.seen) {
		t.seen = append(t.seen, 0)
	}
	if t.seen[w]&bit != 0 {
		d.dups++
		return
	}
	t.seen[w] |= bit
	d.unique++
	if off != t.max+1 {
		d.violations++
	}
	if off > t.max {
		t.max = off
	}
}

// snapshot returns unique arrivals and the time of the last arrival.
func (d *deliveryCounter) snapshot() (unique int64, last time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.unique, d.last
}

func (d *deliveryCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	topic := r.Header.Get("mmmq-topic")
	off, err := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
	if topic == "" || err != nil {
		d.mu.Lock()
		d.bad++
		d.mu.Unlock()
	} else {
		d.record(topic, off, now)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"acknowledgement":"ACK"}`))
}

// runDeliver starts the consumer, publishes -count messages (unless
// -no-publish) and waits until -count distinct messages have arrived.
func runDeliver(ctx context.Context, cfg benchConfig) (*benchResult, error) {
	ln, err := net.Listen("tcp", cfg.consumerAddr)
	if err != nil {
		return nil, fmt.Errorf("consumer: listen on %s: %w", cfg.consumerAddr, err)
	}
	dc := newDeliveryCounter()
	srv := &http.Server{Handler: dc, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	res := newResult(cfg, cfg.url)
	if cfg.noPublish {
		res.Producers, res.Batch = 0, 0
	}
	expect := cfg.count
	if !cfg.noPublish {
		published := publishForDelivery(ctx, cfg, res)
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if published < cfg.count {
			expect = published
		}
	}

	waitErr := dc.await(ctx, cfg, expect)
	// A short grace period so late duplicates show up in the counts.
	time.Sleep(200 * time.Millisecond)
	dc.fill(res)
	if waitErr == nil && res.Delivered == 0 && expect > 0 {
		waitErr = errors.New("nothing delivered")
	}
	return res, waitErr
}

// publishForDelivery publishes cfg.count messages as -mode publish would,
// without progress lines, and copies the publish figures (requests,
// messages, errors, msgs/s, latencies, first error) into res. It returns
// the number of messages acknowledged.
func publishForDelivery(ctx context.Context, cfg benchConfig, res *benchResult) int64 {
	pub := newResult(cfg, cfg.url)
	g := newLoadGen(cfg, cfg.url)
	p := cfg
	p.progress = false
	g.cfg = p
	g.run(ctx, pub)
	res.Requests, res.Messages, res.Errors = pub.Requests, pub.Messages, pub.Errors
	res.PublishMsgsPerSec = pub.MsgsPerSec
	res.P50Ms, res.P99Ms, res.P999Ms, res.MaxMs = pub.P50Ms, pub.P99Ms, pub.P999Ms, pub.MaxMs
	res.FirstError = pub.FirstError
	return pub.Messages
}

// await waits until expect distinct messages have arrived, printing
// progress to stderr every second when cfg.progress is set. It returns nil
// then, an error when nothing arrived for cfg.idleTimeout, or ctx.Err().
func (d *deliveryCounter) await(ctx context.Context, cfg benchConfig, expect int64) error {
	started := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastPrint time.Time
	var lastN int64
	for {
		n, last := d.snapshot()
		if n >= expect {
			return nil
		}
		ref := last
		if ref.IsZero() {
			ref = started
		}
		if time.Since(ref) > cfg.idleTimeout {
			return fmt.Errorf("no arrival for %s: delivered %d of %d", cfg.idleTimeout, n, expect)
		}
		if cfg.progress && time.Since(lastPrint) >= time.Second {
			if !lastPrint.IsZero() {
				fmt.Fprintf(os.Stderr, "bench: delivered %10d of %d, %8.0f msgs/s now\n",
					n, expect, float64(n-lastN)/time.Since(lastPrint).Seconds())
			}
			lastPrint, lastN = time.Now(), n
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// fill copies the delivery counts into res: unique deliveries, duplicates,
// order violations, unusable deliveries (added to Errors), and the seconds
// and msgs/s from the first to the last arrival.
func (d *deliveryCounter) fill(res *benchResult) {
	d.mu.Lock()
	res.Delivered, res.Duplicates, res.OrderViolations = d.unique, d.dups, d.violations
	res.Errors += d.bad
	if !d.first.IsZero() {
		res.DeliverSeconds = d.last.Sub(d.first).Seconds()
	}
	d.mu.Unlock()
	if res.DeliverSeconds > 0 {
		res.MsgsPerSec = float64(res.Delivered) / res.DeliverSeconds
	}
	res.Seconds = res.DeliverSeconds
}
