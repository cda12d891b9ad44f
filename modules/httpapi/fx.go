package httpapi

import (
	"fmt"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Params are the server's dependencies in the Fx graph. Routes come from
// plugins through the value group contract.RouteTag.
type Params struct {
	fx.In
	// Server is the "server" section (config.Module).
	Server config.ServerConfig
	// Segment is mmmq.broker.segment, for max-record-bytes (topicqueue.SegmentSection).
	Segment  topicqueue.SegmentConfig
	Logger   *zap.Logger
	Registry *topicqueue.Registry
	Ready    *recovery.Readiness
	// Budget is the in-flight memory budget (topicqueue.Module) read-back
	// pages draw from.
	Budget *contract.Budget
	Routes []contract.Route `group:"routes"`
	// Authenticator and Limiter come from the auth module; without it
	// (app.Without(app.Auth)) there is no authentication.
	Authenticator contract.Authenticator `optional:"true"`
	Limiter       contract.Limiter       `optional:"true"`
	// Instance is this broker (config.Module): publishes carrying its
	// instance id are refused (508 LOOP).
	Instance *contract.Instance `optional:"true"`
	// Holds is retention's (modules/retention): which reader holds a
	// topic's retention back; without it GET /topics never says.
	Holds contract.RetentionHolds `optional:"true"`
	// Scheduler is the schedule module's (modules/schedule); without it a
	// publish with "deliverAt" or "delay" is 501 NOT_IMPLEMENTED.
	Scheduler contract.Scheduler `optional:"true"`
	// Tracer is the tracing module's (modules/tracing); nil or absent:
	// tracing off.
	Tracer *tracing.Tracer `optional:"true"`
}

// OptionsFromConfig maps the "server" section and
// mmmq.broker.segment.max-record-bytes to Options: Addr is "host:port",
// durations and sizes are copied (bytes).
func OptionsFromConfig(c config.ServerConfig, seg topicqueue.SegmentConfig) Options {
	return Options{
		Addr:              fmt.Sprintf("%s:%d", c.Host, c.Port),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxBodyBytes:      c.MaxBodyBytes,
		MaxConns:          c.MaxConnections,
		ShutdownTimeout:   c.ShutdownTimeout,
		MaxRecordBytes:    int(seg.MaxRecordBytes),
	}
}

// NewFromConfig builds the server from the configuration; Module starts it
// (listen) and stops it (graceful shutdown within server.shutdown-timeout).
// Routes that overlap (Server.Err) fail the application, as does a
// server.tls file that cannot be read (the error names the key).
func NewFromConfig(p Params) (*Server, error) {
	opts := OptionsFromConfig(p.Server, p.Segment)
	opts.Budget = p.Budget
	certs, err := servertls.New(p.Server.TLS, "http")
	if err != nil {
		return nil, err
	}
	opts.TLS = certs
	opts.Auth = authOptions(p)
	opts.Instance = p.Instance
	opts.Holds = p.Holds
	opts.Scheduler = p.Scheduler
	opts.Tracer = p.Tracer
	s := New(opts, p.Registry, p.Ready, p.Logger.Named("http"), p.Routes...)
	return s, s.Err()
}

// authOptions is the server's AuthOptions from the graph: the audit log is
// the logger named "audit"; /metrics is open when the Authenticator's
// ProtectMetrics (mmmq.auth.protect-metrics, reloaded with the tokens)
// says so; an Authenticator without that method protects it.
func authOptions(p Params) AuthOptions {
	a := AuthOptions{Authenticator: p.Authenticator, Limiter: p.Limiter, Audit: contract.AuditLogger(p.Logger)}
	a.MetricsOpen = func() bool { return false }
	if pm, ok := p.Authenticator.(interface{ ProtectMetrics() bool }); ok {
		a.MetricsOpen = func() bool { return !pm.ProtectMetrics() }
	}
	return a
}

// Module provides the *Server, starts it with the application and stops it
// (stop accepting, drain the routes' long polls, wait for in-flight
// requests) when the application stops. With server.tls on, it adds the
// server's certificates to the reloaders value group (contract.Reloader
// "tls certificates (http)"), so SIGHUP re-reads them.
var Module = fx.Module("httpapi",
	fx.Provide(NewFromConfig),
	fx.Provide(fx.Annotate((*Server).Reloaders, fx.ResultTags(`group:"reloaders,flatten"`))),
	fx.Invoke(registerLifecycle),
)

func registerLifecycle(lc fx.Lifecycle, s *Server) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }
