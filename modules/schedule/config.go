package schedule

import (
	"errors"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// Config is the configuration section mmmq.broker.schedule
// (ConfigSection), which Module registers.
type Config struct {
	// MaxDelay is the latest a scheduled message may be due, counted from
	// its publish; a later deliverAt or a longer delay is 400. Default 720h
	// (30 days).
	MaxDelay time.Duration `koanf:"max-delay"`
	// MaxPendingPerTopic caps the scheduled messages one topic may have
	// waiting; one more is 507 TOO_MANY_SCHEDULED. 1..1000000000. Default
	// 1000000.
	MaxPendingPerTopic int `koanf:"max-pending-per-topic"`
	// BucketWidth is the span of due times one bucket file holds, from 1s
	// to 24h; the mover loads the pending entries of one bucket at a time
	// (their metadata, about 100 bytes each). Default 1m.
	BucketWidth time.Duration `koanf:"bucket-width"`
	// MoveBatch is the most messages the mover reads into memory and
	// appends per step, 1..100000. Default 1000.
	MoveBatch int `koanf:"move-batch"`
	// MemoryBudget bounds, in bytes, what the store holds in memory for
	// pending messages whatever their number: half for the loaded window
	// of entry metadata (about 200 bytes per entry; a bucket with more
	// pending entries is loaded a window at a time, as is the start-up
	// scan), half for the messages of one mover step (at least one).
	// 1 MiB..64 GiB. Default 67108864 (64 MiB).
	MemoryBudget int64 `koanf:"memory-budget"`
}

// ConfigSection is the section mmmq.broker.schedule (environment
// MMMQ_BROKER_SCHEDULE_<KEY>) with the defaults above; an invalid value
// stops startup naming the key.
var ConfigSection = config.NewSection("broker.schedule", Config{
	MaxDelay:           DefaultMaxDelay,
	MaxPendingPerTopic: DefaultMaxPendingPerTopic,
	BucketWidth:        DefaultBucketWidth,
	MoveBatch:          DefaultMoveBatch,
	MemoryBudget:       DefaultMemoryBudget,
}, func(c *Config) error {
	errs := []error{
		config.CheckPositive("mmmq.broker.schedule.max-delay", c.MaxDelay),
		config.CheckIntRange("mmmq.broker.schedule.max-pending-per-topic", int64(c.MaxPendingPerTopic), 1, 1_000_000_000),
		config.CheckDurationRange("mmmq.broker.schedule.bucket-width", c.BucketWidth, time.Second, 24*time.Hour),
		config.CheckIntRange("mmmq.broker.schedule.move-batch", int64(c.MoveBatch), 1, 100_000),
		config.CheckIntRange("mmmq.broker.schedule.memory-budget", c.MemoryBudget, 1<<20, 64<<30),
	}
	if c.BucketWidth%time.Millisecond != 0 {
		errs = append(errs, config.InvalidValue("mmmq.broker.schedule.bucket-width", "must be whole milliseconds; got %v", c.BucketWidth))
	}
	return errors.Join(errs...)
})
