package groups

import (
	"errors"
	"math"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// Config configures pull consumer groups: the configuration section
// mmmq.broker.groups (ConfigSection), which Module registers.
type Config struct {
	// LeaseTimeout is how long fetched, unacknowledged messages stay leased to
	// a consumer before they are offered again. Default 30s.
	LeaseTimeout time.Duration `koanf:"lease-timeout"`
	// MaxFetch caps the messages returned by one fetch; at least 1. Default 1000.
	MaxFetch int `koanf:"max-fetch"`
}

// ConfigSection is the section mmmq.broker.groups (environment
// MMMQ_BROKER_GROUPS_<KEY>), with the defaults above, which are also the
// zero-value defaults of Options. A lease-timeout that is not > 0 or a
// max-fetch outside 1..2147483647 stops startup naming the key.
var ConfigSection = config.NewSection("broker.groups", Config{
	LeaseTimeout: 30 * time.Second,
	MaxFetch:     1000,
}, func(g *Config) error {
	return errors.Join(
		config.CheckPositive("mmmq.broker.groups.lease-timeout", g.LeaseTimeout),
		config.CheckIntRange("mmmq.broker.groups.max-fetch", int64(g.MaxFetch), 1, math.MaxInt32))
})
