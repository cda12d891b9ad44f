package lineproto

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Params are the server's dependencies in the Fx graph. The consumer-group
// coordinator comes from groups.Module, which the application must include.
type Params struct {
	fx.In

	// Config is mmmq.lineproto (ConfigSection, provided by Module).
	Config Config
	// Segment is mmmq.broker.segment (topicqueue.SegmentSection).
	Segment topicqueue.SegmentConfig
	// Server is the "server" section (config.Module): its server.tls
	// certificates serve the line protocol too.
	Server   config.ServerConfig
	Logger   *zap.Logger
	Registry *topicqueue.Registry
	Groups   *groups.Coordinator
	// Auth and Limiter come from the auth module when the application has
	// one; without it (or with no tokens configured, Enabled false) the
	// line protocol is open, as before authentication existed.
	Auth    contract.Authenticator `optional:"true"`
	Limiter contract.Limiter       `optional:"true"`
	// Budget is the in-flight memory budget (topicqueue.Module) that
	// pipelined PUBs draw from; without it nothing is counted.
	Budget *contract.Budget `optional:"true"`
	// Scheduler is the schedule module's (modules/schedule); without it a
	// scheduled PUBX is ERR NOT_IMPLEMENTED.
	Scheduler contract.Scheduler `optional:"true"`
	// Tracer is the tracing module's (modules/tracing): a span per
	// publish. Nil or absent: tracing off.
	Tracer *tracing.Tracer `optional:"true"`
}

// NewFromConfig builds the server from mmmq.lineproto (addr,
// max-line-bytes, max-pipeline), the in-flight memory budget,
// mmmq.broker.segment.max-record-bytes and server.tls (the
// HTTP API's certificates: TLS is on for both or for neither); Module
// starts it (listen) and stops it (graceful close). It returns nil when
// mmmq.lineproto.addr is "" (the default): no TCP listener. A server.tls
// file that cannot be read is an error naming its key.
func NewFromConfig(p Params) (*Server, error) {
	if p.Config.Addr == "" {
		return nil, nil
	}
	opts := OptionsFromConfig(p.Config, p.Segment)
	opts.Logger = p.Logger.Named("lineproto")
	opts.AuditLogger = contract.AuditLogger(p.Logger)
	opts.Authenticator = p.Auth
	opts.Limiter = p.Limiter
	opts.Budget = p.Budget
	opts.Scheduler = p.Scheduler
	opts.Tracer = p.Tracer
	certs, err := servertls.New(p.Server.TLS, "lineproto")
	if err != nil {
		return nil, err
	}
	opts.TLS = certs
	return New(opts, p.Registry, p.Groups), nil
}

// Module registers ConfigSection (and provides Config), provides *Server
// (nil when mmmq.lineproto.addr is empty) and starts it with the
// application. It needs *topicqueue.Registry and *groups.Coordinator
// (groups.Module). It is part of app.Modules (and so of the stock binary and
// of every app.New binary), and listens only when mmmq.lineproto.addr is
// set. Over TLS, its certificates join the reloaders value group
// ("tls certificates (lineproto)"), so SIGHUP re-reads them.
var Module = fx.Module("lineproto",
	config.ProvideSection(ConfigSection),
	fx.Provide(NewFromConfig),
	fx.Provide(fx.Annotate((*Server).Reloaders, fx.ResultTags(`group:"reloaders,flatten"`))),
	fx.Invoke(registerLifecycle),
)

func registerLifecycle(lc fx.Lifecycle, s *Server) {
	if s != nil {
		lc.Append(fx.StartStopHook(s.Start, s.Stop))
	}
}
