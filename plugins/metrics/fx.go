package metrics

import (
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Result is what the plugin contributes: the storage observer and, when
// mmmq.metrics.enabled is true, the /metrics route.
type Result struct {
	fx.Out
	Metrics  *Metrics
	Observer storage.Observer
	Route    contract.Route `group:"routes"`
}

func provide(cfg *config.Config) Result {
	m := New()
	r := Result{Metrics: m, Observer: m}
	if cfg.MMMQ.Metrics.Enabled {
		r.Route = m
	}
	return r
}

func watch(m *Metrics, reg *topicqueue.Registry, mgr *dispatcher.Manager) {
	m.WatchTopics(reg)
	m.WatchDispatchers(mgr, reg)
}

// Module provides *Metrics, the storage.Observer and the /metrics route.
var Module = fx.Module("metrics",
	fx.Provide(provide),
	fx.Invoke(watch),
)
