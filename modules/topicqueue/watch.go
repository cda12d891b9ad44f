package topicqueue

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// watch follows the topics other nodes create and delete when the backend
// is a contract.TopicWatcher (OpenAll starts it, once the stored topics are open):
// each new one is opened and announced to the subscribers, as a topic
// created here is; each deleted one is forgotten as Delete forgets a topic
// (forgetDeleted), its stored data left to the node that deleted it. Close
// stops it. A topic that cannot be opened is logged and skipped; it is
// opened by the next publish or restart.
func (r *Registry) watch(log *zap.Logger) error {
	w, ok := r.opts.Backend.(contract.TopicWatcher)
	if !ok {
		return nil
	}
	stop, err := w.WatchTopics(func(ev contract.TopicEvent) {
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
