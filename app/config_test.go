package app_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/lineproto"
	"github.com/mmmq/mmmq/plugins/metrics"
	"github.com/mmmq/mmmq/plugins/profiling"
)

// stockSections are the sections of every stock module and plugin (those
// of mmmq serve: app.Sections() and profiling's).
func stockSections() []config.Section {
	return append(app.Sections(), profiling.ConfigSection)
}

// TestStockPluginKeysMatchSections: the loader's list of stock plugin keys
// and defaults (used when a plugin is absent) equals the plugins' sections.
func TestStockPluginKeysMatchSections(t *testing.T) {
	want := map[string]any{}
	for _, s := range stockSections() {
		for k, v := range s.Defaults() {
			want[k] = v
		}
	}
	got := map[string]any{}
	for _, k := range config.StockPluginKeys() {
		got[k.Key] = k.Default
		assert.Regexp(t, `^github\.com/mmmq/mmmq/(plugins|modules)/`, k.Plugin, k.Key)
	}
	assert.Equal(t, want, got)
	assert.Equal(t, "github.com/mmmq/mmmq/plugins/lineproto", pluginOf(t, "mmmq.lineproto.addr"))
	assert.Equal(t, "github.com/mmmq/mmmq/plugins/metrics", pluginOf(t, "mmmq.metrics.enabled"))
	assert.Equal(t, "github.com/mmmq/mmmq/plugins/profiling", pluginOf(t, "mmmq.profiling.addr"))
}

func pluginOf(t *testing.T, key string) string {
	for _, k := range config.StockPluginKeys() {
		if k.Key == key {
			return k.Plugin
		}
	}
	t.Fatalf("%s is not a stock plugin key", key)
	return ""
}

// committedStockYAML returns the path of configs/mmmq.yaml as committed
// (git HEAD), so that a local edit of the file does not fail the tests; the
// working copy when git or the repository is not there (a source archive).
func committedStockYAML(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "-C", "..", "show", "HEAD:configs/mmmq.yaml").Output()
	if err != nil {
		return filepath.Join("..", "configs", "mmmq.yaml")
	}
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	require.NoError(t, os.WriteFile(p, out, 0o600))
	return p
}

// TestCommittedYAMLEqualsSectionDefaults is the defaults test for the plugin
// sections: configs/mmmq.yaml as committed, with an empty environment and
// every stock plugin, equals config.Default() and each section's defaults,
// no warnings.
func TestCommittedYAMLEqualsSectionDefaults(t *testing.T) {
	p := committedStockYAML(t)
	cfg, err := config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: []string{}, Sections: stockSections()})
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings)
	assert.Equal(t, config.Default().MMMQ, cfg.MMMQ)
	assert.Equal(t, config.Default().Server, cfg.Server)
	assert.Equal(t, config.Default().Logging, cfg.Logging)
	assert.Equal(t, lineproto.ConfigSection.Default(), config.SectionValue(cfg, lineproto.ConfigSection))
	assert.Equal(t, metrics.ConfigSection.Default(), config.SectionValue(cfg, metrics.ConfigSection))
	assert.Equal(t, profiling.ConfigSection.Default(), config.SectionValue(cfg, profiling.ConfigSection))
	assert.Equal(t, dispatcher.ConfigSection.Default(), config.SectionValue(cfg, dispatcher.ConfigSection))
	assert.Equal(t, groups.ConfigSection.Default(), config.SectionValue(cfg, groups.ConfigSection))
	assert.Equal(t, topicqueue.DedupSection.Default(), config.SectionValue(cfg, topicqueue.DedupSection))
}

// An unknown key fails startup with its full name, from the file and from
// the environment: under mmmq.broker where no section owns it, and under a
// section-owned subtree (mmmq.broker.dispatch, modules/dispatcher's).
func TestUnknownBrokerKeysNameThemselves(t *testing.T) {
	for _, tc := range []struct{ yaml, env, want string }{
		{"mmmq: {broker: {dispatchr: {timeout: 1s}}}", "", `config: unknown key "mmmq.broker.dispatchr.timeout"`},
		{"mmmq: {broker: {dispatch: {timout: 1s}}}", "", `config: unknown key "mmmq.broker.dispatch.timout"`},
		{"", "MMMQ_BROKER_DISPATCHR_TIMEOUT=1s", "MMMQ_BROKER_DISPATCHR_TIMEOUT"},
		{"", "MMMQ_BROKER_DISPATCH_TIMOUT=1s", "MMMQ_BROKER_DISPATCH_TIMOUT"},
	} {
		var env []string
		if tc.env != "" {
			env = []string{tc.env}
		}
		_, err := loadStock(t, tc.yaml, env...)
		require.Error(t, err, tc.want)
		assert.ErrorIs(t, err, config.ErrUnknownKey, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func loadStock(t *testing.T, body string, env ...string) (*config.Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	if env == nil {
		env = []string{}
	}
	return config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: env, Sections: stockSections()})
}

func TestStockSectionsValues(t *testing.T) {
	cfg, err := loadStock(t, `
mmmq:
  lineproto: {addr: "127.0.0.1:7000", max-line-bytes: 4096, max-pipeline: 16}
  metrics: {enabled: false}
`, "MMMQ_PROFILING_ADDR=127.0.0.1:6060", "MMMQ_LINEPROTO_MAX_LINE_BYTES=8192")
	require.NoError(t, err)
	assert.Equal(t, lineproto.Config{Addr: "127.0.0.1:7000", MaxLineBytes: 8192, MaxPipeline: 16}, config.SectionValue(cfg, lineproto.ConfigSection))
	assert.Equal(t, metrics.Config{Enabled: false}, config.SectionValue(cfg, metrics.ConfigSection))
	assert.Equal(t, profiling.Config{Addr: "127.0.0.1:6060"}, config.SectionValue(cfg, profiling.ConfigSection))
}

// The plugin keys' invalid values, as config's own table tests them for the
// core keys.
func TestStockSectionsInvalidValuesNameKey(t *testing.T) {
	for _, tc := range []struct{ name, yaml, key string }{
		{"lineproto addr", "mmmq: {lineproto: {addr: 'nope'}}", "mmmq.lineproto.addr"},
		{"line bytes", "mmmq: {lineproto: {max-line-bytes: 10}}", "mmmq.lineproto.max-line-bytes"},
		{"pipeline", "mmmq: {lineproto: {max-pipeline: 0}}", "mmmq.lineproto.max-pipeline"},
		{"pipeline over", "mmmq: {lineproto: {max-pipeline: 65537}}", "mmmq.lineproto.max-pipeline"},
		{"metrics type", "mmmq: {metrics: {enabled: yes please}}", "mmmq.metrics.enabled"},
		{"profiling addr", "mmmq: {profiling: {addr: 'localhost'}}", "mmmq.profiling.addr"},
		{"profiling port", "mmmq: {profiling: {addr: '127.0.0.1:70000'}}", "mmmq.profiling.addr"},
		{"unknown key", "mmmq: {profiling: {adr: x}}", "mmmq.profiling.adr"},
		{"schedule budget low", "mmmq: {broker: {schedule: {memory-budget: 1000}}}", "mmmq.broker.schedule.memory-budget"},
		{"schedule budget high", "mmmq: {broker: {schedule: {memory-budget: 99999999999999}}}", "mmmq.broker.schedule.memory-budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadStock(t, tc.yaml)
			require.Error(t, err)
			var ke *config.KeyError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, tc.key, ke.Key)
		})
	}
	_, err := loadStock(t, "", "MMMQ_METRICS_ENABLED=maybe")
	require.Error(t, err)
	assert.ErrorIs(t, err, config.ErrInvalidValue)
	assert.Contains(t, err.Error(), "config: mmmq.metrics.enabled: ")
	assert.Contains(t, err.Error(), "MMMQ_METRICS_ENABLED")
}

// app.New (which has lineproto but not profiling) still runs the stock
// configs/mmmq.yaml: profiling's key is at its default, so it only warns; a
// non-default value of it is a startup error naming the key and the plugin.
func TestAppWithoutStockPluginsReadsStockYAML(t *testing.T) {
	p := committedStockYAML(t)
	var cfg *config.Config
	a := app.New(fx.NopLogger, fx.Supply(config.LoadOptions{Path: p, PathExplicit: true, Environ: []string{}}), fx.Populate(&cfg))
	require.NoError(t, a.Err())
	var keys []string
	for _, w := range cfg.Warnings {
		keys = append(keys, w.Key)
	}
	assert.ElementsMatch(t, []string{"mmmq.profiling.addr"}, keys)

	a = app.New(fx.NopLogger, fx.Supply(config.LoadOptions{Path: p, PathExplicit: true,
		Environ: []string{"MMMQ_PROFILING_ADDR=127.0.0.1:6060"}}), fx.Populate(&cfg))
	require.Error(t, a.Err())
	assert.ErrorIs(t, a.Err(), config.ErrPluginMissing)
	assert.Contains(t, a.Err().Error(), "config: mmmq.profiling.addr: is read by plugin github.com/mmmq/mmmq/plugins/profiling, which this binary does not contain")
}
