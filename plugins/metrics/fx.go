package metrics

import (
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/retention"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Config is the plugin's configuration section, key "mmmq.metrics"
// (environment: MMMQ_METRICS_ENABLED).
type Config struct {
	// Enabled serves /metrics and records metrics. Default true.
	Enabled bool `koanf:"enabled"`
}

// ConfigSection registers Config under mmmq.metrics. Module includes it
// (config.ProvideSection), where app.Sections finds it. A value that is not
// a boolean is an error naming mmmq.metrics.enabled.
var ConfigSection = config.NewSection("metrics", Config{Enabled: true}, nil)

// Result is what the plugin contributes: the storage observer, the topic
// registry's publish observer and, when mmmq.metrics.enabled is true, the
// /metrics route.
type Result struct {
	fx.Out
	Metrics  *Metrics
	Observer storage.Observer
	Publish  topicqueue.PublishObserver
	Route    contract.Route `group:"routes"`
}

func provide(c Config) Result {
	m := New()
	r := Result{Metrics: m, Observer: m, Publish: m}
	if c.Enabled {
		r.Route = m
	}
	return r
}

type watchParams struct {
	fx.In

	Metrics    *Metrics
	Registry   *topicqueue.Registry
	Dispatcher *dispatcher.Manager
	Budget     *contract.Budget    `optional:"true"`
	Backend    topicqueue.Backend  `optional:"true"`
	SpaceGuard *storage.SpaceGuard `optional:"true"`
	Groups     *groups.Coordinator `optional:"true"`
	Retainer   *retention.Retainer `optional:"true"`
	Dedup      *dedup.Tracker      `optional:"true"`
	Schedule   *schedule.Scheduler `optional:"true"`
	Tracer     *tracing.Tracer     `optional:"true"`
}

func watch(p watchParams) {
	p.Metrics.WatchTopics(p.Registry)
	p.Metrics.WatchDispatchers(p.Dispatcher, p.Registry)
	p.Metrics.WatchBudget(p.Budget)
	p.Metrics.WatchSpaceGuard(p.SpaceGuard)
	if b, ok := p.Backend.(topicqueue.SegmentCacher); ok {
		p.Metrics.WatchSegmentCache(b.SegmentCache())
	}
	if b, ok := p.Backend.(topicqueue.PreallocBudgeter); ok {
		p.Metrics.WatchPrealloc(b.PreallocBudget())
	}
	rs := RetentionSource{DispatchSkipped: p.Dispatcher.RetentionSkipped}
	if p.Groups != nil {
		rs.GroupSkipped = p.Groups.RetentionSkipped
	}
	if r := p.Retainer; r != nil {
		rs.Totals = func() (int, int64, int64) { t := r.Totals(); return t.Segments, t.Entries, t.Bytes }
		rs.CheckpointErrors = r.CheckpointErrors
		rs.Holds = r.Holds
	}
	p.Metrics.WatchRetention(rs)
	var groupsExpired func() uint64
	if p.Groups != nil {
		groupsExpired = p.Groups.MessagesExpired
	}
	p.Metrics.WatchExpired(p.Dispatcher.MessagesExpired, groupsExpired)
	p.Metrics.WatchTrace(contract.TraceDropped)
	p.Metrics.WatchTracing(p.Tracer)
	p.Metrics.WatchDedup(p.Dedup)
	p.Metrics.WatchGroups(p.Groups, p.Registry)
	if p.Schedule != nil {
		p.Metrics.WatchSchedule(p.Schedule.Stats)
	}
}

// Module registers ConfigSection (and provides Config), provides *Metrics,
// the storage.Observer, the topicqueue.PublishObserver and the /metrics
// route.
var Module = fx.Module("metrics",
	config.ProvideSection(ConfigSection),
	fx.Provide(provide),
	fx.Invoke(watch),
)
