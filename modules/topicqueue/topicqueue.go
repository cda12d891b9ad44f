// Package topicqueue is the registry of TopicQueues (the TopicQueue of the
// original Java mmmq): one append-only log per topic, created on the first
// message of a new topic (dynamic creation), with read by offset, durable
// per-dispatcher commits and a watermark wait. It emits a "topic created"
// event that dispatchers subscribe to. It works without Fx; fx.go wires it.
package topicqueue

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/storage"
)

// TopicQueue is one topic's append-only persistent queue (as in the original
// Java mmmq): every message gets the next offset, and each dispatcher or
// consumer group reads it independently through its own checkpoint. Safe for
// concurrent use.
type TopicQueue struct {
	name    string
	log     contract.Log
	deleted atomic.Bool     // set by Registry.Delete before the log closes
	dd      *dedup.Window   // the idempotent-publish window; nil when off
	obs     PublishObserver // Options.PublishObserver; nil when none
}

// Deleted reports whether Registry.Delete has taken this topic out: its log
// is closed or closing, and a topic of the same name, if any, is a new one.
func (q *TopicQueue) Deleted() bool { return q.deleted.Load() }

// Incarnation is the topic's incarnation id: a random id made when the
// topic was created (stored in its directory by the local backend, see
// storage.IncarnationFile), different after a deletion and re-creation.
// "" when the backend has none.
func (q *TopicQueue) Incarnation() string {
	if l, ok := q.log.(contract.Incarnationer); ok {
		return l.Incarnation()
	}
	return ""
}

// Name is the topic name.
func (q *TopicQueue) Name() string { return q.name }

// Log is the topic's log as its backend opened it (a *storage.Log for the
// local backend).
func (q *TopicQueue) Log() contract.Log { return q.log }

// Read returns the message JSON at offset (contract.ErrOutOfRange at or
// beyond the high watermark, *contract.CorruptionError on a bad entry).
func (q *TopicQueue) Read(offset int64) ([]byte, error) { return q.log.Read(offset) }

// ReadBatch returns up to max entries from offset from, below the high
// watermark (see storage.(*Log).ReadBatch).
func (q *TopicQueue) ReadBatch(from int64, max int) ([]storage.Entry, error) {
	return q.log.ReadBatch(from, max)
}

// HighWatermark is the next offset to become visible; every offset below it
// is durable.
func (q *TopicQueue) HighWatermark() int64 { return q.log.HighWatermark() }

// Notify returns a channel closed once HighWatermark() > offset or the topic
// is closed, and not before.
func (q *TopicQueue) Notify(offset int64) <-chan struct{} { return q.log.Notify(offset) }

// Checkpoint returns the durable checkpoint name of this topic, opening it
// on first use.
func (q *TopicQueue) Checkpoint(name string) (contract.Checkpoint, error) {
	return q.log.OpenCheckpoint(name)
}

// AcquireWork takes the lease of reader (a dispatcher) on this topic when
// the topic's backend is shared by several broker nodes (its log is a
// contract.WorkLeaser); see contract.WorkLeaser for the errors. It returns
// nil, nil when the backend needs no lease (the local one: one broker per
// data directory).
func (q *TopicQueue) AcquireWork(ctx context.Context, reader string) (contract.WorkLease, error) {
	wl, ok := q.log.(contract.WorkLeaser)
	if !ok {
		return nil, nil
	}
	return wl.AcquireWork(ctx, reader)
}

// StartOffset is the log start offset, the first offset still stored.
func (q *TopicQueue) StartOffset() int64 { return q.log.StartOffset() }

// OffsetAt is the first offset whose message timestamp is at or after t
// (HighWatermark when none is).
func (q *TopicQueue) OffsetAt(t time.Time) (int64, error) { return q.log.OffsetAt(t) }

// Commit durably stores next as the checkpoint of name (the original Java
// mmmq's commit(name, offset)): it returns after the fsync.
func (q *TopicQueue) Commit(name string, next int64) error {
	cp, err := q.log.OpenCheckpoint(name)
	if err != nil {
		return err
	}
	return cp.Commit(next)
}

// Stats summarises the topic for GET /topics.
func (q *TopicQueue) Stats() storage.Stats { return q.log.Stats() }

// Errors of the registry. Those that reach clients carry their error code
// (see contract.Classify).
var (
	// ErrInvalidName wraps every topic name validation failure (HTTP 400).
	ErrInvalidName = contract.NewError(contract.CodeBadRequest, "topicqueue: invalid topic name")
	// ErrTooManyTopics is returned when creating a topic beyond the
	// configured cap (mmmq.broker.storage.max-topics): HTTP 503 TOO_MANY_TOPICS.
	ErrTooManyTopics = contract.NewError(contract.CodeTooManyTopics, "topicqueue: topic limit reached")
	// ErrQuarantined is returned for a topic that recovery refused as corrupt
	// and that is excluded while the rest of the broker runs (HTTP 503).
	ErrQuarantined = errors.New("topicqueue: topic quarantined after corruption")
	// ErrClosed is returned once the registry is closed (shutting down).
	ErrClosed = errors.New("topicqueue: registry closed")
	// ErrNotFound is returned by Get-style lookups of unknown topics
	// (HTTP 404 NOT_FOUND).
	ErrNotFound = contract.NewError(contract.CodeNotFound, "topicqueue: topic not found")
	// ErrReopenUnsupported is returned by Reopen when the topic's backend
	// cannot reopen a log (it does not implement contract.Reopener).
	ErrReopenUnsupported = errors.New("topicqueue: the storage backend cannot reopen a topic")
)

// RemoveCheckpoint removes the checkpoint name of this topic when the log
// can (the local log: storage.(*Log).RemoveCheckpoint); with another
// backend it does nothing.
func (q *TopicQueue) RemoveCheckpoint(name string) error {
	if r, ok := q.log.(contract.CheckpointRemover); ok {
		return r.RemoveCheckpoint(name)
	}
	return nil
}
