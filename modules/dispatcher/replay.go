package dispatcher

import (
	"context"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/mmmq/mmmq/modules/contract"
)

// The replay rate of a seek or a redrive (Manager.SeekAt, RedriveAt).
//
// A seek or redrive given a rate paces the pushes of the backlog it made:
// one token bucket (golang.org/x/time/rate) per call, of rate tokens per
// second, shared by the workers of the topics the call moved or published
// into. Each such worker has a replay range [From, Until) of its topic:
// for a seek, from the new position to the topic's high watermark as the
// seek was called; for a redrive, from the topic's high watermark as the
// redrive began publishing into it to its high watermark as the redrive
// ended. A push takes one token per message of it inside the range (its
// first send and every resend), reserved before it is sent, as the
// dispatcher's own rate limit does (ratelimit.go); with both, a push
// waits for both, so the stricter holds. Messages outside the range are
// not paced by the replay. The replay ends, and leaves the status, once
// the worker's checkpoint reaches Until. It lives in memory only: a
// pause and resume keep it, a broker restart drops it.

// MaxReplayRate is the largest replay rate (messages per second) of a seek
// or redrive, the bound of the rate-limit key too.
const MaxReplayRate = MaxRateLimit

// ValidateReplayRate checks the "rate" of a seek or redrive (messages per
// second): a number > 0, at most MaxReplayRate. Error: a 400 naming the
// field "rate".
func ValidateReplayRate(r float64) error {
	if math.IsNaN(r) || r <= 0 || r > MaxReplayRate {
		return contract.BadRequest("field \"rate\" must be a number of messages per second > 0 and <= %d; got %v", int64(MaxReplayRate), r)
	}
	return nil
}

// replayCall is the token bucket of one seek or redrive with a rate,
// shared by the workers it applies to.
type replayCall struct {
	rate     float64
	lim      *rate.Limiter
	maxBatch int // most messages per batch push while it applies (the bucket's size)
}

// newReplayCall returns the bucket of a call at r messages per second for
// the dispatcher d: of one token, or, when d sends batches, of a tenth of
// a second of tokens (at least 1) up to batch.max-messages (a batch then
// holds at most that).
func newReplayCall(d *Dispatcher, r float64) *replayCall {
	b := 1
	if mm := d.Batch().MaxMessages; mm > 1 {
		b = max(1, min(mm, int(math.Ceil(r/10))))
	}
	return &replayCall{rate: r, lim: rate.NewLimiter(rate.Limit(r), b), maxBatch: b}
}

// replay is the replay of one (dispatcher, topic) worker: its call's
// bucket and the range of offsets paced.
type replay struct {
	call  *replayCall
	from  int64
	until atomic.Int64 // math.MaxInt64 while a redrive is still publishing
}

// Replay is a worker's replay as the status shows it: the pushes of the
// messages at offsets [From, Until) of its topic go at most Rate messages
// per second (shared by the workers of the seek or redrive that set it)
// until the checkpoint reaches Until.
type Replay struct {
	Rate  float64 `json:"rate"`
	From  int64   `json:"from"`
	Until int64   `json:"until"`
}

func (r *replay) view() *Replay {
	return &Replay{Rate: r.call.rate, From: r.from, Until: r.until.Load()}
}

// paced counts the messages of unit inside r's range.
func (r *replay) paced(unit []*msg) int {
	until, n := r.until.Load(), 0
	for _, m := range unit {
		if m.e.Offset >= r.from && m.e.Offset < until {
			n++
		}
	}
	return n
}

// setReplayLocked gives the worker of key the replay r, or none when r is nil
// (m.mu held): kept for a worker that starts later (a paused dispatcher,
// a seek's restart), handed at once to a running one.
func (m *Manager) setReplayLocked(k workerKey, r *replay) {
	if r == nil {
		delete(m.replays, k)
	} else {
		m.replays[k] = r
	}
	if w, ok := m.workers[k]; ok && !w.ended {
		w.replay.Store(r)
	}
}

// endReplay removes r, reached by the worker of key, unless another call
// replaced it meanwhile.
func (m *Manager) endReplay(k workerKey, r *replay) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.replays[k] == r {
		delete(m.replays, k)
	}
}

// replayOf is the replay of the worker of key that is not running (the
// status of a paused dispatcher), nil when none.
func (m *Manager) replayOf(k workerKey) *Replay {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.replays[k]; r != nil {
		return r.view()
	}
	return nil
}

// replayReached ends w's replay once its checkpoint, committed at next,
// reaches the replay's Until.
func (w *worker) replayReached(next int64) {
	r := w.replay.Load()
	if r == nil || next < r.until.Load() {
		return
	}
	if w.replay.CompareAndSwap(r, nil) {
		w.m.endReplay(workerKey{w.d.name, w.topicName}, r)
		w.log.Info("replay rate ended: the checkpoint reached its target", zap.Int64("until", r.until.Load()))
	}
}

// replayStatus is w's replay for the status, nil when none or reached.
func (w *worker) replayStatus(committed int64) *Replay {
	r := w.replay.Load()
	if r == nil || committed >= r.until.Load() {
		return nil
	}
	return r.view()
}

// replayPublisher is the Publisher of a redrive of the dispatcher d with a
// replay rate (call nil: without one, which clears the replays of the
// topics it publishes into): before the first publish into a topic it
// sets the replay of d's worker of that topic, from the topic's high
// watermark then (or from the start of the replay it replaces, not yet
// reached); finish closes the ranges at the high watermarks at the end.
type replayPublisher struct {
	Publisher
	m    *Manager
	d    *Dispatcher
	call *replayCall

	mu     sync.Mutex
	topics map[string]*replay
}

func (p *replayPublisher) PublishDurable(ctx context.Context, topic string, stored [][]byte) (int64, error) {
	p.mu.Lock()
	if _, seen := p.topics[topic]; !seen && p.d.Matches(topic) {
		p.m.mu.Lock()
		var r *replay
		k := workerKey{p.d.name, topic}
		if p.call != nil {
			r = &replay{call: p.call}
			if t := p.m.topics[topic]; t != nil {
				r.from = t.HighWatermark()
			}
			if old := p.m.replays[k]; old != nil {
				// Not reached yet (an earlier redrive's, say: a redrive
				// goes on from "next" in calls of MaxRedrive): its
				// backlog stays paced, at this call's rate.
				r.from = min(r.from, old.from)
			}
			r.until.Store(math.MaxInt64)
		}
		p.m.setReplayLocked(k, r)
		p.m.mu.Unlock()
		p.topics[topic] = r
	}
	p.mu.Unlock()
	return p.Publisher.PublishDurable(ctx, topic, stored)
}

// finish sets every replay's Until to its topic's high watermark now (the
// end of the redrive) and returns them by topic; a replay with nothing in
// its range is removed.
func (p *replayPublisher) finish() []TopicReplay {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	var out []TopicReplay
	for topic, r := range p.topics {
		if r == nil {
			continue
		}
		hw := r.from
		if t := p.m.topics[topic]; t != nil {
			hw = t.HighWatermark()
		}
		r.until.Store(hw)
		k := workerKey{p.d.name, topic}
		if hw <= r.from {
			if p.m.replays[k] == r {
				p.m.setReplayLocked(k, nil)
			}
			continue
		}
		out = append(out, TopicReplay{Topic: topic, Replay: *r.view()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}

// TopicReplay is the replay a redrive set on one topic.
type TopicReplay struct {
	Topic string `json:"topic"`
	Replay
}

// holdReplay is reserve's part for the replay: the reservation of the
// tokens of unit's paced messages at now (nil when none are paced or no
// replay applies) and its delay.
func (w *worker) holdReplay(unit []*msg, now time.Time) (*rate.Reservation, time.Duration) {
	r := w.replay.Load()
	if r == nil {
		return nil, 0
	}
	n := r.paced(unit)
	if n == 0 {
		return nil, 0
	}
	res := r.call.lim.ReserveN(now, min(n, r.call.maxBatch))
	if !res.OK() {
		return nil, 0
	}
	return res, res.DelayFrom(now)
}

// replayBatchCap is the most messages of a batch push while a replay
// applies (0: no replay).
func (w *worker) replayBatchCap() int {
	if r := w.replay.Load(); r != nil {
		return r.call.maxBatch
	}
	return 0
}
