package tracing

import (
	"context"
	"os"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
)

// ShutdownTimeout bounds the export of the spans still queued when the
// application stops.
const ShutdownTimeout = 5 * time.Second

// Module owns OpenTelemetry tracing:
//
//	registers ConfigSection (mmmq.tracing; config.ProvideSection)
//	provides  Config, *Tracer (nil, tracing off, unless
//	          mmmq.tracing.exporter is otlp-grpc or otlp-http)
//	needs     config.NodeConfig (service.instance.id; "" is the host name), *zap.Logger
//
// The modules that make spans (httpapi, dispatcher, groups, the line
// protocol) take *Tracer as an optional dependency: a binary without this
// module has tracing off. The tracer's stop hook is appended when it is
// built, before those modules' hooks, so it runs after they stopped and
// exports their last spans within ShutdownTimeout.
var Module = fx.Module("tracing",
	config.ProvideSection(ConfigSection),
	fx.Provide(newFx),
)

// Params is what the Fx module's Tracer takes from the graph.
type Params struct {
	fx.In

	Config    Config
	Node      config.NodeConfig `optional:"true"`
	Log       *zap.Logger
	Lifecycle fx.Lifecycle
}

func newFx(p Params) (*Tracer, error) {
	log := p.Log.Named("tracing")
	node := p.Node.Name
	if node == "" {
		node, _ = os.Hostname() // as mmmq.node-name "" means elsewhere
	}
	t, err := New(p.Config, node, log)
	if err != nil || t == nil {
		return nil, err
	}
	endpoint := p.Config.Endpoint
	if endpoint == "" {
		endpoint = "(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_ENDPOINT, else localhost:4317 gRPC / localhost:4318 HTTP)"
	}
	log.Info("tracing on", zap.String("exporter", p.Config.Exporter), zap.String("endpoint", endpoint), zap.String("service-instance-id", node),
		zap.Float64("sampling-ratio", p.Config.SamplingRatio), zap.Int("queue-size", p.Config.QueueSize))
	p.Lifecycle.Append(fx.StopHook(func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, ShutdownTimeout)
		defer cancel()
		err := t.Shutdown(ctx)
		st := t.Stats()
		log.Info("tracing stopped", zap.Uint64("exported", st.Exported), zap.Uint64("dropped", st.Dropped), zap.Uint64("failed", st.Failed))
		if err != nil {
			log.Warn("span export at shutdown", zap.Error(err))
		}
		return nil
	}))
	return t, nil
}
