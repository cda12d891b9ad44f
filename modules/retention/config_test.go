package retention

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// loadConfig loads body with this module's section and the storage
// section (whose backend the cross check reads), and the environment env
// only.
func loadConfig(t *testing.T, body string, env ...string) (*config.Config, error) {
	t.Helper()
	return configtest.Load(t, body, env, ConfigSection, topicqueue.StorageSection)
}

// TestConfigSection: the section loads from the file (the topics list
// included) and from the environment; unknown keys in a topics element and
// invalid values name their key; the list is file-only.
func TestConfigSection(t *testing.T) {
	cfg, err := loadConfig(t, `
mmmq:
  broker:
    retention:
      max-bytes: 40960
      check-interval: 5s
      keep-unconsumed: true
      topics:
        - pattern: "metrics.**"
          max-age: 2s
`, "MMMQ_BROKER_RETENTION_MAX_AGE=168h")
	require.NoError(t, err)
	metricsMaxAge := 2 * time.Second // max-bytes left out: nil, inherited
	assert.Equal(t, Config{MaxAge: 168 * time.Hour, MaxBytes: 40960, CheckInterval: 5 * time.Second,
		Topics: TopicsConfig{{Pattern: "metrics.**", MaxAge: &metricsMaxAge}}, KeepUnconsumed: true, GroupIdle: 24 * time.Hour},
		config.SectionValue(cfg, ConfigSection))

	_, err = loadConfig(t, "mmmq:\n  broker:\n    retention:\n      topics:\n        - pattern: x\n          max-ages: 1s\n")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown key "mmmq.broker.retention.topics[0].max-ages"`)

	_, err = loadConfig(t, "mmmq: {broker: {retention: {topics: [x]}}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.broker.retention.topics[0]: must be a mapping with pattern, max-age and max-bytes")

	_, err = loadConfig(t, "mmmq:\n  broker:\n    retention:\n      topics:\n        - max-age: -1s\n          max-bytes: -2\n      max-bytes: -1\n      check-interval: 0s\n      group-idle: 0s\n")
	require.Error(t, err)
	for _, key := range []string{"mmmq.broker.retention.topics[0].pattern: must not be empty", "mmmq.broker.retention.topics[0].max-age",
		"mmmq.broker.retention.topics[0].max-bytes", "mmmq.broker.retention.max-bytes", "mmmq.broker.retention.check-interval",
		"mmmq.broker.retention.group-idle"} {
		assert.Contains(t, err.Error(), key)
	}

	_, err = loadConfig(t, "", "MMMQ_BROKER_RETENTION_MAX_AGE=-1s")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: mmmq.broker.retention.max-age: must be a duration >= 0 such as "168h" (0 = keep forever); got -1s (from MMMQ_BROKER_RETENTION_MAX_AGE)`)

	_, err = loadConfig(t, "", "MMMQ_BROKER_RETENTION_TOPICS=x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.broker.retention.topics can only be set in the YAML file")
}

// With backend jetstream, retention limits are accepted (check-interval
// and group-idle too: they do not apply, and are no error), but
// keep-unconsumed is refused, naming the key and why, and a max-age under
// 100ms (JetStream's least), the overrides' included.
func TestConfigWithJetStream(t *testing.T) {
	_, err := loadConfig(t, `
mmmq:
  broker:
    storage: {backend: jetstream}
    retention:
      max-age: 168h
      max-bytes: 40960
      check-interval: 5s
      group-idle: 1h
      topics: [{pattern: "metrics.**", max-age: 100ms}]
`)
	require.NoError(t, err)

	for _, tt := range []struct{ yaml, key, why string }{
		{"retention: {keep-unconsumed: true}", "mmmq.broker.retention.keep-unconsumed", "checkpoints"},
		{"retention: {max-age: 50ms}", "mmmq.broker.retention.max-age", "at least 100ms"},
		{"retention: {topics: [{pattern: a, max-age: 1ms}]}", "mmmq.broker.retention.topics[0].max-age", "at least 100ms"},
	} {
		_, err = loadConfig(t, "mmmq: {broker: {storage: {backend: jetstream}, "+tt.yaml+"}}")
		require.Error(t, err, tt.yaml)
		assert.Contains(t, err.Error(), "config: "+tt.key+":")
		assert.Contains(t, err.Error(), tt.why)
		_, err = loadConfig(t, "mmmq: {broker: {"+tt.yaml+"}}")
		assert.NoError(t, err, "the local backend: %s", tt.yaml)
	}
}

// A topic pattern serve would refuse fails validation, naming its key and
// saying why with the parser's own words, so `mmmq config check` never
// says OK for a configuration serve refuses; a pattern given twice is
// refused, naming both overrides.
func TestConfigPatternsValidatedAsServeDoes(t *testing.T) {
	for _, p := range []string{"a..b", "a.b*", "***", "/etc", "a b", ".", "*a", "a.", "ä"} {
		_, err := loadConfig(t, fmt.Sprintf("mmmq: {broker: {retention: {topics: [{pattern: %q, max-age: 1h}]}}}", p))
		require.Error(t, err, p)
		assert.ErrorIs(t, err, config.ErrInvalidValue)
		assert.Contains(t, err.Error(), fmt.Sprintf("config: mmmq.broker.retention.topics[0].pattern: invalid topic pattern %q: ", p))
	}
	_, err := loadConfig(t, `
mmmq:
  broker:
    retention:
      topics:
        - {pattern: "metrics.**", max-age: 1h}
        - {pattern: "logs.*", max-age: 2h}
        - {pattern: "metrics.**", max-age: 3h}
`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: mmmq.broker.retention.topics[2].pattern: duplicate pattern "metrics.**" (also mmmq.broker.retention.topics[0].pattern)`)
	assert.NotContains(t, err.Error(), "topics[1]")

	_, err = loadConfig(t, `mmmq: {broker: {retention: {topics: [{pattern: "metrics.**", max-age: 1h}, {pattern: "**", max-age: 2h}, {pattern: "a.**.b"}]}}}`)
	require.NoError(t, err, "valid patterns")
}
