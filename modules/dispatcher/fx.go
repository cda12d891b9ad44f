package dispatcher

import (
	"context"
	"errors"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Module wires the configuration section mmmq.broker.dispatch, the
// dispatcher set, the default HTTP sender and the Manager:
//
//	registers ConfigSection (config.ProvideSection)
//	provides Config (mmmq.broker.dispatch), Options (OptionsFromSections;
//	         change them with fx.Decorate),
//	         *Set (from the `group:"dispatchers"` value group, see Provide),
//	         Sender (an *HTTPSender; replace it with fx.Decorate or fx.Replace),
//	         *Manager, *Self (the broker's own addresses; admin checks
//	         API-created hosts with it)
//	checks   that no dispatcher of the file or Go code pushes to the
//	         broker itself (Self; a startup error naming the key)
//	needs    *config.Config, config.NodeConfig, config.ServerConfig and
//	         *contract.Instance (config.Module),
//	         *topicqueue.Registry (adapted to Source by RegistrySource) or a
//	         Source supplied instead (tests), *zap.Logger
//
// The Manager starts on app start and stops on app stop; list this module
// after the one owning the topics, so its workers stop before the topics
// close.
var Module = fx.Module("dispatcher",
	config.ProvideSection(ConfigSection),
	fx.Provide(OptionsFromSections),
	fx.Provide(NewSet),
	fx.Provide(fx.Annotate(newHTTPSenderFx, fx.As(new(Sender)))),
	fx.Provide(newManagerFx),
	fx.Provide(newSelfFx),
	fx.Invoke(checkOwnHosts),
	fx.Invoke(registerLifecycle),
)

// SenderParams is what the Fx module's HTTPSender takes from the graph.
type SenderParams struct {
	fx.In

	// Options tunes the sender (Module provides them from mmmq.broker.dispatch).
	Options Options
}

func newHTTPSenderFx(p SenderParams) *HTTPSender { return NewHTTPSender(p.Options) }

// ManagerParams is what the Fx module's Manager takes from the graph.
type ManagerParams struct {
	fx.In

	// Set is provided by this module (NewSet).
	Set *Set
	// Source yields the topics; absent means RegistrySource(Registry).
	Source Source `optional:"true"`
	// Registry is the topic registry (modules/topicqueue).
	Registry *topicqueue.Registry `optional:"true"`
	// Sender is provided by this module (*HTTPSender) unless replaced.
	Sender Sender
	// Options tunes the manager (Module provides them from mmmq.broker.dispatch).
	Options Options
	// Log is the application's logger (not provided here).
	Log *zap.Logger
	// Tracer is the tracing module's (modules/tracing): a span per push
	// attempt. Nil or absent: tracing off.
	Tracer *tracing.Tracer `optional:"true"`
}

func newManagerFx(p ManagerParams) (*Manager, error) {
	src := p.Source
	if src == nil {
		if p.Registry == nil {
			return nil, errors.New("dispatcher: neither a Source nor a *topicqueue.Registry in the application (add topicqueue.Module)")
		}
		src = RegistrySource(p.Registry)
	}
	m := NewManager(p.Set, src, p.Sender, p.Options, p.Log.Named("dispatcher"))
	if p.Registry != nil {
		m.SetPublisher(RegistryPublisher(p.Registry))
	}
	m.SetTracer(p.Tracer)
	return m, nil
}

// registryPublisher adapts the topic registry to Publisher.
type registryPublisher struct{ r *topicqueue.Registry }

func (p registryPublisher) PublishDurable(ctx context.Context, topic string, stored [][]byte) (int64, error) {
	_, first, err := p.r.Publish(ctx, topic, stored, contract.Durable)
	return first, err
}

// RegistryPublisher is the topic registry as a Publisher: a durable
// publish, creating the topic when it does not exist (dead-letter topics
// are ordinary topics).
func RegistryPublisher(r *topicqueue.Registry) Publisher { return registryPublisher{r} }

// registrySource adapts the topic registry to Source.
type registrySource struct{ r *topicqueue.Registry }

func (s registrySource) Subscribe(fn func(Topic)) (cancel func()) {
	return s.r.Subscribe(func(q *topicqueue.TopicQueue) { fn(q) })
}

func (s registrySource) Topics() []Topic {
	qs := s.r.List()
	out := make([]Topic, len(qs))
	for i, q := range qs {
		out[i] = q
	}
	return out
}

func (s registrySource) SubscribeDeletes(fn func(Topic)) (cancel func()) {
	return s.r.SubscribeDeletes(func(q *topicqueue.TopicQueue) { fn(q) })
}

// RegistrySource is the topic registry as a DeletionSource: every open
// topic, then every topic created later; a topic being deleted
// (topicqueue.Registry.Delete) has its workers stopped first.
func RegistrySource(r *topicqueue.Registry) Source { return registrySource{r} }

func registerLifecycle(lc fx.Lifecycle, m *Manager, s Sender) {
	if c, ok := s.(interface{ CloseIdleConnections() }); ok {
		// Appended first so that it runs last on stop, after the workers
		// have ended and returned their connections to the pool.
		lc.Append(fx.StopHook(c.CloseIdleConnections))
	}
	lc.Append(fx.StartStopHook(m.Start, m.Stop))
}
