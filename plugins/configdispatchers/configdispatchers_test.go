package configdispatchers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/dispatcher/dispatchertest"
)

// load reads body as the configuration file of a binary with this plugin
// and the dispatcher module (whose mmmq.broker.dispatch the entries
// inherit from), with an empty environment.
func load(t *testing.T, body string) (*config.Config, error) {
	t.Helper()
	return configtest.Load(t, body, nil, Section, dispatcher.ConfigSection)
}

// entryYAML is one valid dispatcher with field overridden.
func entryYAML(field string) string {
	fields := map[string]string{
		"name":     "name: d",
		"host":     "host: http://localhost:8081",
		"patterns": "patterns: [order.**]",
	}
	k, _, _ := strings.Cut(field, ":")
	fields[k] = field
	var b strings.Builder
	b.WriteString("mmmq:\n  broker:\n    dispatchers:\n      -")
	for _, k := range []string{"name", "host", "patterns", "path", "timeout", "commit"} {
		if f, ok := fields[k]; ok {
			b.WriteString(" " + f + "\n       ")
		}
	}
	return b.String()
}

func TestBuildLabelsTheSource(t *testing.T) {
	ds, err := Build(Entries{
		{Name: "a", Host: "http://localhost:8081", Patterns: []string{"x.*"}},
		{Name: "b", Host: "http://localhost:8082", Patterns: []string{"y.**"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"config mmmq.broker.dispatchers[0]", "config mmmq.broker.dispatchers[1]"} {
		if got := ds[i].Source(); got != want {
			t.Errorf("dispatcher %d: Source() = %q, want %q", i, got, want)
		}
	}
}

// Loaded entries take mmmq.broker.dispatch's path and timeout and the
// element defaults where they set nothing, and keep what they set.
func TestEntriesNormalized(t *testing.T) {
	cfg, err := load(t, `
mmmq:
  broker:
    dispatch:
      path: /in
    dispatchers:
      - name: order-dispatcher
        host: http://localhost:8081
        patterns: ["order.**", "payment.*"]
      - name: audit
        host: https://audit.example:443
        patterns: ["**"]
        path: /audit
        timeout: 5s
        commit: {policy: interval, interval: 250ms, max-count: 10}
`)
	require.NoError(t, err)
	assert.Equal(t, Entries{
		{Name: "order-dispatcher", Host: "http://localhost:8081", Patterns: []string{"order.**", "payment.*"},
			Path: "/in", Timeout: dispatcher.Duration(30 * time.Second), Commit: dispatcher.DefaultSettings.Commit},
		{Name: "audit", Host: "https://audit.example:443", Patterns: []string{"**"}, Path: "/audit",
			Timeout: dispatcher.Duration(5 * time.Second),
			Commit:  dispatcher.CommitSettings{Policy: dispatcher.Interval, Interval: dispatcher.Duration(250 * time.Millisecond), MaxCount: 10}},
	}, config.SectionValue(cfg, Section))
}

// Every rule of dispatcher.Settings.Validate reaches the file's entries,
// each problem named by its full key.
func TestInvalidEntryNamesKey(t *testing.T) {
	tests := []struct {
		name, yaml, key string
	}{
		{"not a list", "mmmq: {broker: {dispatchers: x}}", "mmmq.broker.dispatchers"},
		{"not a map", "mmmq: {broker: {dispatchers: [x]}}", "mmmq.broker.dispatchers[0]"},
		{"name", entryYAML("name: .hidden"), "mmmq.broker.dispatchers[0].name"},
		{"name slash", entryYAML("name: a/b"), "mmmq.broker.dispatchers[0].name"},
		{"name long", entryYAML("name: " + strings.Repeat("a", 201)), "mmmq.broker.dispatchers[0].name"},
		{"host missing", entryYAML("host: ''"), "mmmq.broker.dispatchers[0].host"},
		{"host scheme", entryYAML("host: ftp://h:21"), "mmmq.broker.dispatchers[0].host"},
		{"host no port", entryYAML("host: http://localhost"), "mmmq.broker.dispatchers[0].host"},
		{"host path", entryYAML("host: http://localhost:8081/x"), "mmmq.broker.dispatchers[0].host"},
		{"host slash", entryYAML("host: http://localhost:8081/"), "mmmq.broker.dispatchers[0].host"},
		{"host query", entryYAML("host: http://localhost:8081?a=b"), "mmmq.broker.dispatchers[0].host"},
		{"host bare", entryYAML("host: localhost:8081"), "mmmq.broker.dispatchers[0].host"},
		{"host port", entryYAML("host: http://localhost:0"), "mmmq.broker.dispatchers[0].host"},
		{"patterns", entryYAML("patterns: []"), "mmmq.broker.dispatchers[0].patterns"},
		{"pattern empty", entryYAML("patterns: ['']"), "mmmq.broker.dispatchers[0].patterns[0]"},
		{"patterns scalar", entryYAML("patterns: order.*"), "mmmq.broker.dispatchers[0].patterns"},
		{"path", entryYAML("path: x"), "mmmq.broker.dispatchers[0].path"},
		{"timeout", entryYAML("timeout: -1s"), "mmmq.broker.dispatchers[0].timeout"},
		{"timeout bare number", entryYAML("timeout: 30"), "mmmq.broker.dispatchers[0].timeout"},
		{"policy", entryYAML("commit: {policy: sometimes}"), "mmmq.broker.dispatchers[0].commit.policy"},
		{"interval", entryYAML("commit: {interval: -1s}"), "mmmq.broker.dispatchers[0].commit.interval"},
		{"max-count", entryYAML("commit: {max-count: -5}"), "mmmq.broker.dispatchers[0].commit.max-count"},
		{"duplicate", `
mmmq:
  broker:
    dispatchers:
      - {name: a, host: "http://h:1", patterns: [x]}
      - {name: a, host: "http://h:2", patterns: [y]}
`, "mmmq.broker.dispatchers[1].name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.yaml)
			require.Error(t, err)
			t.Log(err)
			assert.ErrorIs(t, err, config.ErrInvalidValue)
			var ke *config.KeyError
			require.ErrorAs(t, err, &ke)
			assert.Contains(t, err.Error(), "config: "+tt.key+":")
		})
	}
}

// An unknown key of an entry is named in full.
func TestUnknownEntryKeyNamesKey(t *testing.T) {
	_, err := load(t, "mmmq: {broker: {dispatchers: [{name: a, hots: 'http://localhost:1', patterns: [x]}]}}")
	require.Error(t, err)
	assert.ErrorIs(t, err, config.ErrUnknownKey)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.broker.dispatchers[0].hots"`)
}

// An inherited path or timeout that is invalid is reported once, under
// mmmq.broker.dispatch, not again under every entry that inherits it.
func TestInheritedProblemReportedOnce(t *testing.T) {
	tests := []struct {
		name, yaml, key string
	}{
		{"path", "mmmq: {broker: {dispatch: {path: messages}, dispatchers: [{name: d, host: 'http://h:1', patterns: [x]}]}}", "mmmq.broker.dispatch.path"},
		{"timeout", "mmmq: {broker: {dispatch: {timeout: -1s}, dispatchers: [{name: d, host: 'http://h:1', patterns: [x]}]}}", "mmmq.broker.dispatch.timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.yaml)
			require.Error(t, err)
			errs := config.Problems(err)
			require.Len(t, errs, 1, "want only the first cause, got: %v", err)
			assert.Contains(t, errs[0].Error(), "config: "+tt.key+":")
		})
	}
	// The entry's own invalid path is still its own problem.
	_, err := load(t, "mmmq: {broker: {dispatch: {path: messages}, dispatchers: [{name: d, host: 'http://h:1', patterns: [x], path: y}]}}")
	require.Error(t, err)
	assert.Len(t, config.Problems(err), 2, "%v", err)
	assert.Contains(t, err.Error(), "config: mmmq.broker.dispatchers[0].path:")
}

// A topic pattern serve would refuse fails validation, naming its key and
// saying why with the parser's own words, so `mmmq config check` never
// says OK for a configuration serve refuses.
func TestPatternsValidatedAsServeDoes(t *testing.T) {
	for _, p := range []string{"a..b", "a.b*", "***", "/etc", "a b", ".", "*a", "a.", "ä"} {
		t.Run(p, func(t *testing.T) {
			_, err := load(t, entryYAML(fmt.Sprintf("patterns: [order.**, %q]", p)))
			require.Error(t, err)
			assert.ErrorIs(t, err, config.ErrInvalidValue)
			assert.Contains(t, err.Error(), fmt.Sprintf("config: mmmq.broker.dispatchers[0].patterns[1]: invalid topic pattern %q: ", p))
		})
	}
	_, err := load(t, `mmmq: {broker: {dispatchers: [{name: d, host: "http://h:1", patterns: ["order.**", "*", "a.**.b"]}]}}`)
	require.NoError(t, err, "valid patterns")
}

// The tls entry: every key decodes; the checks that need no file.
func TestEntryTLSKeys(t *testing.T) {
	const entry = "mmmq: {broker: {dispatchers: [{name: d, host: %s, patterns: [a], tls: %s}]}}"
	cfg, err := load(t, fmt.Sprintf(entry, "https://h:1", "{ca-file: /ca, cert-file: /c, key-file: /k, server-name: b, insecure-skip-verify: true}"))
	require.NoError(t, err)
	assert.Equal(t, dispatcher.TLSSettings{CAFile: "/ca", CertFile: "/c", KeyFile: "/k", ServerName: "b", InsecureSkipVerify: true},
		config.SectionValue(cfg, Section)[0].TLS)
	for _, tc := range []struct{ host, tls, key, problem string }{
		{"http://h:1", "{ca-file: /ca}", "mmmq.broker.dispatchers[0].tls", `applies to an https host only; host is "http://h:1"`},
		{"https://h:1", "{cert-file: /c}", "mmmq.broker.dispatchers[0].tls.key-file", "must be set when tls.cert-file is set"},
		{"https://h:1", "{key-file: /k}", "mmmq.broker.dispatchers[0].tls.cert-file", "must be set when tls.key-file is set"},
		{"https://h:1", "{ca: /ca}", "", `unknown key "mmmq.broker.dispatchers[0].tls.ca"`},
	} {
		_, err := load(t, fmt.Sprintf(entry, tc.host, tc.tls))
		require.Error(t, err, tc.tls)
		want := "config: " + tc.key + ": " + tc.problem
		if tc.key == "" {
			want = tc.problem
		}
		assert.Contains(t, err.Error(), want)
	}
}

// The list is file only: a variable naming it is refused, naming the key.
func TestEntriesFileOnly(t *testing.T) {
	_, err := config.Load(config.LoadOptions{Path: "-none-", Environ: []string{"MMMQ_BROKER_DISPATCHERS_0_NAME=x"},
		Sections: []config.Section{Section, dispatcher.ConfigSection}})
	require.Error(t, err)
	assert.True(t, errors.Is(err, config.ErrUnknownKey), "%v", err)
	assert.Contains(t, err.Error(), "mmmq.broker.dispatchers can only be set in the YAML file")
}

// A binary without this plugin refuses a configuration that declares
// dispatchers (they would be silently ignored), naming the plugin; an
// empty list only warns.
func TestWithoutThePluginEntriesAreRefused(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(entryYAML("name: d")), 0o600))
	_, err := config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: []string{}, Sections: []config.Section{dispatcher.ConfigSection}})
	require.Error(t, err)
	assert.ErrorIs(t, err, config.ErrPluginMissing)
	assert.Contains(t, err.Error(), "mmmq.broker.dispatchers: is read by plugin github.com/mmmq/mmmq/plugins/configdispatchers")

	require.NoError(t, os.WriteFile(p, []byte("mmmq: {broker: {dispatchers: []}}\n"), 0o600))
	cfg, err := config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: []string{}, Sections: []config.Section{dispatcher.ConfigSection}})
	require.NoError(t, err)
	require.Len(t, cfg.Warnings, 1)
	assert.Equal(t, Key, cfg.Warnings[0].Key)
}

// Every dispatcher setting's error names its key in the configuration
// file too: an entry with one bad value (the admin API's table) fails the
// load with the full key, "mmmq.broker.dispatchers[0].pause-after".
func TestEverySettingErrorNamesItsKey(t *testing.T) {
	for _, tc := range dispatchertest.BadSettings {
		member := tc.Value
		head, rest, nested := strings.Cut(tc.Field, ".")
		if nested {
			member = fmt.Sprintf(`{%q: %s}`, rest, tc.Value)
		}
		body := fmt.Sprintf("mmmq:\n  broker:\n    dispatchers:\n      - {name: d, host: \"https://127.0.0.1:1\", patterns: [a], %q: %s}\n", head, member)
		_, err := load(t, body)
		if want := "mmmq.broker.dispatchers[0]." + tc.Field; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s = %s: %v; want an error naming %s", tc.Field, tc.Value, err, want)
		}
	}
}
