package lineproto

import (
	"errors"
	"math"

	"github.com/mmmq/mmmq/modules/config"
)

// Config is the plugin's configuration section, key "mmmq.lineproto"
// (environment: MMMQ_LINEPROTO_ADDR, MMMQ_LINEPROTO_MAX_LINE_BYTES).
type Config struct {
	// Addr is the TCP listen address (host:port); "" disables the listener.
	// Default "".
	Addr string `koanf:"addr"`
	// MaxLineBytes is the longest accepted line, in bytes; at least 1024.
	// Default 1114112 (1 MiB record + 64 KiB framing, DefaultMaxLineBytes).
	MaxLineBytes int64 `koanf:"max-line-bytes"`
}

// ConfigSection registers Config under mmmq.lineproto. Module includes it
// (config.ProvideSection); a binary that loads its configuration before
// building the Fx graph lists it in config.LoadOptions.Sections. Errors name
// mmmq.lineproto.addr (not "" or host:port) or mmmq.lineproto.max-line-bytes
// (below 1024 or above 2^31-1).
var ConfigSection = config.NewSection("lineproto",
	Config{Addr: "", MaxLineBytes: DefaultMaxLineBytes},
	func(c *Config) error {
		return errors.Join(
			config.CheckListenAddr("mmmq.lineproto.addr", c.Addr),
			config.CheckIntRange("mmmq.lineproto.max-line-bytes", c.MaxLineBytes, 1024, math.MaxInt32),
		)
	})

// OptionsFromConfig maps the section and mmmq.broker.segment.max-record-bytes
// to Options (Addr, MaxLineBytes, MaxRecordBytes; the other fields keep
// their defaults, Logger included).
func OptionsFromConfig(c Config, seg config.SegmentConfig) Options {
	return Options{
		Addr:           c.Addr,
		MaxLineBytes:   int(c.MaxLineBytes),
		MaxRecordBytes: int(seg.MaxRecordBytes),
	}
}
