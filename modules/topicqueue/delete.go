package topicqueue

import (
	"errors"
	"fmt"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// Delete removes the stored topic name (the files under root/name) so that
// a crash at any point leaves the whole topic or nothing
// (storage.DeleteTopicDir), after its log is closed.
func (b *LocalBackend) Delete(name string) (stored bool, err error) {
	aside, err := storage.DeleteTopicDir(b.fs(), b.Root, name, b.Storage.Hooks)
	if err != nil && aside == "" {
		return true, err // not renamed: the topic is whole
	}
	return false, err
}

// FinishDeletions removes the directories of Root that an interrupted
// deletion renamed aside (storage.FinishDeletions).
func (b *LocalBackend) FinishDeletions() ([]string, error) {
	return storage.FinishDeletions(b.fs(), b.Root)
}

// Errors of Delete.
var (
	// ErrTopicBusy: the topic is being created (or deleted) right now;
	// retry. HTTP 409 TOPIC_BUSY.
	ErrTopicBusy = contract.NewError(contract.CodeTopicBusy, "topicqueue: topic busy")
	// ErrUnknownTopic: no such topic. HTTP 404 NOT_FOUND.
	ErrUnknownTopic = contract.NewError(contract.CodeNotFound, "topicqueue: unknown topic")
	// ErrDeleteUnsupported: the storage backend cannot delete topics.
	ErrDeleteUnsupported = errors.New("topicqueue: the storage backend does not support topic deletion")
)

// SubscribeDeletes calls fn for every open topic being deleted, after the
// topic is gone from Get and List and before its log closes, until cancel
// is called. fn must return only once it no longer uses the topic (its
// readers have stopped, its checkpoints are no longer committed); Delete
// waits for it. It runs on the deleting goroutine.
func (r *Registry) SubscribeDeletes(fn func(*TopicQueue)) (cancel func()) {
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.delSubs[id] = fn
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.delSubs, id)
		r.mu.Unlock()
	}
}

// Delete deletes topic name: it takes the topic out of the registry (Get
// and List stop returning it; a publish that arrives now waits and then
// creates the topic anew, from offset 0 with a new incarnation id), tells
// the SubscribeDeletes subscribers (dispatch workers and consumer-group
// sessions of the topic stop), closes the log (appends already queued are
// finished and deleted with it; later ones on the old log fail with
// contract.ErrClosed, see Publish), then removes its files through the
// backend, checkpoints included, so that a crash leaves the whole topic or
// nothing. A quarantined topic can be deleted too.
//
// Errors: ErrInvalidName, ErrUnknownTopic, ErrTopicBusy (being created or
// deleted), ErrClosed, ErrDeleteUnsupported, or the backend's I/O error
// (the topic is then quarantined when its files may still be stored, so
// that the DELETE can be retried, and absent otherwise).
func (r *Registry) Delete(name string) error {
	if err := contract.ValidateTopic(name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	del, ok := r.opts.Backend.(contract.TopicDeleter)
	if !ok {
		return ErrDeleteUnsupported
	}
	r.mu.Lock()
	q, open := r.topics[name]
	_, quarantined := r.quarantined[name]
	_, creating := r.opening[name]
	_, deleting := r.deleting[name]
	switch {
	case r.closed:
		r.mu.Unlock()
		return ErrClosed
	case creating || deleting:
		r.mu.Unlock()
		return fmt.Errorf("%w: topic %s is being created or deleted; retry", ErrTopicBusy, name)
	case !open && !quarantined:
		r.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrUnknownTopic, name)
	}
	d, subs := r.beginDelete(name)
	r.mu.Unlock()
	defer r.endDelete(name, d)

	if open {
		r.forget(q, subs)
	}
	stored, err := del.Delete(name)
	r.mu.Lock()
	switch {
	case err == nil || !stored:
		delete(r.quarantined, name)
	default:
		r.quarantined[name] = fmt.Errorf("deletion failed, retry it: %w", err)
	}
	r.mu.Unlock()
	if err != nil {
		r.log.Error("topic deletion failed", zap.String("topic", name), zap.Bool("still-stored", stored), zap.Error(err))
		if !stored {
			// Gone for good; what is left is removed at the next start.
			return nil
		}
		return fmt.Errorf("delete topic %s: %w", name, err)
	}
	r.log.Info("topic deleted", zap.String("topic", name))
	return nil
}

// beginDelete marks topic name as being deleted (creators wait for
// endDelete) and takes it out of Get and List; it returns the mark and the
// SubscribeDeletes subscribers to tell. r.mu must be held.
func (r *Registry) beginDelete(name string) (*opening, []func(*TopicQueue)) {
	d := &opening{done: make(chan struct{})}
	r.deleting[name] = d
	delete(r.topics, name)
	return d, sortedSubs(r.delSubs)
}

// endDelete ends the deletion beginDelete marked: waiting creators go on.
func (r *Registry) endDelete(name string, d *opening) {
	r.mu.Lock()
	delete(r.deleting, name)
	r.mu.Unlock()
	close(d.done)
}

// forget is the in-memory part of a deletion, shared by Delete and
// forgetDeleted: q, already taken out of the registry (beginDelete), is
// marked deleted, subs (the SubscribeDeletes subscribers) are told, and its
// dedup window and log are closed. Nothing stored is removed.
func (r *Registry) forget(q *TopicQueue, subs []func(*TopicQueue)) {
	q.deleted.Store(true)
	for _, fn := range subs {
		fn(q)
	}
	q.dd.Close() // a topic created anew starts with an empty window
	if err := q.log.Close(); err != nil {
		// A failed log closes with its failure: it is deleted all the same.
		r.log.Warn("closing the log of a topic being deleted", zap.String("topic", q.name), zap.Error(err))
	}
}

// forgetDeleted forgets topic name, deleted through another node (a
// contract.TopicWatcher's event), as Delete does but without removing anything
// stored: that node did. A quarantined topic leaves quarantine. It does
// nothing and returns false when name is neither open nor quarantined, when
// the registry is closed, when incarnation is not "" and differs from the
// open topic's (the event is about an older incarnation), or while name is
// being created or deleted here (what is being created may be the topic
// made anew after the deletion; a watch reports a deletion it missed so
// again later). A later publish creates the topic anew.
func (r *Registry) forgetDeleted(name, incarnation string) bool {
	r.mu.Lock()
	q, open := r.topics[name]
	_, quarantined := r.quarantined[name]
	_, creating := r.opening[name]
	_, deleting := r.deleting[name]
	stale := open && incarnation != "" && q.Incarnation() != "" && q.Incarnation() != incarnation
	if r.closed || stale || creating || deleting || (!open && !quarantined) {
		r.mu.Unlock()
		return false
	}
	delete(r.quarantined, name)
	if !open {
		r.mu.Unlock()
		return true
	}
	d, subs := r.beginDelete(name)
	r.mu.Unlock()
	defer r.endDelete(name, d)
	r.forget(q, subs)
	return true
}
