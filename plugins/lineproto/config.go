package lineproto

import (
	"errors"
	"math"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Config is the plugin's configuration section, key "mmmq.lineproto"
// (environment: MMMQ_LINEPROTO_ADDR, MMMQ_LINEPROTO_MAX_LINE_BYTES,
// MMMQ_LINEPROTO_MAX_PIPELINE).
type Config struct {
	// Addr is the TCP listen address (host:port); "" disables the listener.
	// Default "".
	Addr string `koanf:"addr"`
	// MaxLineBytes is the longest accepted line, in bytes; at least 1024.
	// Default 1114112 (1 MiB record + 64 KiB framing, DefaultMaxLineBytes).
	MaxLineBytes int64 `koanf:"max-line-bytes"`
	// MaxPipeline is how many request lines one connection may have
	// unanswered (sent before reading their replies), 1 to
	// MaxPipelineLimit; at the bound the server stops reading the
	// connection until its oldest line is answered. 1 answers one line
	// before reading the next. Default 128 (DefaultMaxPipeline).
	MaxPipeline int64 `koanf:"max-pipeline"`
}

// MaxPipelineLimit is the largest mmmq.lineproto.max-pipeline.
const MaxPipelineLimit = 1 << 16

// ConfigSection registers Config under mmmq.lineproto. Module includes it
// (config.ProvideSection); a binary that loads its configuration before
// building the Fx graph lists it in config.LoadOptions.Sections. Errors name
// mmmq.lineproto.addr (not "" or host:port), mmmq.lineproto.max-line-bytes
// (below 1024 or above 2^31-1) or mmmq.lineproto.max-pipeline (below 1 or
// above MaxPipelineLimit).
var ConfigSection = config.NewSection("lineproto",
	Config{Addr: "", MaxLineBytes: DefaultMaxLineBytes, MaxPipeline: DefaultMaxPipeline},
	func(c *Config) error {
		return errors.Join(
			config.CheckListenAddr("mmmq.lineproto.addr", c.Addr),
			config.CheckIntRange("mmmq.lineproto.max-line-bytes", c.MaxLineBytes, 1024, math.MaxInt32),
			config.CheckIntRange("mmmq.lineproto.max-pipeline", c.MaxPipeline, 1, MaxPipelineLimit),
		)
	})

// OptionsFromConfig maps the section and mmmq.broker.segment.max-record-bytes
// to Options (Addr, MaxLineBytes, MaxPipeline, MaxRecordBytes; the other
// fields keep their defaults, Logger and Budget included).
func OptionsFromConfig(c Config, seg topicqueue.SegmentConfig) Options {
	return Options{
		Addr:           c.Addr,
		MaxLineBytes:   int(c.MaxLineBytes),
		MaxPipeline:    int(c.MaxPipeline),
		MaxRecordBytes: int(seg.MaxRecordBytes),
	}
}
