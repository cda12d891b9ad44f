package topicqueue

import (
	"fmt"

	"go.uber.org/zap"
)

// TopicWatcher is an optional interface of a Backend shared by several
// broker nodes: topics created through another node appear on this one, so
// that its dispatchers deliver them too (they subscribe to the registry's
// topics). The local backend has no other node and does not implement it.
type TopicWatcher interface {
	// WatchTopics calls fn with the name of every topic that exists when
	// it starts and of every topic created later, by any node, until stop
	// is called; after stop returns fn is not called any more. fn may be
	// called more than once for a name, and for topics already open. It
	// calls fn from one goroutine of its own, one name at a time, and fn
	// may block (it opens the topic). Errors: the store's, when the watch
	// cannot start.
	WatchTopics(fn func(name string)) (stop func(), err error)
}

// watch starts following the topics other nodes create when the backend
// is a TopicWatcher (OpenAll does, once the stored topics are open): each
// new one is opened and announced to the subscribers, as a topic created
// here is. Close stops it. A topic that cannot be opened is logged and
// skipped; it is opened by the next publish or restart.
func (r *Registry) watch(log *zap.Logger) error {
	w, ok := r.opts.Backend.(TopicWatcher)
	if !ok {
		return nil
	}
	stop, err := w.WatchTopics(func(name string) {
		if _, ok := r.Get(name); ok {
			return
		}
		if _, err := r.Open(name); err != nil {
			log.Warn("could not open a topic created through another node", zap.String("topic", name), zap.Error(err))
			return
		}
		log.Info("topic created through another node", zap.String("topic", name))
	})
	if err != nil {
		return fmt.Errorf("recovery: watch for topics created by other nodes: %w", err)
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
