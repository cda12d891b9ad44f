package schedule

import (
	"context"
	"errors"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Backoff of a topic whose due messages could not be appended: the first
// retry StuckRetryMin after the failure, each further failure doubling it,
// at most StuckRetryMax.
const (
	StuckRetryMin = time.Second
	StuckRetryMax = time.Minute
)

// stuck is a topic whose last move failed: its due messages wait until
// retry (Unix ms) while the other topics' move on. s.mu guards it.
type stuck struct {
	retry    int64
	wait     time.Duration // the backoff that gave retry
	failures int           // in a row
	reason   string        // the error's code, lower-cased ("too_large", ...)
	lastErr  string
	since    time.Time // the first failure in a row
}

// StuckTopic is a topic whose due scheduled messages the mover could not
// append (Stats): they stay pending, retried with a capped backoff, and do
// not hold up the other topics.
type StuckTopic struct {
	Topic    string
	Pending  int       // its pending messages, due or not
	Failures int       // failed attempts in a row
	Reason   string    // the last error's code, lower-cased: "too_large", "too_many_topics", "bad_request", ...
	LastErr  string    // the last error's text
	Since    time.Time // the first failure in a row
	Retry    time.Time // the next attempt, no earlier
}

// isGlobal reports whether err is not its topic's doing: the mover ending
// (a cancelled context). Those stop the pass; any other error of an append
// or a look into a topic is that topic's.
func isGlobal(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// blockedTopic reports whether topic's due messages wait for a retry at
// now (Unix ms); s.mu held.
func (s *Scheduler) blockedTopic(topic string, now int64) (int64, bool) {
	st := s.stuck[topic]
	if st == nil || st.retry <= now {
		return 0, false
	}
	return st.retry, true
}

// noteStuck records that moving ids (due messages of topic) failed with
// err: the topic is retried after its backoff, the failure logged (topic,
// schedule ids, error) and counted by reason; s.mu held.
func (s *Scheduler) noteStuck(topic string, ids []string, err error) {
	now := s.opts.Now()
	st := s.stuck[topic]
	if st == nil {
		st = &stuck{since: now}
		s.stuck[topic] = st
		st.wait = StuckRetryMin
	} else {
		st.wait = min(st.wait*2, StuckRetryMax)
	}
	st.failures++
	st.reason = strings.ToLower(contract.Classify(err).Code)
	st.lastErr = err.Error()
	st.retry = now.Add(st.wait).UnixMilli()
	s.moveFailures[st.reason]++
	const maxIDs = 10
	shown := ids
	if len(shown) > maxIDs {
		shown = shown[:maxIDs]
	}
	s.log.Warn("scheduled messages: could not move the due messages of a topic; they stay pending and are retried, the other topics move on",
		zap.String("topic", topic), zap.Strings("schedule-ids", shown), zap.Int("messages", len(ids)),
		zap.String("reason", st.reason), zap.Int("failures", st.failures), zap.Duration("retry-in", st.wait), zap.Error(err))
}

// clearStuck forgets topic's failures after a move of it succeeded, it was
// dropped, or nothing of it is pending; s.mu held.
func (s *Scheduler) clearStuck(topic string) {
	if st := s.stuck[topic]; st != nil {
		s.log.Info("scheduled messages: a topic's due messages move again", zap.String("topic", topic), zap.Int("failures", st.failures))
		delete(s.stuck, topic)
	}
}
