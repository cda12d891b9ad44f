package topicqueue

import (
	"errors"
	"math"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// DedupConfig is the idempotent-publish window: the configuration section
// mmmq.broker.dedup (DedupSection), which Module registers. A message whose
// producer-supplied id was already published to the same topic within
// Window is not stored again; its publish answers the first message's
// offset with "duplicate": true (NATS JetStream's duplicate window on
// Nats-Msg-Id). Ids the broker generates are never deduplicated.
type DedupConfig struct {
	// Window is how long an id is remembered after its publish (also by
	// the scheduler, for scheduled publishes). 0 turns deduplication off.
	// Default 2m.
	Window time.Duration `koanf:"window"`
	// MaxIDs caps the ids remembered per topic, and the scheduler's ids
	// of scheduled publishes (all topics together); over it the oldest
	// are forgotten first (and no longer deduplicated). Default 100000.
	MaxIDs int `koanf:"max-ids"`
	// MaxBytes caps the memory of the remembered ids of all topics
	// together, in bytes; over it the oldest ids of any topic are
	// forgotten first. Default 67108864 (64 MiB).
	MaxBytes int64 `koanf:"max-bytes"`
}

// DedupSection is the section mmmq.broker.dedup (environment
// MMMQ_BROKER_DEDUP_<KEY>), with the defaults above. A negative window, a
// max-ids outside 1..2147483647 or a max-bytes under 1 MiB stops startup
// naming the key.
var DedupSection = config.NewSection("broker.dedup", DedupConfig{
	Window:   2 * time.Minute,
	MaxIDs:   100000,
	MaxBytes: 64 << 20,
}, func(d *DedupConfig) error {
	return errors.Join(
		config.CheckNonNegative("mmmq.broker.dedup.window", d.Window, "off"),
		config.CheckIntRange("mmmq.broker.dedup.max-ids", int64(d.MaxIDs), 1, math.MaxInt32),
		config.CheckIntRange("mmmq.broker.dedup.max-bytes", d.MaxBytes, 1<<20, math.MaxInt64))
})
