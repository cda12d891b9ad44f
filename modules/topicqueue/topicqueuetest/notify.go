// Package topicqueuetest holds test doubles for code built on the topic
// registry: wrappers around a real topicqueue.Backend that let a test see
// what its logs are asked, instead of sleeping until it probably happened.
package topicqueuetest

import (
	"context"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// NotifyingBackend is a topicqueue.Backend whose logs send on Notified
// (without blocking: at most what the channel buffers stays pending) each
// time a caller takes a Notify channel. A fetch or dispatch worker takes
// one just before it blocks waiting for a topic, so a test that receives
// from Notified knows a publish, stop or cancel from then on ends that
// wait. Give Notified a buffer of 1.
type NotifyingBackend struct {
	topicqueue.Backend
	Notified chan struct{}
}

// Open opens the topic through the wrapped backend and wraps its log.
func (b *NotifyingBackend) Open(name string, create bool) (contract.Log, error) {
	l, err := b.Backend.Open(name, create)
	if err != nil {
		return nil, err
	}
	return &notifyingLog{l, b.Notified}, nil
}

type notifyingLog struct {
	contract.Log
	notified chan struct{}
}

func (l *notifyingLog) Notify(offset int64) <-chan struct{} {
	ch := l.Log.Notify(offset)
	select {
	case l.notified <- struct{}{}:
	default:
	}
	return ch
}

// AppendBatchNotify forwards to the wrapped log's callback form (a
// *storage.Log has it), so that publishes through this backend take the
// same path as on the local backend: queued before the call returns, in
// call order. A wrapped log without it appends with AppendBatch, at least
// Written, and calls notify before returning.
func (l *notifyingLog) AppendBatchNotify(payloads [][]byte, level contract.AckLevel, notify func(first int64, err error)) error {
	type notifier interface {
		AppendBatchNotify(payloads [][]byte, level contract.AckLevel, notify func(first int64, err error)) error
	}
	if n, ok := l.Log.(notifier); ok {
		return n.AppendBatchNotify(payloads, level, notify)
	}
	first, err := l.Log.AppendBatch(context.Background(), payloads, max(level, contract.Written))
	if err != nil {
		return err
	}
	notify(first, nil)
	return nil
}

// Unwrap returns the wrapped log, e.g. the *storage.Log of a local
// backend, for tests that drive it directly (ApplyRetention).
func (l *notifyingLog) Unwrap() contract.Log { return l.Log }

// Incarnation forwards the wrapped log's incarnation id ("" when it has
// none), so that topics over this backend show it as the real ones do.
func (l *notifyingLog) Incarnation() string {
	if i, ok := l.Log.(contract.Incarnationer); ok {
		return i.Incarnation()
	}
	return ""
}

// Checkpoints forwards to the wrapped log when it lists its checkpoints
// (contract.CheckpointLister); otherwise it lists none.
func (l *notifyingLog) Checkpoints() ([]string, error) {
	if cl, ok := l.Log.(contract.CheckpointLister); ok {
		return cl.Checkpoints()
	}
	return nil, nil
}

// Delete forwards to the wrapped backend when it can delete topics
// (contract.TopicDeleter); otherwise it fails with
// topicqueue.ErrDeleteUnsupported and the topic stays stored.
func (b *NotifyingBackend) Delete(name string) (stored bool, err error) {
	if d, ok := b.Backend.(contract.TopicDeleter); ok {
		return d.Delete(name)
	}
	return true, topicqueue.ErrDeleteUnsupported
}

// FinishDeletions forwards to the wrapped backend when it can delete
// topics; otherwise there is nothing to finish.
func (b *NotifyingBackend) FinishDeletions() ([]string, error) {
	if d, ok := b.Backend.(contract.TopicDeleter); ok {
		return d.FinishDeletions()
	}
	return nil, nil
}
