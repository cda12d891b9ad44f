package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReloadRereadsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mmmq.yaml")
	write := func(name string) {
		body := "mmmq:\n  broker:\n    dispatchers: [{name: " + name + "}]\n"
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	}
	write("first")
	cfg, err := Load(LoadOptions{Path: path, PathExplicit: true, Environ: []string{}, Sections: []Section{testDispatchers}})
	require.NoError(t, err)
	write("second")
	again, ok, err := Supplied(cfg).Reload()
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, "second", SectionValue(again, testDispatchers)[0].Name)
	assert.Equal(t, "first", SectionValue(cfg, testDispatchers)[0].Name, "the loaded Config is not changed")

	require.NoError(t, os.WriteFile(path, []byte("mmmq:\n  broker:\n    dispatchers: [{nom: x}]\n"), 0o600))
	_, ok, err = cfg.Reload()
	assert.True(t, ok)
	assert.Error(t, err)

	require.NoError(t, os.Remove(path))
	cfg, err = Load(LoadOptions{Path: writeYAML(t, "mmmq:\n  broker:\n    dispatchers: [{name: x}]\n"), Environ: []string{}, Sections: []Section{testDispatchers}})
	require.NoError(t, err)
	require.NoError(t, os.Remove(cfg.loadedWith.Path))
	_, ok, err = cfg.Reload()
	assert.True(t, ok)
	assert.ErrorIs(t, err, fs.ErrNotExist, "a file read at startup and gone at reload is an error, not the defaults (mmmq.auth off)")

	_, ok, err = Default().Reload()
	assert.False(t, ok)
	assert.NoError(t, err)
}

// Supplied is the Config config.Supply would hand the application.
func Supplied(cfg *Config) *Config { c := *cfg; return &c }

// plain is cfg without what Load remembers for Reload, to compare a loaded
// Config with one built in code.
func plain(cfg *Config) *Config {
	c := *cfg
	c.loadedWith = nil
	c.set = nil
	c.sections = nil // compared with SectionValue
	return &c
}
