package topicqueue

import (
	"fmt"

	"go.uber.org/zap"
)

// TopicWatcher is an optional interface of a Backend shared by several
// broker nodes: topics created through another node appear on this one, so
// that its dispatchers deliver them too (they subscribe to the registry's
// topics), and topics deleted through another node are forgotten here, so
// that a later publish creates them anew. The local backend has no other
// node and does not implement it.
type TopicWatcher interface {
	// WatchTopics calls fn with an event for every topic that exists when
	// it starts, for every topic created later and for every topic deleted
	// later, by any node, until stop is called; after stop returns fn is
	// not called any more. fn may be called more than once for the same
	// change, for topics already open and for deletions of topics this node
	// does not have. A topic deleted and created again between two looks
	// is reported deleted, then created. It calls fn from one goroutine of
	// its own, one event at a time, and fn may block (it opens or closes the
	// topic). Errors: the store's, when the watch cannot start.
	WatchTopics(fn func(TopicEvent)) (stop func(), err error)
}

// TopicEvent is one change a TopicWatcher reports.
type TopicEvent struct {
	// Name is the topic's name.
	Name string
	// Deleted: the topic was deleted (through another node, or through
	// this one and seen again by the watch); else it exists.
	Deleted bool
	// Incarnation, when not "", is the incarnation id of the topic the
	// event is about (TopicQueue.Incarnation): a deletion of another
	// incarnation than the one open here is stale and ignored.
	Incarnation string
}

// watch follows the topics other nodes create and delete when the backend
// is a TopicWatcher (OpenAll starts it, once the stored topics are open):
// each new one is opened and announced to the subscribers, as a topic
// created here is; each deleted one is forgotten as Delete forgets a topic
// (forgetDeleted), its stored data left to the node that deleted it. Close
// stops it. A topic that cannot be opened is logged and skipped; it is
// opened by the next publish or restart.
func (r *Registry) watch(log *zap.Logger) error {
	w, ok := r.opts.Backend.(TopicWatcher)
	if !ok {
		return nil
	}
	stop, err := w.WatchTopics(func(ev TopicEvent) {
		if ev.Deleted {
			if r.forgetDeleted(ev.Name, ev.Incarnation) {
				log.Info("topic deleted through another node", zap.String("topic", ev.Name))
			}
			return
		}
		if _, ok := r.Get(ev.Name); ok {
			return
		}
		if _, err := r.Open(ev.Name); err != nil {
			log.Warn("could not open a topic created through another node", zap.String("topic", ev.Name), zap.Error(err))
			return
		}
		log.Info("topic created through another node", zap.String("topic", ev.Name))
	})
	if err != nil {
		return fmt.Errorf("recovery: watch for topics created or deleted by other nodes: %w", err)
	}
	r.mu.Lock()
	r.stopWatch = stop
	r.mu.Unlock()
	return nil
}

// HealthChecker is an optional interface of a Backend that can lose its
// store while the broker runs (a cluster behind a network): Healthy
// returns nil while the store answers, else why not. /readyz reports the
// broker not ready while it fails, so that a load balancer sends clients to
// another node. The local backend does not implement it.
type HealthChecker interface {
	Healthy() error
}
