package httpapi

import (
	"fmt"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Params are the server's dependencies in the Fx graph. Routes come from
// plugins through the value group RouteTag.
type Params struct {
	fx.In
	Config   *config.Config
	Logger   *zap.Logger
	Registry *topicqueue.Registry
	Ready    *recovery.Readiness
	Routes   []contract.Route `group:"routes"`
}

// NewFromConfig builds the server from the configuration; Module starts it
// (listen) and stops it (graceful shutdown within server.shutdown-timeout).
func NewFromConfig(p Params) *Server {
	c := p.Config.Server
	return New(Options{
		Addr:              fmt.Sprintf("%s:%d", c.Host, c.Port),
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxBodyBytes:      c.MaxBodyBytes,
		ShutdownTimeout:   c.ShutdownTimeout,
		MaxRecordBytes:    int(p.Config.MMMQ.Broker.Segment.MaxRecordBytes),
	}, p.Registry, p.Ready, p.Logger.Named("http"), p.Routes...)
}

// Module provides the *Server, starts it with the application and stops it
// (stop accepting, drain the routes' long polls, wait for in-flight
// requests) when the application stops.
var Module = fx.Module("httpapi",
	fx.Provide(NewFromConfig),
	fx.Invoke(registerLifecycle),
)

func registerLifecycle(lc fx.Lifecycle, s *Server) { lc.Append(fx.StartStopHook(s.Start, s.Stop)) }
