package profiling

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
)

// NewFromConfig builds the server from mmmq.profiling.addr and registers its
// start and stop hooks. It returns nil, and registers nothing, when the
// address is "" (the default): no listener.
func NewFromConfig(cfg *config.Config, log *zap.Logger, lc fx.Lifecycle) *Server {
	addr := cfg.MMMQ.Profiling.Addr
	if addr == "" {
		return nil
	}
	s := New(addr, log.Named("profiling"))
	lc.Append(fx.StartStopHook(s.Start, s.Stop))
	return s
}

// Module provides *Server (nil unless mmmq.profiling.addr is set) and
// starts it with the application.
var Module = fx.Module("profiling",
	fx.Provide(NewFromConfig),
	fx.Invoke(func(*Server) {}),
)
