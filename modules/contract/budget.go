package contract

import (
	"fmt"
	"sync/atomic"
)

// ErrOverloaded is refused work: taking the bytes it needs would exceed the
// broker's in-flight memory budget (mmmq.broker.memory.max-inflight-bytes,
// see [Budget]). Nothing was done: a refused publish stored nothing, a
// refused fetch delivered nothing and did not move its session. HTTP 503
// OVERLOADED with Retry-After, line protocol ERR OVERLOADED. Errors wrap it
// with what was refused and the budget's state.
var ErrOverloaded = NewError(CodeOverloaded, "overloaded: in-flight memory budget used up")

// OverloadedRetryAfter is the Retry-After value (seconds) of an OVERLOADED
// HTTP answer.
const OverloadedRetryAfter = "1"

// Budget counts the bytes that requests in flight hold in memory, against
// one broker-wide cap: fetch replies (HTTP and line protocol), read-back
// pages and ACCEPTED publishes waiting for the storage writer all draw from
// the same Budget, so N concurrent requests (or N topics) cannot hold N
// times a per-request limit. Work that would go over the cap is refused
// with ErrOverloaded (or, where the protocol allows it, made smaller)
// instead of being queued.
//
// Every successful TryAcquire(n) must be matched by one Release(n) once
// the bytes are no longer held (the reply written, the entry handed to the
// writer's commit). A nil *Budget, or one with a cap of 0, admits
// everything; a nil one counts nothing. Safe for concurrent use.
type Budget struct {
	max  int64
	used atomic.Int64
}

// NewBudget returns a budget of maxBytes bytes; maxBytes <= 0 means
// unlimited (bytes are still counted, see InUse).
func NewBudget(maxBytes int64) *Budget { return &Budget{max: max(maxBytes, 0)} }

// TryAcquire takes n bytes if they fit under the cap and reports whether it
// did. n <= 0 always fits and takes nothing.
func (b *Budget) TryAcquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		cur := b.used.Load()
		if b.max > 0 && cur+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// Release returns n bytes taken by TryAcquire.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.used.Add(-n)
}

// InUse is the number of bytes currently taken (0 for a nil Budget).
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Max is the cap in bytes; 0 means unlimited.
func (b *Budget) Max() int64 {
	if b == nil {
		return 0
	}
	return b.max
}

// Overloaded returns ErrOverloaded wrapped with what was refused (e.g.
// "fetch of group g of topic t") and the n bytes it needed.
func (b *Budget) Overloaded(what string, n int64) error {
	return fmt.Errorf("%w: %s needs %d bytes, %d of %d bytes are in flight (mmmq.broker.memory.max-inflight-bytes); retry later",
		ErrOverloaded, what, n, b.InUse(), b.Max())
}
