package config

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

// widgetConfig is a test plugin's section, mmmq.widget.
type widgetConfig struct {
	// URL is where widgets go. Default "http://localhost:9000".
	URL string `koanf:"url"`
	// Size is a count, 1..100. Default 10.
	Size int `koanf:"size"`
	// Every is a period. Default 1s.
	Every time.Duration `koanf:"every"`
	// Deep is a nested section.
	Deep struct {
		// On is a switch. Default false.
		On bool `koanf:"on"`
	} `koanf:"deep"`
}

var widgetSection = NewSection("widget",
	widgetConfig{URL: "http://localhost:9000", Size: 10, Every: time.Second},
	func(c *widgetConfig) error {
		return errors.Join(
			CheckIntRange("mmmq.widget.size", int64(c.Size), 1, 100),
			func() error {
				if c.URL == "" {
					return errors.New("url must not be empty") // not a KeyError
				}
				return nil
			}(),
		)
	})

func loadWidget(t *testing.T, body string, env ...string) (*Config, error) {
	t.Helper()
	if env == nil {
		env = []string{}
	}
	return Load(LoadOptions{Path: writeYAML(t, body), PathExplicit: true, Environ: env, Sections: []Section{widgetSection}})
}

func TestSectionDefaults(t *testing.T) {
	cfg, err := loadWidget(t, "")
	require.NoError(t, err)
	assert.Equal(t, widgetSection.Default(), SectionValue(cfg, widgetSection))
	assert.Equal(t, map[string]any{
		"mmmq.widget.url": "http://localhost:9000", "mmmq.widget.size": 10,
		"mmmq.widget.every": time.Second, "mmmq.widget.deep.on": false,
	}, widgetSection.Defaults())
	assert.Equal(t, "mmmq.widget", widgetSection.Key())
	assert.Contains(t, Keys(widgetSection), "mmmq.widget.deep.on")
	assert.NotContains(t, Keys(), "mmmq.widget.size")
}

func TestSectionYAMLAndEnv(t *testing.T) {
	cfg, err := loadWidget(t, `
mmmq:
  widget:
    url: http://w:1
    size: 20
    deep: {on: true}
`, "MMMQ_WIDGET_SIZE=30", "MMMQ_WIDGET_EVERY=2m", "MMMQ_WIDGET_DEEP_ON=false")
	require.NoError(t, err)
	w := SectionValue(cfg, widgetSection)
	assert.Equal(t, "http://w:1", w.URL)
	assert.Equal(t, 30, w.Size, "the environment wins over the file")
	assert.Equal(t, 2*time.Minute, w.Every)
	assert.False(t, w.Deep.On)
	assert.Equal(t, "MMMQ_WIDGET_DEEP_ON", EnvVar("mmmq.widget.deep.on"))
}

func TestSectionBadValueNamesKey(t *testing.T) {
	_, err := loadWidget(t, "mmmq: {widget: {size: 0}}")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Contains(t, err.Error(), "config: mmmq.widget.size: must be between 1 and 100; got 0")

	_, err = loadWidget(t, "", "MMMQ_WIDGET_SIZE=500")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.widget.size: must be between 1 and 100; got 500 (from MMMQ_WIDGET_SIZE)")

	_, err = loadWidget(t, "", "MMMQ_WIDGET_SIZE=big")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.widget.size: not a base-10 integer")
	assert.Contains(t, err.Error(), "MMMQ_WIDGET_SIZE")

	_, err = loadWidget(t, "mmmq: {widget: {every: 5}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.widget.every: ")

	_, err = loadWidget(t, "mmmq: {widget: {url: ''}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.widget: url must not be empty")

	_, err = loadWidget(t, "mmmq: {widget: 3}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.widget: must be a mapping")
}

func TestSectionUnknownKeyRefused(t *testing.T) {
	_, err := loadWidget(t, "mmmq: {widget: {sise: 3, deep: {of: 1}}}")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.widget.sise"`)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.widget.deep.of"`)

	_, err = loadWidget(t, "", "MMMQ_WIDGET_SISE=3")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), "MMMQ_WIDGET_SISE")

	// Without the section, its keys are unknown like any other.
	_, err = load(t, "mmmq: {widget: {size: 3}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.widget.size"`)
}

func TestSectionRegistrationErrors(t *testing.T) {
	other := NewSection("widget", widgetConfig{}, nil)
	_, err := Load(LoadOptions{Environ: []string{}, Sections: []Section{widgetSection, other}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "two different sections are named mmmq.widget")

	// The same section twice counts once.
	_, err = Load(LoadOptions{Environ: []string{}, Sections: []Section{widgetSection, widgetSection}})
	require.NoError(t, err)

	// A section whose variable collides with a core key's.
	type clash struct {
		CertFile string `koanf:"cert-file"`
	}
	_, err = Load(LoadOptions{Environ: []string{}, Sections: []Section{NewSection("server-tls", clash{CertFile: "x"}, nil)}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "share variable MMMQ_SERVER_TLS_CERT_FILE")

	assert.Panics(t, func() { NewSection("broker", widgetConfig{}, nil) })
	assert.Panics(t, func() { NewSection("Bad.Name", widgetConfig{}, nil) })
	assert.Panics(t, func() { NewSection("n", 3, nil) })
	assert.Panics(t, func() { NewSection("n", struct{ L []int }{L: []int{1}}, nil) })
}

func TestSetSectionValueAndSupply(t *testing.T) {
	cfg := Default()
	assert.Equal(t, widgetSection.Default(), SectionValue(cfg, widgetSection), "absent: defaults")
	assert.Equal(t, widgetSection.Default(), SectionValue(nil, widgetSection))

	w := widgetSection.Default()
	w.Size = 0
	SetSectionValue(cfg, widgetSection, w)
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.widget.size")

	w.Size = 42
	SetSectionValue(cfg, widgetSection, w)
	var got widgetConfig
	app := fxtest.New(t, fx.NopLogger, Module, Supply(cfg), ProvideSection(widgetSection), fx.Populate(&got))
	defer app.RequireStart().RequireStop()
	assert.Equal(t, 42, got.Size)
}

func TestProvideSectionLoadsInsideGraph(t *testing.T) {
	p := writeYAML(t, "mmmq:\n  widget:\n    size: 7\n")
	var got widgetConfig
	var cfg *Config
	app := fxtest.New(t, fx.NopLogger, Module,
		fx.Supply(LoadOptions{Path: p, PathExplicit: true, Environ: []string{"MMMQ_WIDGET_URL=http://e:2"}}),
		ProvideSection(widgetSection),
		fx.Populate(&got, &cfg))
	defer app.RequireStart().RequireStop()
	assert.Equal(t, 7, got.Size)
	assert.Equal(t, "http://e:2", got.URL)
	assert.Equal(t, got, SectionValue(cfg, widgetSection))

	// The same YAML without the section registered is refused.
	bad := fx.New(fx.NopLogger, Module,
		fx.Supply(LoadOptions{Path: p, PathExplicit: true, Environ: []string{}}),
		fx.Invoke(func(*Config) {}))
	require.Error(t, bad.Err())
	assert.Contains(t, bad.Err().Error(), `unknown key "mmmq.widget.size"`)
}

func TestModuleProvidesSections(t *testing.T) {
	in := Default()
	in.Server.Port = 9125
	SetSectionValue(in, testDispatchers, []testDispatcher{{Name: "d", Host: "http://h:1", Patterns: []string{"a.*"}}})
	var (
		srv  ServerConfig
		lg   LoggingConfig
		dsps []testDispatcher
	)
	app := fxtest.New(t, fx.NopLogger, Module, ProvideSection(testDispatchers), Supply(in), fx.Populate(&srv, &lg, &dsps))
	defer app.RequireStart().RequireStop()
	assert.Equal(t, 9125, srv.Port)
	assert.Equal(t, Default().Logging, lg)
	require.Len(t, dsps, 1)
	assert.Equal(t, "/mmmq/messages", dsps[0].Path, "a list section, normalized")
}

func TestAbsentStockPluginKeys(t *testing.T) {
	// At their documented defaults: warnings naming key and plugin.
	cfg, err := load(t, `
mmmq:
  lineproto: {addr: "", max-line-bytes: 1114112}
  metrics:
    enabled:
`, "MMMQ_PROFILING_ADDR=")
	require.NoError(t, err)
	require.Len(t, cfg.Warnings, 4)
	byKey := map[string]Warning{}
	for _, w := range cfg.Warnings {
		byKey[w.Key] = w
	}
	assert.Equal(t, "MMMQ_PROFILING_ADDR", byKey["mmmq.profiling.addr"].Var)
	assert.Equal(t, "github.com/mmmq/mmmq/plugins/lineproto", byKey["mmmq.lineproto.max-line-bytes"].Plugin)
	assert.Equal(t, `config: mmmq.profiling.addr is ignored: this binary does not contain plugin github.com/mmmq/mmmq/plugins/profiling, which reads it (the value is its default) (from MMMQ_PROFILING_ADDR)`,
		byKey["mmmq.profiling.addr"].String())

	// Any other value: an error naming the key and the plugin.
	for _, tc := range []struct{ yaml, env, key, plugin string }{
		{"mmmq: {profiling: {addr: '127.0.0.1:6060'}}", "", "mmmq.profiling.addr", "plugins/profiling"},
		{"mmmq: {lineproto: {max-line-bytes: 2048}}", "", "mmmq.lineproto.max-line-bytes", "plugins/lineproto"},
		{"mmmq: {metrics: {enabled: false}}", "", "mmmq.metrics.enabled", "plugins/metrics"},
		{"mmmq: {metrics: {enabled: yes please}}", "", "mmmq.metrics.enabled", "plugins/metrics"},
		{"", "MMMQ_LINEPROTO_ADDR=:7000", "mmmq.lineproto.addr", "plugins/lineproto"},
		{"mmmq: {auth: {protect-metrics: false}}", "", "mmmq.auth.protect-metrics", "modules/auth"},
	} {
		env := []string{}
		if tc.env != "" {
			env = append(env, tc.env)
		}
		_, err := load(t, tc.yaml, env...)
		require.Error(t, err, tc.key)
		assert.ErrorIs(t, err, ErrPluginMissing)
		assert.ErrorIs(t, err, ErrUnknownKey)
		kind, _, _ := strings.Cut(tc.plugin, "s/")
		assert.Contains(t, err.Error(), "config: "+tc.key+": is read by "+kind+" github.com/mmmq/mmmq/"+tc.plugin+", which this binary does not contain")
	}

	// A credential, and a list's entries (which may hold one), are never
	// shown.
	_, err = load(t, "mmmq: {jetstream: {password: hunter2}, auth: {tokens: [{name: a, token-file: /s3cret}]}}")
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hunter2")
	assert.NotContains(t, err.Error(), "s3cret")
	assert.Contains(t, err.Error(), "(got a value, not shown)")
	assert.Contains(t, err.Error(), "config: mmmq.auth.tokens: is read by module github.com/mmmq/mmmq/modules/auth, which this binary does not contain; remove the key or set it to its default [] (got a list of 1)")

	// An unknown key under a stock plugin's prefix stays unknown.
	_, err = load(t, "mmmq: {lineproto: {adr: x}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.lineproto.adr"`)

	// A value that cannot be parsed names the variable and the key.
	_, err = load(t, "", "MMMQ_METRICS_ENABLED=maybe")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.metrics.enabled: not a boolean")
	assert.Contains(t, err.Error(), "MMMQ_METRICS_ENABLED")
}

func TestStockSectionRegisteredReplacesStockKeys(t *testing.T) {
	type metricsLike struct {
		Enabled bool `koanf:"enabled"`
		Extra   int  `koanf:"extra"`
	}
	sec := NewSection("metrics", metricsLike{Enabled: true}, nil)
	cfg, err := Load(LoadOptions{Path: writeYAML(t, "mmmq: {metrics: {enabled: false, extra: 2}}"), PathExplicit: true,
		Environ: []string{}, Sections: []Section{sec}})
	require.NoError(t, err)
	assert.Empty(t, cfg.Warnings)
	assert.Equal(t, metricsLike{Enabled: false, Extra: 2}, SectionValue(cfg, sec))
}

func TestCheckHelpers(t *testing.T) {
	require.NoError(t, CheckListenAddr("k", ""))
	require.NoError(t, CheckListenAddr("k", "127.0.0.1:0"))
	err := CheckListenAddr("mmmq.x.addr", "nope")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Contains(t, err.Error(), "config: mmmq.x.addr: ")
	require.NoError(t, CheckIntRange("k", 5, 1, math.MaxInt64))
	assert.EqualError(t, CheckIntRange("k", 0, 1, math.MaxInt64), "config: k: must be at least 1; got 0")
	assert.EqualError(t, InvalidValue("mmmq.x.y", "bad %d", 3), "config: mmmq.x.y: bad 3")
	require.NoError(t, CheckDurationRange("k", time.Second, time.Second, 24*time.Hour))
	assert.EqualError(t, CheckDurationRange("k", 500*time.Millisecond, time.Second, 24*time.Hour), "config: k: must be between 1s and 24h; got 500ms")
	assert.EqualError(t, CheckDurationRange("k", 25*time.Hour+90*time.Second, time.Minute, 24*time.Hour), "config: k: must be between 1m and 24h; got 25h1m30s")
}

// shelfSection has a list of structs, with a list inside its elements.
type shelfItem struct {
	Name  string         `koanf:"name"`
	Every *time.Duration `koanf:"every"`
	Tags  []shelfTag     `koanf:"tags"`
}

type shelfTag struct {
	Key string `koanf:"key"`
}

var shelfSection = NewSection("broker.shelf", struct {
	Limit int         `koanf:"limit"`
	Items []shelfItem `koanf:"items"`
}{Limit: 1}, nil)

// A section's list of structs is checked as the core lists are: unknown
// keys inside its elements, nested lists included, name their full key; an
// element that is not a mapping says what it must be (the element's keys);
// the list is file only, and its variable says so.
func TestSectionListOfStructs(t *testing.T) {
	load := func(body string, env ...string) (*Config, error) {
		return Load(LoadOptions{Path: writeYAML(t, body), PathExplicit: true, Environ: env, Sections: []Section{shelfSection}})
	}
	cfg, err := load("mmmq: {broker: {shelf: {items: [{name: a, every: 2s, tags: [{key: k}]}]}}}")
	require.NoError(t, err)
	two := 2 * time.Second
	assert.Equal(t, []shelfItem{{Name: "a", Every: &two, Tags: []shelfTag{{Key: "k"}}}}, SectionValue(cfg, shelfSection).Items)

	_, err = load("mmmq: {broker: {shelf: {items: [{name: a, evry: 2s}, {name: b, tags: [{key: k, kye: x}]}]}}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown key "mmmq.broker.shelf.items[0].evry"`)
	assert.Contains(t, err.Error(), `unknown key "mmmq.broker.shelf.items[1].tags[0].kye"`)

	_, err = load("mmmq: {broker: {shelf: {items: [x]}}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.broker.shelf.items[0]: must be a mapping with name, every and tags")

	_, err = load("", "MMMQ_BROKER_SHELF_ITEMS_0_NAME=a")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.broker.shelf.items can only be set in the YAML file")
	assert.NotContains(t, Keys(shelfSection), "mmmq.broker.shelf.items")
}
