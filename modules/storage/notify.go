package storage

import (
	"math"
	"sync"
	"sync/atomic"
)

// closedChan is what Notify returns when there is nothing to wait for.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// hwWaiters holds the channels Notify handed out and that are not closed
// yet, one per offset waited past: every waiter for the same offset shares
// a channel. A channel is closed once the high watermark passes its offset
// or the log closes, never earlier, so a waiter never wakes up to find
// nothing new.
//
// The zero value is ready to use.
type hwWaiters struct {
	mu     sync.Mutex
	byOff  map[int64]chan struct{}
	min    int64 // smallest key of byOff; unused while byOff is empty
	closed bool
}

// wait returns the channel that is closed once *hw > offset or closeAll
// runs. The caller has already seen *hw <= offset without the lock; the
// check is repeated under it, and release takes the same lock after
// storing the new value, so no publish between the two checks is missed.
func (w *hwWaiters) wait(offset int64, hw *atomic.Int64) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || hw.Load() > offset {
		return closedChan
	}
	if ch, ok := w.byOff[offset]; ok {
		return ch
	}
	if w.byOff == nil {
		w.byOff = make(map[int64]chan struct{})
	}
	if len(w.byOff) == 0 || offset < w.min {
		w.min = offset
	}
	ch := make(chan struct{})
	w.byOff[offset] = ch
	return ch
}

// release closes the channels of every offset below hw, which the caller
// has already stored as the new high watermark.
func (w *hwWaiters) release(hw int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.byOff) == 0 || w.min >= hw {
		return
	}
	w.min = math.MaxInt64
	for off, ch := range w.byOff {
		if off < hw {
			close(ch)
			delete(w.byOff, off)
		} else if off < w.min {
			w.min = off
		}
	}
}

// closeAll closes every channel, and makes wait return a closed channel
// from now on.
func (w *hwWaiters) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, ch := range w.byOff {
		close(ch)
	}
	w.byOff = nil
}
