package schedule

import (
	"context"
	"path/filepath"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Params are the scheduler's dependencies in the Fx graph.
type Params struct {
	fx.In
	// Schedule is mmmq.broker.schedule (ConfigSection, registered by Module).
	Schedule Config
	Logger   *zap.Logger
	Registry *topicqueue.Registry
}

// RegistryTarget appends due messages to the registry's topics, creating
// a topic when needed, at ack level DURABLE. The message goes in without
// its producer id, so the idempotent-publish window does not drop it.
func RegistryTarget(reg *topicqueue.Registry) Target { return registryTarget{reg} }

type registryTarget struct{ reg *topicqueue.Registry }

func (t registryTarget) Append(ctx context.Context, topic string, stored []byte) error {
	var out [1]topicqueue.Published
	_, err := t.reg.PublishMessages(ctx, topic, []topicqueue.Message{{Stored: stored}}, contract.Durable, out[:])
	return err
}

// NewFromConfig builds the scheduler over <data root>/.scheduled of the
// registry's filesystem. With a storage backend other than the local one
// (mmmq.broker.storage.backend: jetstream) every scheduled publish is 501
// NOT_IMPLEMENTED and nothing is written.
func NewFromConfig(p Params) *Scheduler {
	opts := Options{
		FS:                 p.Registry.FS(),
		Dir:                filepath.Join(p.Registry.Root(), Dir),
		MaxDelay:           p.Schedule.MaxDelay,
		MaxPendingPerTopic: p.Schedule.MaxPendingPerTopic,
		BucketWidth:        p.Schedule.BucketWidth,
		MoveBatch:          p.Schedule.MoveBatch,
		Logger:             p.Logger.Named("schedule"),
	}
	if _, local := p.Registry.Backend().(*topicqueue.LocalBackend); !local {
		opts.Unsupported = "the storage backend is not local (mmmq.broker.storage.backend); scheduled messages are kept on the local disk only"
	}
	return New(opts, RegistryTarget(p.Registry))
}

// lifecycle starts the scheduler (recovery of the bucket files, then the
// mover) after the registry and recovery, and stops the mover before the
// logs close. With a backend other than local it does neither.
func lifecycle(lc fx.Lifecycle, s *Scheduler) {
	if s.opts.Unsupported != "" {
		return
	}
	lc.Append(fx.StartStopHook(s.Start, s.Stop))
}

// Module provides the *Scheduler and, as contract.Scheduler, the seam the
// HTTP API publishes scheduled messages through, and the route
// DELETE /topics/{topic}/scheduled/{scheduleId} (value group contract.RouteTag).
// It needs *topicqueue.Registry and *zap.Logger.
var Module = fx.Module("schedule",
	config.ProvideSection(ConfigSection),
	fx.Provide(NewFromConfig),
	fx.Provide(func(s *Scheduler) contract.Scheduler { return s }),
	contract.ProvideRoute(NewRoute),
	fx.Invoke(lifecycle),
)
