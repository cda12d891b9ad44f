package lineproto

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Params are the server's dependencies in the Fx graph. The consumer-group
// coordinator comes from groups.Module, which the application must include.
type Params struct {
	fx.In

	Config    *config.Config
	Logger    *zap.Logger
	Registry  *topicqueue.Registry
	Groups    *groups.Coordinator
	Lifecycle fx.Lifecycle
}

// NewFromConfig builds the server from mmmq.lineproto (addr,
// max-line-bytes) and mmmq.broker.segment.max-record-bytes, and registers
// its start (listen) and stop (graceful close) hooks. It returns nil, and
// registers nothing, when mmmq.lineproto.addr is "" (the default): no TCP
// listener.
func NewFromConfig(p Params) *Server {
	lc := p.Config.MMMQ.Lineproto
	if lc.Addr == "" {
		return nil
	}
	s := New(Options{
		Addr:           lc.Addr,
		MaxLineBytes:   int(lc.MaxLineBytes),
		MaxRecordBytes: int(p.Config.MMMQ.Broker.Segment.MaxRecordBytes),
		Logger:         p.Logger.Named("lineproto"),
	}, p.Registry, p.Groups)
	p.Lifecycle.Append(fx.StartStopHook(s.Start, s.Stop))
	return s
}

// Module provides *Server (nil when mmmq.lineproto.addr is empty) and
// starts it with the application. It needs *topicqueue.Registry and
// *groups.Coordinator (groups.Module). It is a plugin: a binary without it
// has no TCP listener.
var Module = fx.Module("lineproto",
	fx.Provide(NewFromConfig),
	fx.Invoke(func(*Server) {}),
)
