package topicqueue

import (
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// PublishObserver is told how long every answered publish took (the
// metrics plugin turns it into mmmq_publish_duration_seconds). Set it in
// Options.PublishObserver (in the Fx graph: provide one; RegistryParams
// takes it when present). The registry does not depend on what it does
// with the numbers.
type PublishObserver interface {
	// ObservePublish reports one publish call whose outcome at level
	// (the level the caller asked for: Accepted, Written or Durable) is
	// ready: d is the time from the call into Registry.PublishMessagesNotify
	// (PublishMessages and Publish go through it) or TopicQueue.PublishNotify
	// (Publish) until that outcome was known, just before done is called
	// (and the waiting call returns). A retry on a topic created anew
	// after a deletion is inside d. messages is len(msgs) of the call,
	// duplicates of the idempotent-publish window included (0 for a call
	// with no messages): each of them was answered after d.
	//
	// Only publishes that succeed are observed: not those refused before
	// anything was queued, nor those whose append failed. A call whose
	// caller stopped waiting (its context ended) is observed when the
	// publish completes.
	//
	// It is called on the goroutine that completes the publish: for the
	// local backend at WRITTEN and DURABLE the topic log's writer
	// goroutine. It must not block, and should not allocate: it runs once
	// per publish call on the hot path.
	ObservePublish(level contract.AckLevel, messages int, d time.Duration)
}

// publishStart is the start of a publish's observed time: now when there
// is an observer, the zero time (no clock read) otherwise.
func publishStart(o PublishObserver) time.Time {
	if o == nil {
		return time.Time{}
	}
	return time.Now()
}
