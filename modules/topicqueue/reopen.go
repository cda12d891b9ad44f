package topicqueue

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Reopen brings the failed topic name back into service (POST
// /topics/{topic}/reopen): its log runs the startup recovery of that one
// topic, cut back to the high watermark it had before the failure, and
// accepts writes again. The TopicQueue, its log, its checkpoints and
// everything that holds them — dispatch workers, consumer-group sessions,
// long polls — stay as they are: nothing below the high watermark changed,
// so they go on without a restart. It returns the high watermark.
//
// Errors: ErrInvalidName (400), ErrNotFound for a topic that is not open
// (404), ErrQuarantined for one refused by startup recovery (reopen
// recovers from a failed write, not from corruption), the log's
// storage.ErrNotFailed (409 TOPIC_NOT_FAILED) and storage.ErrReopening
// (409 TOPIC_BUSY), ErrReopenUnsupported, or the recovery's error (503
// TOPIC_FAILED: the topic stays failed).
func (r *Registry) Reopen(name string) (int64, error) {
	if err := contract.ValidateTopic(name); err != nil {
		return -1, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	q, ok := r.Get(name)
	if !ok {
		r.mu.RLock()
		qerr := r.quarantined[name]
		r.mu.RUnlock()
		if qerr != nil {
			return -1, fmt.Errorf("%w: %s: %v (reopen recovers from a failed write, not from corruption: run mmmq verify)", ErrQuarantined, name, qerr)
		}
		return -1, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	ro, ok := q.log.(contract.Reopener)
	if !ok {
		return -1, fmt.Errorf("%w: topic %s", ErrReopenUnsupported, name)
	}
	// The window may remember offsets past the high watermark the log is
	// cut back to (WRITTEN publishes the failure lost): it forgets them
	// all and rebuilds from the recovered log on the next publish. Claims
	// in flight were failed with the log and record nothing.
	q.dd.Reset()
	hw, err := ro.Reopen()
	if err != nil {
		return -1, err
	}
	r.log.Info("topic reopened", zap.String("topic", name), zap.Int64("high-watermark", hw))
	return hw, nil
}
