package tracing

import (
	"net/url"
	"strings"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Exporters of mmmq.tracing.exporter.
const (
	// ExporterNone: tracing off (the default). No span is made, no
	// connection opened, and the publish and push paths run exactly as
	// without this module.
	ExporterNone = "none"
	// ExporterOTLPGRPC: OTLP over gRPC (default endpoint localhost:4317).
	ExporterOTLPGRPC = "otlp-grpc"
	// ExporterOTLPHTTP: OTLP over HTTP with protobuf bodies (default
	// endpoint localhost:4318, path /v1/traces).
	ExporterOTLPHTTP = "otlp-http"
)

// Config is the section mmmq.tracing (environment MMMQ_TRACING_*).
type Config struct {
	// Exporter is none (default), otlp-grpc or otlp-http.
	Exporter string `koanf:"exporter"`
	// Endpoint is where spans go: host:port, or a URL with its port
	// (http://collector:4318/v1/traces; a URL without a path gets
	// /v1/traces; one for otlp-grpc has no path). A URL's scheme decides
	// TLS: http:// is plain, https:// is TLS (insecure: true is then
	// refused). No user:password, query or fragment in it (the exporter
	// would not send them): use Headers. "" takes the
	// exporter's default (localhost:4317 for otlp-grpc, localhost:4318
	// for otlp-http) or the OTLP SDK's OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	// / OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string `koanf:"endpoint"`
	// Headers are sent with every export request (for example an
	// authorization header a hosted collector wants). Default none; YAML
	// only (a mapping has no environment variable). For a secret, leave it
	// empty and set the OTLP SDK's own OTEL_EXPORTER_OTLP_HEADERS
	// ("name=value,name2=value2"), which the exporter reads when this is
	// empty.
	Headers map[string]string `koanf:"headers"`
	// SamplingRatio is the share of traces a publish starts that are
	// sampled, 0..1 (default 1: all). It applies to publishes that arrive
	// without a traceparent; one that has a traceparent follows its
	// sampled flag (parent-based sampling), so a trace is whole or absent.
	SamplingRatio float64 `koanf:"sampling-ratio"`
	// ServiceName is the service.name resource attribute of every span
	// (default "mmmq"; the node name is service.instance.id).
	ServiceName string `koanf:"service-name"`
	// Insecure sends spans without TLS (plain gRPC, or http:// for an
	// endpoint given as host:port). Default false: TLS with the system's
	// roots. For an endpoint given as a URL the scheme decides, and true
	// with an https:// URL is an error.
	Insecure bool `koanf:"insecure"`
	// QueueSize bounds the spans waiting to be exported (default 8192; a span takes about 1–2 KiB while it waits);
	// past it a finished span is dropped and counted
	// (mmmq_tracing_spans_total{outcome="dropped"}), so a slow or absent
	// collector never holds up a publish or a push.
	QueueSize int `koanf:"queue-size"`
}

// Enabled reports whether c turns tracing on (an exporter other than none).
func (c Config) Enabled() bool { return c.Exporter != "" && c.Exporter != ExporterNone }

// DefaultConfig is the section's defaults: tracing off.
func DefaultConfig() Config {
	return Config{Exporter: ExporterNone, SamplingRatio: 1, ServiceName: "mmmq", QueueSize: 8192}
}

// ConfigSection registers Config under mmmq.tracing. Module includes it.
// Errors name the key: an exporter other than the three, a ratio outside
// 0..1, an empty service name, a queue size outside 1..1048576, an
// endpoint that is neither host:port nor an http(s) URL, a header name that
// is not an HTTP token.
var ConfigSection = config.NewSection("tracing", DefaultConfig(), func(c *Config) error { return c.check() })

func (c *Config) check() error {
	switch c.Exporter {
	case ExporterNone, ExporterOTLPGRPC, ExporterOTLPHTTP:
	default:
		return config.InvalidValue("mmmq.tracing.exporter", "%q is not one of none, otlp-grpc, otlp-http", c.Exporter)
	}
	if c.SamplingRatio < 0 || c.SamplingRatio > 1 || c.SamplingRatio != c.SamplingRatio {
		return config.InvalidValue("mmmq.tracing.sampling-ratio", "%v is not between 0 and 1", c.SamplingRatio)
	}
	if strings.TrimSpace(c.ServiceName) == "" {
		return config.InvalidValue("mmmq.tracing.service-name", "must not be empty")
	}
	if err := config.CheckIntRange("mmmq.tracing.queue-size", int64(c.QueueSize), 1, 1<<20); err != nil {
		return err
	}
	if c.Endpoint != "" {
		if strings.Contains(c.Endpoint, "://") {
			u, err := url.Parse(c.Endpoint)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
				return config.InvalidValue("mmmq.tracing.endpoint", "%q is not an http:// or https:// URL with a host", c.Endpoint)
			}
			if u.User != nil {
				return config.InvalidValue("mmmq.tracing.endpoint", "has a user or password in the URL, which the exporter would not send (and the log would show); put credentials in mmmq.tracing.headers")
			}
			if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(c.Endpoint, "#") {
				return config.InvalidValue("mmmq.tracing.endpoint", "has a query or fragment in the URL, which the exporter would not send (and the log would show); put credentials in mmmq.tracing.headers")
			}
			if c.Exporter == ExporterOTLPGRPC && u.Path != "" && u.Path != "/" {
				return config.InvalidValue("mmmq.tracing.endpoint", "has the path %q, which OTLP/gRPC has no use for; drop it, or use exporter otlp-http", u.Path)
			}
			if u.Port() == "" {
				return config.InvalidValue("mmmq.tracing.endpoint", "%q has no port; give it (4318 is OTLP/HTTP's, 4317 OTLP/gRPC's)", c.Endpoint)
			}
			if u.Scheme == "https" && c.Insecure {
				return config.InvalidValue("mmmq.tracing.insecure", "is true with an https:// endpoint; the URL's scheme decides TLS: use http:// for plain text, or drop insecure")
			}
		} else if err := config.CheckListenAddr("mmmq.tracing.endpoint", c.Endpoint); err != nil || strings.HasPrefix(c.Endpoint, ":") {
			return config.InvalidValue("mmmq.tracing.endpoint", "%q is neither host:port nor a URL", c.Endpoint)
		}
	}
	for name, v := range c.Headers {
		if !token(name) {
			return config.InvalidValue("mmmq.tracing.headers", "%q is not a valid HTTP header name", name)
		}
		if !contract.ValidHeaderValue(v) {
			return config.InvalidValue("mmmq.tracing.headers", "the value of %q has a control character (a newline?); every export would fail", name)
		}
	}
	return nil
}

// token reports whether s is an HTTP token (RFC 9110 field name).
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}
