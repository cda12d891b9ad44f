package httpapi

import (
	"context"
	"sync"
	"time"
)

// deadlineTick is the granularity of shared publish deadlines.
const deadlineTick = 100 * time.Millisecond

// sharedDeadlines hands out contexts that end at least timeout after the
// call and at most timeout + deadlineTick after it. Every call within one
// tick gets the same context, so a publish costs no timer and no context of
// its own (context.WithTimeout per request was ~5% of the publish path's
// CPU). The contexts do not follow the request's: a client that hangs up
// does not end the wait early, which only matters while the disk hangs
// (the wait ends at the timeout, as it would anyway).
type sharedDeadlines struct {
	timeout time.Duration

	mu       sync.Mutex
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelFunc // released by the context's own timer
}

// get returns a context that ends between timeout and timeout+deadlineTick
// from now.
func (d *sharedDeadlines) get(now time.Time) context.Context {
	want := now.Add(d.timeout)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ctx == nil || d.deadline.Before(want) {
		d.deadline = want.Truncate(deadlineTick).Add(deadlineTick)
		d.ctx, d.cancel = context.WithDeadline(context.Background(), d.deadline)
	}
	return d.ctx
}
