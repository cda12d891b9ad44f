package auth

import (
	"math"
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Limiter enforces each principal's limits (contract.Limiter), by
// principal name, so that a reload that keeps a name keeps its counts:
// semaphores for "request" (max-concurrent-requests) and "connection"
// (max-connections), and a token bucket for publish-rate. Safe for
// concurrent use.
type Limiter struct {
	now func() time.Time

	mu      sync.Mutex
	inUse   map[slotKey]int
	buckets map[string]*bucket
}

type slotKey struct{ name, kind string }

// bucket is one principal's publish token bucket.
type bucket struct {
	tokens float64
	last   time.Time
	rate   float64 // the rate and burst it was filled at: a reload that
	burst  float64 // changes them starts a fresh, full bucket
}

// NewLimiter returns an empty Limiter.
func NewLimiter() *Limiter {
	return &Limiter{now: time.Now, inUse: map[slotKey]int{}, buckets: map[string]*bucket{}}
}

// concurrencyRetry is the Retry-After of a full semaphore: requests are
// short, and nothing says when one ends.
const concurrencyRetry = time.Second

// Acquire takes one of p's "request" or "connection" slots; release gives
// it back (once, whatever the number of calls). Without a limit it takes
// nothing.
func (l *Limiter) Acquire(p contract.Principal, kind string) (release func(), err error) {
	lim := p.Limits()
	max, what := lim.MaxConcurrentRequests, "concurrent requests"
	if kind == "connection" {
		max, what = lim.MaxConnections, "connections"
	}
	if max <= 0 {
		return func() {}, nil
	}
	k := slotKey{p.Name(), kind}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inUse[k] >= max {
		return nil, &contract.RateLimitedError{Principal: p.Name(), What: what, RetryAfter: concurrencyRetry}
	}
	l.inUse[k]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.inUse[k]--; l.inUse[k] <= 0 {
				delete(l.inUse, k)
			}
		})
	}, nil
}

// Publish takes n messages from p's bucket (publish-rate per second,
// publish-burst deep, full at first). A batch larger than the bucket is
// let through once the bucket is full and leaves it in debt, so that
// large batches still average publish-rate instead of never fitting. A
// refusal says when n would fit.
func (l *Limiter) Publish(p contract.Principal, n int) error {
	lim := p.Limits()
	if lim.PublishRate <= 0 || n <= 0 {
		return nil
	}
	burst := float64(lim.PublishBurst)
	if burst <= 0 {
		burst = math.Max(1, lim.PublishRate)
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.buckets[p.Name()]
	if !ok || b.rate != lim.PublishRate || b.burst != burst {
		// New, or its limits changed by a reload: a debt run up at the
		// old rate is not carried into the new one.
		b = &bucket{tokens: burst, last: now, rate: lim.PublishRate, burst: burst}
		l.buckets[p.Name()] = b
	}
	if el := now.Sub(b.last).Seconds(); el > 0 {
		b.tokens = math.Min(burst, b.tokens+el*lim.PublishRate)
		b.last = now
	}
	need := math.Min(float64(n), burst)
	if b.tokens >= need {
		b.tokens -= float64(n)
		return nil
	}
	wait := time.Duration((need - b.tokens) / lim.PublishRate * float64(time.Second))
	return &contract.RateLimitedError{Principal: p.Name(), What: "publish rate", RetryAfter: wait}
}
