package profiling

import (
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/config"
)

// Config is the plugin's configuration section, key "mmmq.profiling"
// (environment: MMMQ_PROFILING_ADDR).
type Config struct {
	// Addr is the listen address (host:port) of /debug/pprof/; "" disables
	// it. No authentication: use loopback or a private interface. Default "".
	Addr string `koanf:"addr"`
}

// ConfigSection registers Config under mmmq.profiling. Module includes it
// (config.ProvideSection); a binary that loads its configuration before
// building the Fx graph lists it in config.LoadOptions.Sections. An address
// that is neither "" nor host:port with a port of 0..65535 is an error
// naming mmmq.profiling.addr.
var ConfigSection = config.NewSection("profiling", Config{Addr: ""},
	func(c *Config) error { return config.CheckListenAddr("mmmq.profiling.addr", c.Addr) })

// NewFromConfig builds the server from mmmq.profiling.addr and registers its
// start and stop hooks. It returns nil, and registers nothing, when the
// address is "" (the default): no listener.
func NewFromConfig(c Config, log *zap.Logger, lc fx.Lifecycle) *Server {
	if c.Addr == "" {
		return nil
	}
	s := New(c.Addr, log.Named("profiling"))
	lc.Append(fx.StartStopHook(s.Start, s.Stop))
	return s
}

// Module registers ConfigSection (and provides Config), provides *Server
// (nil unless mmmq.profiling.addr is set) and starts it with the application.
var Module = fx.Module("profiling",
	config.ProvideSection(ConfigSection),
	fx.Provide(NewFromConfig),
	fx.Invoke(func(*Server) {}),
)
