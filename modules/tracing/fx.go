package tracing

import (
	"context"
	"net/url"
	"os"
	"strings"
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
	endpoint, from := effectiveEndpoint(p.Config, os.Getenv)
	log.Info("tracing on", zap.String("exporter", p.Config.Exporter), zap.String("endpoint", endpoint), zap.String("endpoint-from", from),
		zap.String("service-instance-id", node),
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

// effectiveEndpoint is the endpoint the exporter of c sends to and where
// that came from, for the startup log: mmmq.tracing.endpoint when set,
// else the OTLP SDK's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then
// OTEL_EXPORTER_OTLP_ENDPOINT (to which the HTTP exporter adds
// /v1/traces), else the exporter's default. A URL from the environment is
// shown without its password or query (where credentials may sit).
func effectiveEndpoint(c Config, getenv func(string) string) (endpoint, from string) {
	if c.Endpoint != "" {
		return c.Endpoint, "mmmq.tracing.endpoint"
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if err != nil {
			return "(not a URL)", name
		}
		if u.RawQuery != "" {
			u.RawQuery = "redacted"
		}
		if name == "OTEL_EXPORTER_OTLP_ENDPOINT" && c.Exporter == ExporterOTLPHTTP {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
		}
		return u.Redacted(), name
	}
	if c.Exporter == ExporterOTLPGRPC {
		return "localhost:4317", "the otlp-grpc default"
	}
	return "http://localhost:4318/v1/traces", "the otlp-http default"
}
