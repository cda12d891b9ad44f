package schedule

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// LatenessBuckets are the upper bounds, in seconds, of the lateness
// histogram of Stats: how long after its due time each message entered
// its topic.
var LatenessBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60}

// Stats is what the store has done since Start, for metrics.
type Stats struct {
	// Pending is the number of pending messages of every topic.
	Pending int
	// Moved counts the messages moved into their topic (appended, or found
	// there after a crash and recorded delivered).
	Moved uint64
	// LatenessCounts[i] counts the moved messages at most
	// LatenessBuckets[i] seconds late (cumulative); LatenessCount all of
	// them, LatenessSum their lateness in seconds.
	LatenessCounts []uint64
	LatenessCount  uint64
	LatenessSum    float64
	// MoveFailures counts the failed moves of a topic's due messages by
	// reason (the error's code lower-cased: "too_large",
	// "too_many_topics", "bad_request", "topic_failed", ...).
	MoveFailures map[string]uint64
	// Stuck is the topics whose due messages could not be moved at the
	// last attempt, sorted by name: retried with a capped backoff
	// (StuckRetryMin doubling to StuckRetryMax).
	Stuck []StuckTopic
}

// lateness is the histogram behind Stats; s.mu guards it.
type lateness struct {
	counts []uint64 // per bucket, not cumulative; one more for +Inf
	sum    float64
	n      uint64
}

func (l *lateness) observe(d time.Duration) {
	if l.counts == nil {
		l.counts = make([]uint64, len(LatenessBuckets)+1)
	}
	sec := max(d.Seconds(), 0)
	i, _ := slices.BinarySearch(LatenessBuckets, sec)
	l.counts[i]++
	l.sum += sec
	l.n++
}

// Stats returns the store's figures now.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Moved: s.moved, LatenessCount: s.late.n, LatenessSum: s.late.sum, LatenessCounts: make([]uint64, len(LatenessBuckets))}
	for _, n := range s.pending {
		st.Pending += n
	}
	st.MoveFailures = maps.Clone(s.moveFailures)
	for t, k := range s.stuck {
		st.Stuck = append(st.Stuck, StuckTopic{Topic: t, Pending: s.pending[t], Failures: k.failures, Reason: k.reason,
			LastErr: k.lastErr, Since: k.since, Retry: time.UnixMilli(k.retry)})
	}
	slices.SortFunc(st.Stuck, func(a, b StuckTopic) int { return strings.Compare(a.Topic, b.Topic) })
	c := uint64(0)
	for i := range LatenessBuckets {
		if s.late.counts != nil {
			c += s.late.counts[i]
		}
		st.LatenessCounts[i] = c
	}
	return st
}
