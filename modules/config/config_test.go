package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeYAML writes body to a temp file and returns its path.
func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// load reads body as an explicit file with the given environment.
func load(t *testing.T, body string, env ...string) (*Config, error) {
	t.Helper()
	if env == nil {
		env = []string{}
	}
	return Load(LoadOptions{Path: writeYAML(t, body), PathExplicit: true, Environ: env, Sections: []Section{dispatchSection, testDispatchers}})
}

func TestDefaultValidates(t *testing.T) {
	require.NoError(t, Default().Validate())
}

func TestLoadNoFileGivesDefaults(t *testing.T) {
	cfg, err := Load(LoadOptions{Path: filepath.Join(t.TempDir(), "absent.yaml"), Environ: []string{}})
	require.NoError(t, err)
	assert.Equal(t, Default(), plain(cfg))
}

func TestLoadMissingExplicitFileFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(LoadOptions{Path: p, PathExplicit: true, Environ: []string{}})
	require.Error(t, err)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Contains(t, err.Error(), p)
}

func TestLoadMissingMMMQConfigFileFails(t *testing.T) {
	p := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(LoadOptions{Environ: []string{"MMMQ_CONFIG=" + p}})
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestLoadMMMQConfigNamesFile(t *testing.T) {
	p := writeYAML(t, "server:\n  port: 9001\n")
	cfg, err := Load(LoadOptions{Path: "ignored-default.yaml", Environ: []string{"MMMQ_CONFIG=" + p}})
	require.NoError(t, err)
	assert.Equal(t, 9001, cfg.Server.Port)

	// An explicit path beats $MMMQ_CONFIG.
	q := writeYAML(t, "server:\n  port: 9002\n")
	cfg, err = Load(LoadOptions{Path: q, PathExplicit: true, Environ: []string{"MMMQ_CONFIG=" + p}})
	require.NoError(t, err)
	assert.Equal(t, 9002, cfg.Server.Port)
}

func TestYAMLOverridesDefaults(t *testing.T) {
	cfg, err := load(t, `
server:
  port: 9090
  read-timeout: 1m30s
logging:
  format: console
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
        commit:
          policy: interval
          interval: 250ms
          max-count: 10
`)
	require.NoError(t, err)

	want := Default()
	want.Server.Port = 9090
	want.Server.ReadTimeout = 90 * time.Second
	want.Logging.Format = FormatConsole
	ds := SectionValue(cfg, testDispatchers)
	require.Len(t, ds, 2)
	// Inherited from dispatch.* and the element defaults.
	assert.Equal(t, "/in", ds[0].Path)
	assert.Equal(t, testDuration(30*time.Second), ds[0].Timeout)
	assert.Equal(t, "every-message", ds[0].Commit.Policy)
	assert.Equal(t, testDuration(time.Second), ds[0].Commit.Interval)
	assert.Equal(t, 1000, ds[0].Commit.MaxCount)
	// Its own values.
	assert.Equal(t, []string{"**"}, ds[1].Patterns)
	assert.Equal(t, "/audit", ds[1].Path)
	assert.Equal(t, testDuration(5*time.Second), ds[1].Timeout)
	assert.Equal(t, "interval", ds[1].Commit.Policy)
	assert.Equal(t, testDuration(250*time.Millisecond), ds[1].Commit.Interval)
	assert.Equal(t, 10, ds[1].Commit.MaxCount)
	assert.Equal(t, want, plain(cfg))
	assert.Equal(t, "/in", SectionValue(cfg, dispatchSection).Path)
}

func TestYAMLNullSectionKeepsDefaults(t *testing.T) {
	cfg, err := load(t, "server:\nlogging:\n  level:\n")
	require.NoError(t, err)
	assert.Equal(t, Default(), plain(cfg))
}

func TestEmptyYAMLFile(t *testing.T) {
	cfg, err := load(t, "# nothing\n")
	require.NoError(t, err)
	assert.Equal(t, Default(), plain(cfg))
}

func TestEnvOverridesYAML(t *testing.T) {
	cfg, err := load(t, `
server:
  port: 9090
  host: yaml.example
`,
		"MMMQ_SERVER_PORT=7070",
		"MMMQ_LOGGING_LEVEL=debug",
		"MMMQ_SERVER_IDLE_TIMEOUT=2m",
		"MMMQ_SERVER_HOST=",
		"UNRELATED=1",
		"MMMQ_CONFIG=", // empty: unset
	)
	require.NoError(t, err)
	assert.Equal(t, 7070, cfg.Server.Port)
	assert.Equal(t, "", cfg.Server.Host, "an empty variable sets the empty string")
	assert.Equal(t, "debug", cfg.Logging.Level)
	assert.Equal(t, 2*time.Minute, cfg.Server.IdleTimeout)
}

func TestEnvRuleCoversEveryKey(t *testing.T) {
	keys := Keys()
	require.NotEmpty(t, keys)
	assert.NotContains(t, keys, dispatchersKey)
	for _, key := range keys {
		name := EnvVar(key)
		assert.True(t, strings.HasPrefix(name, "MMMQ_"), key)
		assert.Equal(t, key, envKeys[name].key, name)
	}
	assert.Equal(t, "MMMQ_BROKER_STORAGE_ROOT_DIR", EnvVar("mmmq.broker.storage.root-dir"))
	assert.Equal(t, "MMMQ_SERVER_PORT", EnvVar("server.port"))
	assert.Equal(t, "MMMQ_LOGGING_LEVEL", EnvVar("logging.level"))
}

func TestUnknownYAMLKeyNamesKey(t *testing.T) {
	_, err := load(t, `
mmmq:
  broker:
    segmnt:
      max-bytes: 1024
server:
  prot: 1
`)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.broker.segmnt.max-bytes"`)
	assert.Contains(t, err.Error(), `config: unknown key "server.prot"`)
}

func TestUnknownDispatcherKeyNamesKey(t *testing.T) {
	_, err := load(t, `
mmmq:
  broker:
    dispatchers:
      - name: a
        hots: http://localhost:1
        patterns: [x]
`)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.broker.dispatchers[0].hots"`)
}

func TestSectionGivenScalarFails(t *testing.T) {
	_, err := load(t, "server: 8080\n")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidValue)
	assert.Contains(t, err.Error(), "config: server: must be a mapping")
}

// $MMMQ_SERVER is the URL the admin commands talk to: a broker started in
// the same shell does not refuse it, but a near miss is still refused.
func TestServerURLVariableIsNotAKey(t *testing.T) {
	cfg, err := load(t, "", "MMMQ_SERVER=http://broker:8080", "MMMQ_SERVER_PORT=7070")
	require.NoError(t, err)
	assert.Equal(t, 7070, cfg.Server.Port)
	_, err = load(t, "", "MMMQ_SERVERS=http://broker:8080")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), "MMMQ_SERVERS")
}

// The crash tests' variables (MMMQ_LAZYFS, MMMQ_LONG) name no key: a
// broker started by `make test` with them set does not refuse them, while
// a near miss is still refused.
func TestTestVariablesAreNotKeys(t *testing.T) {
	_, err := load(t, "", "MMMQ_LAZYFS=/tmp/lazyfs-build/bin/lazyfs", "MMMQ_LONG=1")
	require.NoError(t, err)
	_, err = load(t, "", "MMMQ_LAZYFS_BIN=/x")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), "MMMQ_LAZYFS_BIN")
}

func TestUnknownEnvVarNamesIt(t *testing.T) {
	_, err := load(t, "", "MMMQ_BROKER_SEGMNT_MAX_BYTES=1")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), "MMMQ_BROKER_SEGMNT_MAX_BYTES")

	_, err = load(t, "", "MMMQ_BROKER_DISPATCHERS=x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MMMQ_BROKER_DISPATCHERS")
	assert.Contains(t, err.Error(), "only be set in the YAML file")
}

func TestInvalidEnvValueNamesVarAndKey(t *testing.T) {
	for _, kv := range []string{
		"MMMQ_SERVER_PORT=http",
		"MMMQ_SERVER_READ_TIMEOUT=30",
		"MMMQ_SERVER_MAX_CONNECTIONS=many",
	} {
		_, err := load(t, "", kv)
		require.Error(t, err, kv)
		name, _, _ := strings.Cut(kv, "=")
		assert.ErrorIs(t, err, ErrInvalidValue)
		assert.Contains(t, err.Error(), name)
		assert.Contains(t, err.Error(), envKeys[name].key)
	}

	// A value that parses but fails validation is attributed to its variable.
	_, err := load(t, "", "MMMQ_SERVER_PORT=70000")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: server.port: must be between 0 and 65535; got 70000 (from MMMQ_SERVER_PORT)")
}

func TestInvalidValuesNameKey(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		key  string // expected in the error
	}{
		{"port negative", "server: {port: -1}", "server.port"},
		{"port high", "server: {port: 65536}", "server.port"},
		{"port string", "server: {port: http}", "server.port"},
		{"duration zero", "server: {read-timeout: 0s}", "server.read-timeout"},
		{"duration negative", "server: {shutdown-timeout: -1s}", "server.shutdown-timeout"},
		{"duration bare number", "server: {idle-timeout: 30}", "server.idle-timeout"},
		{"duration garbage", "server: {write-timeout: soon}", "server.write-timeout"},
		{"body small", "server: {max-body-bytes: 10}", "server.max-body-bytes"},
		{"level", "logging: {level: loud}", "logging.level"},
		{"format", "logging: {format: xml}", "logging.format"},
		{"port fraction", "server: {port: 80.5}", "server.port"},
		{"dispatchers not a list", "mmmq: {broker: {dispatchers: x}}", "mmmq.broker.dispatchers"},
		{"dispatcher not a map", "mmmq: {broker: {dispatchers: [x]}}", "mmmq.broker.dispatchers[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.yaml)
			require.Error(t, err)
			t.Log(err)
			assert.ErrorIs(t, err, ErrInvalidValue)
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			assert.Contains(t, err.Error(), "config: "+tt.key+":")
		})
	}
}

func TestValidateJoinsAllProblems(t *testing.T) {
	cfg := Default()
	cfg.Server.Port = -1
	cfg.Logging.Format = "xml"
	err := cfg.Validate()
	require.Error(t, err)
	assert.Len(t, flatten(err), 2)
	assert.Contains(t, err.Error(), "server.port")
	assert.Contains(t, err.Error(), "logging.format")
}

// TestCommittedYAMLEqualsDefault is the defaults test: configs/mmmq.yaml,
// loaded with an empty environment, must equal Default(), and its stock
// plugin keys (read here without the plugins) must equal their documented
// defaults (StockPluginKeys), which only warns. The app package checks the
// same file with the plugins' sections.
func TestCommittedYAMLEqualsDefault(t *testing.T) {
	p := filepath.Join("..", "..", "configs", "mmmq.yaml")
	cfg, err := Load(LoadOptions{Path: p, PathExplicit: true, Environ: []string{}})
	require.NoError(t, err)
	var warned []string
	for _, w := range cfg.Warnings {
		warned = append(warned, w.Key)
	}
	var stock, lists []string
	for _, k := range StockPluginKeys() {
		if _, isList := k.Default.([]any); isList {
			lists = append(lists, k.Key) // empty by default: shown commented out
			continue
		}
		stock = append(stock, k.Key)
	}
	assert.ElementsMatch(t, stock, warned, "every stock plugin key is in the file, at its default")
	cfg.Warnings = nil
	assert.Equal(t, Default(), plain(cfg))

	// Every key is written out (not merely defaulted), so the file documents it.
	raw, err := os.ReadFile(p)
	require.NoError(t, err)
	for _, key := range append(Keys(), stock...) {
		last := key[strings.LastIndex(key, ".")+1:]
		assert.Contains(t, string(raw), "\n"+strings.Repeat(" ", 2*strings.Count(key, "."))+last+":", "configs/mmmq.yaml lacks %s", key)
	}
	for _, key := range lists {
		last := key[strings.LastIndex(key, ".")+1:]
		assert.Contains(t, string(raw), "\n"+strings.Repeat(" ", 2*strings.Count(key, "."))+"# "+last+":", "configs/mmmq.yaml lacks the list %s (commented out)", key)
	}
}

func TestKeyErrorUnwrap(t *testing.T) {
	err := error(unknownKey("a.b"))
	assert.True(t, errors.Is(err, ErrUnknownKey))
	assert.False(t, errors.Is(err, ErrInvalidValue))
	assert.Equal(t, `config: unknown key "a.b"`, err.Error())
}

func TestLoadReadsDefaultPathWhenPresent(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "configs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, DefaultPath), []byte("server:\n  port: 9555\n"), 0o600))
	t.Chdir(dir)
	cfg, err := Load(LoadOptions{Environ: []string{}})
	require.NoError(t, err)
	assert.Equal(t, 9555, cfg.Server.Port)
}
