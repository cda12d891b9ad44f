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
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if pub.Messages < cfg.count {
			expect = pub.Messages
		}
	}

	// Wait for every message, printing progress.
	started := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var lastPrint time.Time
	var lastN int64
	var waitErr error
	for {
		n, last := dc.snapshot()
		if n >= expect {
			break
		}
		ref := last
		if ref.IsZero() {
			ref = started
		}
		if time.Since(ref) > cfg.idleTimeout {
			waitErr = fmt.Errorf("no arrival for %s: delivered %d of %d", cfg.idleTimeout, n, expect)
			break
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
			waitErr = ctx.Err()
		case <-tick.C:
		}
		if waitErr != nil {
			break
		}
	}
	// A short grace period so late duplicates show up in the counts.
	time.Sleep(200 * time.Millisecond)
	dc.mu.Lock()
	res.Delivered, res.Duplicates, res.OrderViolations = dc.unique, dc.dups, dc.violations
	res.Errors += dc.bad
	if !dc.first.IsZero() {
		res.DeliverSeconds = dc.last.Sub(dc.first).Seconds()
	}
	dc.mu.Unlock()
	if res.DeliverSeconds > 0 {
		res.MsgsPerSec = float64(res.Delivered) / res.DeliverSeconds
	}
	res.Seconds = res.DeliverSeconds
	if waitErr == nil && res.Delivered == 0 && expect > 0 {
		waitErr = errors.New("nothing delivered")
	}
	return res, waitErr
}
