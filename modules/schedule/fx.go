package schedule

import (
	"context"
	"errors"
	"fmt"
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
	// Dedup is mmmq.broker.dedup (topicqueue.DedupSection): its window
	// and max-ids deduplicate the producer ids of scheduled publishes
	// (Idempotent). Absent: no deduplication.
	Dedup topicqueue.DedupConfig `optional:"true"`
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

// AppendBatch implements BatchTarget: one publish of every message, at
// ack level DURABLE.
func (t registryTarget) AppendBatch(ctx context.Context, topic string, stored [][]byte) error {
	msgs := make([]topicqueue.Message, len(stored))
	for i, m := range stored {
		msgs[i].Stored = m
	}
	_, err := t.reg.PublishMessages(ctx, topic, msgs, contract.Durable, make([]topicqueue.Published, len(msgs)))
	return err
}

// HighWatermark implements Ledger: 0 for a topic that does not exist.
func (t registryTarget) HighWatermark(topic string) (int64, error) {
	q, ok := t.reg.Get(topic)
	if !ok {
		return 0, nil
	}
	return q.HighWatermark(), nil
}

// Find implements Ledger: it reads topic from offset from (or its first
// offset, when retention deleted what was below) to its high watermark,
// 256 messages at a time, and returns the ids found.
func (t registryTarget) Find(_ context.Context, topic string, from int64, ids map[string]bool) (map[string]bool, error) {
	found := map[string]bool{}
	q, ok := t.reg.Get(topic)
	if !ok {
		return found, nil
	}
	off, hw := max(from, q.StartOffset()), q.HighWatermark()
	for off < hw && len(found) < len(ids) {
		es, err := q.ReadBatch(off, 256)
		if err != nil {
			return nil, fmt.Errorf("read topic %s at %d: %w", topic, off, err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			if id := scheduleIDOf(e.Payload); ids[id] {
				found[id] = true
			}
			off = e.Offset + 1
		}
	}
	return found, nil
}

// DeleteTopic implements TopicDeleter: nil when the topic does not exist.
func (t registryTarget) DeleteTopic(topic string) error {
	if err := t.reg.Delete(topic); err != nil && !errors.Is(err, topicqueue.ErrUnknownTopic) {
		return err
	}
	return nil
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
		MemoryBudget:       p.Schedule.MemoryBudget,
		Logger:             p.Logger.Named("schedule"),
	}
	if lb, local := p.Registry.Backend().(*topicqueue.LocalBackend); !local {
		opts.Unsupported = "the storage backend is not local (mmmq.broker.storage.backend); scheduled messages are kept on the local disk only"
	} else if g := lb.SpaceGuard(); g != nil {
		opts.Admit = g.Admit
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
// HTTP API and the line protocol publish scheduled messages through (an
// *Idempotent over it: producer ids deduplicated within
// mmmq.broker.dedup.window), and the route
// DELETE /topics/{topic}/scheduled/{scheduleId} (value group contract.RouteTag).
// It needs *topicqueue.Registry and *zap.Logger.
var Module = fx.Module("schedule",
	config.ProvideSection(ConfigSection),
	fx.Provide(NewFromConfig),
	fx.Provide(func(s *Scheduler, p Params) contract.Scheduler {
		return NewIdempotent(s, p.Dedup.Window, p.Dedup.MaxIDs)
	}),
	contract.ProvideRoute(NewRoute),
	fx.Invoke(lifecycle),
)
