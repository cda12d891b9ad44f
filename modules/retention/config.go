package retention

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Config says how long topics keep their messages: the configuration
// section mmmq.broker.retention (ConfigSection), which Module registers. Retention deletes whole sealed segments from
// the head of a topic, never the active one, so a topic keeps up to one
// segment (mmmq.broker.segment.max-bytes) more than its limits. The
// defaults keep everything, as the original Java mmmq does.
//
// With mmmq.broker.storage.backend "jetstream" a topic's max-age and
// max-bytes (the first matching override's, as here) are its stream's
// MaxAge and MaxBytes, which JetStream enforces continuously, dropping
// the oldest messages one by one (max-bytes then counts the stream's
// stored bytes); check-interval and group-idle do not apply, and
// keep-unconsumed is refused. Every broker sharing the streams must
// have the same retention: the last to open a topic sets its limits.
type Config struct {
	// MaxAge: a segment is deleted once the newest message in it is older
	// than this (its stored timestamp). 0 keeps messages forever. With
	// backend "jetstream" 0 or at least 100ms. Default 0.
	MaxAge time.Duration `koanf:"max-age"`
	// MaxBytes: per topic, the oldest segments are deleted while its .mmm
	// and .idx files hold more than this many bytes. 0 is unlimited.
	// Default 0.
	MaxBytes int64 `koanf:"max-bytes"`
	// CheckInterval is how often every topic is checked (local backend
	// only). Default 1m.
	CheckInterval time.Duration `koanf:"check-interval"`
	// Topics are per-pattern overrides of max-age and max-bytes (a limit an
	// override leaves out is inherited from these keys); the first
	// pattern matching a topic wins (dispatcher pattern rules: "*" one
	// segment, "**" any number), so the same pattern twice is refused.
	// Dead-letter topics (dead-letter.*) are kept whole: MaxAge and
	// MaxBytes apply to them only through an override whose pattern
	// starts with "dead-letter" (the reserved-topic rule of
	// contract.Pattern.Reaches). File only. Default none.
	Topics TopicsConfig `koanf:"topics"`
	// KeepUnconsumed keeps every segment that a dispatcher (from the file,
	// Go code or the admin API), or a consumer group that committed or
	// fetched within GroupIdle, has not read past. Only groups used since
	// the broker started count: after a restart a group holds nothing
	// until a consumer fetches or commits again. Checkpoints of
	// dispatchers that no longer exist hold nothing.
	// Local backend only: refused with backend "jetstream". Default false.
	KeepUnconsumed bool `koanf:"keep-unconsumed"`
	// GroupIdle: a consumer group that has neither committed nor fetched
	// for this long no longer holds data under keep-unconsumed (local
	// backend only). Default 24h.
	GroupIdle time.Duration `koanf:"group-idle"`
}

// TopicsConfig is the list of per-pattern retention overrides
// (key "mmmq.broker.retention.topics"; file only). Default empty.
type TopicsConfig []TopicConfig

// TopicConfig overrides retention for the topics matching Pattern
// (list key "mmmq.broker.retention.topics"). A limit the entry leaves out
// is inherited from mmmq.broker.retention (as Kafka's topic-level
// retention settings fall back to the broker's); 0 given explicitly means
// forever / unlimited for these topics.
type TopicConfig struct {
	// Pattern is a topic pattern with the dispatcher rules. Required.
	Pattern string `koanf:"pattern"`
	// MaxAge replaces mmmq.broker.retention.max-age for these topics
	// (0 = forever); nil inherits it.
	MaxAge *time.Duration `koanf:"max-age"`
	// MaxBytes replaces mmmq.broker.retention.max-bytes for these topics
	// (0 = unlimited); nil inherits it.
	MaxBytes *int64 `koanf:"max-bytes"`
}

// topicsKey is the list key of the per-pattern overrides.
const topicsKey = "mmmq.broker.retention.topics"

// ConfigSection is the section mmmq.broker.retention (environment
// MMMQ_BROKER_RETENTION_<KEY>; the topics list is file only), with the
// defaults above: keep everything, check every minute, a group idle after
// 24h. Invalid values name their key: a negative max-age or max-bytes, a
// check-interval or group-idle that is not > 0, an override whose pattern
// is empty, invalid (the dispatchers' parser) or repeats an earlier one,
// or whose max-age or max-bytes is negative. With
// mmmq.broker.storage.backend "jetstream" (a cross check, see
// config.SectionOf.WithCrossCheck) keep-unconsumed is refused and a
// max-age, the overrides' included, must be 0 or at least 100ms.
var ConfigSection = config.NewSection("broker.retention", Config{
	CheckInterval: time.Minute,
	GroupIdle:     24 * time.Hour,
}, validateConfig).WithCrossCheck(checkBackend)

// validateConfig checks mmmq.broker.retention. Two overrides with the
// same pattern are refused: the first one that matches a topic wins, so
// the second could never apply.
func validateConfig(r *Config) error {
	const k = "mmmq.broker.retention."
	errs := []error{
		config.CheckNonNegative(k+"max-age", r.MaxAge, "keep forever"),
		config.CheckIntRange(k+"max-bytes", r.MaxBytes, 0, math.MaxInt64),
		config.CheckPositive(k+"check-interval", r.CheckInterval),
		config.CheckPositive(k+"group-idle", r.GroupIdle),
	}
	first := map[string]int{} // pattern -> index of its first override
	for i, tc := range r.Topics {
		key := fmt.Sprintf("%s[%d]", topicsKey, i)
		if err := checkPattern(key+".pattern", tc.Pattern); err != nil {
			errs = append(errs, err)
		} else if j, dup := first[tc.Pattern]; dup {
			errs = append(errs, config.InvalidValue(key+".pattern", "duplicate pattern %q (also %s[%d].pattern): the first override that matches a topic wins, so this one would never apply",
				tc.Pattern, topicsKey, j))
		} else {
			first[tc.Pattern] = i
		}
		if tc.MaxAge != nil {
			errs = append(errs, config.CheckNonNegative(key+".max-age", *tc.MaxAge, "keep forever"))
		}
		if tc.MaxBytes != nil {
			errs = append(errs, config.CheckIntRange(key+".max-bytes", *tc.MaxBytes, 0, math.MaxInt64))
		}
	}
	return errors.Join(errs...)
}

// checkPattern checks a topic pattern with the parser serve uses
// (contract.ValidatePattern).
func checkPattern(key, p string) error {
	if strings.TrimSpace(p) == "" {
		return config.InvalidValue(key, "must not be empty")
	}
	if err := contract.ValidatePattern(p); err != nil {
		return config.InvalidValue(key, "%v", err)
	}
	return nil
}

// checkBackend checks what the JetStream backend cannot do with
// mmmq.broker.retention: its limits are the streams' MaxAge and MaxBytes,
// which JetStream enforces without knowing mmmq's checkpoints (so no
// keep-unconsumed) and which it refuses below 100ms of age.
func checkBackend(r *Config, cfg config.View) error {
	if b, _ := cfg.Value("mmmq.broker.storage.backend").(string); b != topicqueue.BackendJetStream {
		return nil
	}
	var errs []error
	if r.KeepUnconsumed {
		errs = append(errs, config.InvalidValue("mmmq.broker.retention.keep-unconsumed", "applies to the local backend only: with backend %q the streams' limits drop messages without knowing the readers' checkpoints; remove it", topicqueue.BackendJetStream))
	}
	age := func(key string, d time.Duration) {
		if d > 0 && d < 100*time.Millisecond {
			errs = append(errs, config.InvalidValue(key, "must be 0 or at least 100ms with backend %q (JetStream's least max age); got %s", topicqueue.BackendJetStream, d))
		}
	}
	age("mmmq.broker.retention.max-age", r.MaxAge)
	for i, tc := range r.Topics {
		if tc.MaxAge != nil {
			age(fmt.Sprintf("%s[%d].max-age", topicsKey, i), *tc.MaxAge)
		}
	}
	return errors.Join(errs...)
}
