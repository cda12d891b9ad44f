package jetstream

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/retention"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// FactoryParams are the backend factory's dependencies in the Fx graph.
type FactoryParams struct {
	fx.In
	// Config is mmmq.jetstream (ConfigSection, provided by Module).
	Config Config
	// Segment is mmmq.broker.segment (topicqueue.SegmentSection): max-record-bytes.
	Segment topicqueue.SegmentConfig
	// Retention is mmmq.broker.retention (retention.ConfigSection): each
	// topic's policy (max-age, max-bytes, the first matching override of
	// topics) becomes its stream's MaxAge and MaxBytes, which JetStream
	// enforces continuously (check-interval and group-idle do not apply;
	// keep-unconsumed is refused by config validation). Zero, keep
	// everything, in an application without retention.Module.
	Retention retention.Config `optional:"true"`
	// Node is mmmq.node-name (config.Module): it names this broker in the
	// leases it holds.
	Node config.NodeConfig
	// Dedup is mmmq.broker.dedup (topicqueue.Module): its window is the
	// streams' duplicate window across brokers.
	Dedup topicqueue.DedupConfig
	// Budget is the in-flight memory budget (topicqueue.Module): ACCEPTED
	// appends hold their bytes until acknowledged.
	Budget    *contract.Budget `optional:"true"`
	Logger    *zap.Logger
	Lifecycle fx.Lifecycle
}

// NewFactory is the topicqueue.BackendFactory named "jetstream"
// (topicqueue.BackendJetStream). Its New connects (Connect) when
// mmmq.broker.storage.backend selects it, while the registry is built, and
// appends a stop hook that closes the connection; that hook is appended
// before the registry's own, so on stop it runs after the registry closed
// every log. Each topic's retention policy (mmmq.broker.retention, matched
// as package retention does) is set on its stream when the stream is
// created or opened (see Backend.Open); all brokers sharing the streams
// must share that configuration, or the last to open a topic sets its
// limits. Errors: an invalid mmmq.broker.retention.topics pattern (naming
// the key), or Connect's.
func NewFactory(p FactoryParams) topicqueue.BackendFactory {
	return topicqueue.BackendFactory{
		Name: topicqueue.BackendJetStream,
		New: func() (topicqueue.Backend, error) {
			log := p.Logger.Named("jetstream")
			ro, err := retention.OptionsFromConfig(p.Retention)
			if err != nil {
				return nil, err
			}
			b, err := Connect(p.Config, int(p.Segment.MaxRecordBytes), p.Budget, log)
			if err != nil {
				return nil, err
			}
			b.opts.Holder = holderName(p.Node.Name)
			b.opts.DedupWindow = p.Dedup.Window
			b.opts.Retention = ro.PolicyFor
			if r := p.Retention; r.MaxAge > 0 || r.MaxBytes > 0 || len(r.Topics) > 0 {
				log.Info("retention applied as the streams' MaxAge and MaxBytes", append([]zap.Field{
					zap.Duration("max-age", r.MaxAge), zap.Int64("max-bytes", r.MaxBytes), zap.Int("overrides", len(r.Topics))},
					ro.ReservedRules()...)...)
			}
			p.Lifecycle.Append(fx.StopHook(b.Close))
			return b, nil
		},
	}
}

// Module registers ConfigSection (and provides Config) and adds the
// JetStream backend to the storage backends (topicqueue.BackendFactoryTag):
// with mmmq.broker.storage.backend "jetstream" the registry stores every
// topic in a JetStream stream; with "local" nothing changes and no
// connection is made. It is part of app.Modules, named app.JetStream.
var Module = fx.Module("jetstream",
	config.ProvideSection(ConfigSection),
	fx.Provide(fx.Annotate(NewFactory, fx.ResultTags(topicqueue.BackendFactoryTag))),
)
