package config

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSettingsNameEachKeysSource(t *testing.T) {
	path := writeYAML(t, `
server:
  port: 9090
logging:
  level: warn
mmmq:
  broker:
    dispatch:
      path: /in
    dispatchers:
      - name: d
        host: http://localhost:8081
        patterns: [order.**]
        commit: {policy: interval}
  widget:
    size: 20
`)
	eff, err := LoadEffective(LoadOptions{Path: path, PathExplicit: true, Sections: []Section{widgetSection, dispatchSection, testDispatchers},
		Environ: []string{"MMMQ_LOGGING_LEVEL=debug", "MMMQ_BROKER_DISPATCH_TIMEOUT=5s", "MMMQ_WIDGET_DEEP_ON=true", "MMMQ_SERVICE_HOST=10.0.0.1"}})
	require.NoError(t, err)
	assert.Equal(t, path, eff.File)
	assert.Equal(t, []string{"MMMQ_SERVICE_HOST"}, eff.Config.IgnoredVars)
	assert.Equal(t, 9090, eff.Config.Server.Port)

	got := map[string]Setting{}
	var order []string
	for _, s := range eff.Settings {
		got[s.Key] = s
		order = append(order, s.Key)
	}
	want := []struct {
		key    string
		value  any
		kind   SourceKind
		source string
	}{
		{"server.port", 9090, SourceFile, path},
		{"server.host", "", SourceDefault, "default"},
		{"logging.level", "debug", SourceEnv, "MMMQ_LOGGING_LEVEL"},
		{"mmmq.broker.dispatch.path", "/in", SourceFile, path},
		{"mmmq.broker.dispatch.timeout", 5 * time.Second, SourceEnv, "MMMQ_BROKER_DISPATCH_TIMEOUT"},
		{"mmmq.broker.dispatchers[0].name", "d", SourceFile, path},
		{"mmmq.broker.dispatchers[0].patterns", []string{"order.**"}, SourceFile, path},
		{"mmmq.broker.dispatchers[0].commit.policy", "interval", SourceFile, path},
		{"mmmq.broker.dispatchers[0].commit.max-count", 1000, SourceDefault, "default"},
		// Inherited from mmmq.broker.dispatch: that key's source.
		{"mmmq.broker.dispatchers[0].path", "/in", SourceFile, "mmmq.broker.dispatch.path (" + path + ")"},
		{"mmmq.broker.dispatchers[0].timeout", testDuration(5 * time.Second), SourceEnv, "mmmq.broker.dispatch.timeout (MMMQ_BROKER_DISPATCH_TIMEOUT)"},
		{"mmmq.widget.size", 20, SourceFile, path},
		{"mmmq.widget.deep.on", true, SourceEnv, "MMMQ_WIDGET_DEEP_ON"},
		{"mmmq.widget.every", time.Second, SourceDefault, "default"},
	}
	for _, w := range want {
		s, ok := got[w.key]
		if !assert.True(t, ok, "missing %s", w.key) {
			continue
		}
		assert.Equal(t, w.value, s.Value, w.key)
		assert.Equal(t, w.kind, s.Kind, w.key)
		assert.Equal(t, w.source, s.Source(), w.key)
	}
	// Every scalar key once, in the order of the struct fields, the
	// sections after the core keys.
	for _, key := range Keys(widgetSection) {
		assert.Contains(t, got, key)
	}
	assert.Len(t, order, len(got), "no key twice")
	assert.Equal(t, "server.port", order[0])
	assert.Equal(t, "mmmq.widget.deep.on", order[len(order)-1])
	assert.NotContains(t, got, "mmmq.broker.dispatchers", "a non-empty list is shown by element")

	// Without a file, everything is a default; an empty list is one setting.
	eff, err = LoadEffective(LoadOptions{Path: filepath.Join(t.TempDir(), "absent.yaml"), Environ: []string{}, Sections: []Section{testDispatchers}})
	require.NoError(t, err)
	assert.Equal(t, "", eff.File)
	assert.Equal(t, Default(), plain(eff.Config))
	for _, s := range eff.Settings {
		assert.Equal(t, SourceDefault, s.Kind, s.Key)
	}
	assert.Contains(t, eff.Settings, Setting{Key: "mmmq.broker.dispatchers", Value: []testDispatcher(nil), Kind: SourceDefault})

	// Load's errors, unchanged.
	_, err = LoadEffective(LoadOptions{Environ: []string{"MMMQ_SERVER_PROT=1"}, Path: "absent.yaml"})
	assert.ErrorIs(t, err, ErrUnknownKey)
}
