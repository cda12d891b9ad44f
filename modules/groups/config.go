package groups

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Config configures pull consumer groups: the configuration section
// mmmq.broker.groups (ConfigSection), which Module registers.
type Config struct {
	// LeaseTimeout is how long fetched, unacknowledged messages stay leased to
	// a consumer before they are offered again. Default 30s.
	LeaseTimeout time.Duration `koanf:"lease-timeout"`
	// MaxFetch caps the messages returned by one fetch; at least 1. Default 1000.
	MaxFetch int `koanf:"max-fetch"`
	// Shared are group globs ("*" matches any run of characters): a group
	// whose name matches one is shared (competing consumers) from its first
	// use, without mode=shared on its first fetch. A group stored as
	// exclusive that matches one stops startup, naming it. Default none.
	Shared []string `koanf:"shared"`
	// MaxDeliveries is how many times a shared group hands a message out
	// before it goes to the group's dead-letter topic instead; 0 never
	// dead-letters. Default 4 (the original mmmq's three resends).
	MaxDeliveries int `koanf:"max-deliveries"`
	// MaxUnacked bounds the messages a shared group has read past its
	// committed offset (handed out, finished past it, or waiting behind
	// their ordering key): 1..100000000. Default 1000000.
	MaxUnacked int64 `koanf:"max-unacked"`
	// Expired is what a shared group does with a message past its
	// expiresAt (published with a ttl) when it would hand it out: "skip"
	// (finished without delivery, counted) or "dead-letter" (appended to
	// the group's dead-letter topic with mmmq-dl-reason "expired" first).
	// Exclusive groups always skip. Default "skip".
	Expired string `koanf:"expired"`
	// DeadLetterTopics names the dead-letter topic of shared groups whose
	// name does not make a valid topic after "dead-letter." (or that want
	// another one). Default none: dead-letter.<group>.
	DeadLetterTopics []DeadLetterTopic `koanf:"dead-letter-topics"`
}

// DeadLetterTopic is one entry of mmmq.broker.groups.dead-letter-topics.
type DeadLetterTopic struct {
	// Group is a group name (exact).
	Group string `koanf:"group"`
	// Topic is its dead-letter topic.
	Topic string `koanf:"topic"`
}

// ConfigSection is the section mmmq.broker.groups (environment
// MMMQ_BROKER_GROUPS_<KEY>), with the defaults above, which are also the
// zero-value defaults of Options. A lease-timeout that is not > 0 or a
// max-fetch outside 1..2147483647 stops startup naming the key.
var ConfigSection = config.NewSection("broker.groups", Config{
	LeaseTimeout:  30 * time.Second,
	MaxFetch:      1000,
	MaxDeliveries: 4,
	MaxUnacked:    1_000_000,
	Expired:       ExpiredSkip,
}, func(g *Config) error {
	errs := []error{
		config.CheckPositive("mmmq.broker.groups.lease-timeout", g.LeaseTimeout),
		config.CheckIntRange("mmmq.broker.groups.max-fetch", int64(g.MaxFetch), 1, math.MaxInt32),
		config.CheckIntRange("mmmq.broker.groups.max-deliveries", int64(g.MaxDeliveries), 0, math.MaxInt32),
		config.CheckIntRange("mmmq.broker.groups.max-unacked", g.MaxUnacked, 1, 100_000_000),
	}
	if g.Expired != ExpiredSkip && g.Expired != ExpiredDeadLetter {
		errs = append(errs, fmt.Errorf("mmmq.broker.groups.expired: must be %q or %q, got %q", ExpiredSkip, ExpiredDeadLetter, g.Expired))
	}
	for i, glob := range g.Shared {
		if glob == "" || len(glob) > 200 {
			errs = append(errs, fmt.Errorf("mmmq.broker.groups.shared[%d]: a group glob of 1-200 characters, got %q", i, glob))
		}
	}
	seen := map[string]bool{}
	for i, d := range g.DeadLetterTopics {
		key := fmt.Sprintf("mmmq.broker.groups.dead-letter-topics[%d]", i)
		if err := contract.ValidCheckpointName(d.Group); err != nil {
			errs = append(errs, fmt.Errorf("%s.group: %q is not a group name (1-200 characters of [A-Za-z0-9_.-], not starting with '.')", key, d.Group))
		} else if seen[d.Group] {
			errs = append(errs, fmt.Errorf("%s.group: %q is named twice", key, d.Group))
		}
		seen[d.Group] = true
		if err := contract.ValidateTopic(d.Topic); err != nil {
			errs = append(errs, fmt.Errorf("%s.topic: %v", key, err))
		}
	}
	return errors.Join(errs...)
})
