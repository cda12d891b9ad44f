package dispatcher

import (
	"github.com/mmmq/mmmq/modules/contract"
)

// Topic is one topic's log as the dispatcher sees it. The topic registry
// (modules/topicqueue) adapts its topics to it. Implementations must be safe
// for concurrent use.
type Topic interface {
	// Name is the topic name (valid per contract.ValidateTopic).
	Name() string
	// ReadBatch returns up to max entries starting at from, all below the
	// high watermark, in offset order without gaps; empty when from >=
	// HighWatermark(). On a corrupt entry at offset o it returns the entries
	// before o and a *contract.CorruptionError with Offset o. Once the topic is
	// closed it returns contract.ErrClosed.
	ReadBatch(from int64, max int) ([]contract.Entry, error)
	// HighWatermark is the number of visible (durable) entries, i.e. one past
	// the last readable offset. It never decreases.
	HighWatermark() int64
	// Notify returns a channel closed once HighWatermark() > offset, or once
	// the topic is closed, and not before: a worker woken with
	// HighWatermark() <= offset stops as for a closed topic.
	Notify(offset int64) <-chan struct{}
	// Checkpoint opens (or returns the already-open) durable checkpoint named
	// name for this topic. The topic owns it and closes it; callers do not.
	Checkpoint(name string) (contract.Checkpoint, error)
}

// Source yields topics: Subscribe calls fn for every existing topic, then for
// every topic created later, until cancel is called. fn must not block for
// long. After cancel returns, fn is not called any more. fn may be called
// more than once for the same topic name (for instance when a topic is
// deleted and created again); the Manager never runs two workers for the
// same (dispatcher, topic name).
type Source interface {
	Subscribe(fn func(Topic)) (cancel func())
}

// DeletionSource is a Source that also reports topics being deleted. The
// Manager stops the workers of such a topic before fn returns, so that the
// topic can be closed and removed; with a plain Source, workers end only
// when the topic's log closes.
type DeletionSource interface {
	Source
	// SubscribeDeletes calls fn for every topic being deleted (the topic
	// object Subscribe handed out), until cancel is called.
	SubscribeDeletes(fn func(Topic)) (cancel func())
}

// topicIncarnation is the topic's incarnation id when it has one (the
// registry's topics do: topicqueue.TopicQueue.Incarnation).
func topicIncarnation(t Topic) string {
	if i, ok := t.(contract.Incarnationer); ok {
		return i.Incarnation()
	}
	return ""
}
