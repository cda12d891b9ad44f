package config

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
)

func TestModuleLoadsFromSuppliedOptions(t *testing.T) {
	p := writeYAML(t, "server:\n  port: 9123\n")
	var cfg *Config
	app := fxtest.New(t,
		fx.NopLogger,
		Module,
		fx.Supply(LoadOptions{Path: p, PathExplicit: true, Environ: []string{"MMMQ_LOGGING_LEVEL=warn"}}),
		fx.Populate(&cfg),
	)
	defer app.RequireStart().RequireStop()
	assert.Equal(t, 9123, cfg.Server.Port)
	assert.Equal(t, "warn", cfg.Logging.Level)
}

func TestModuleSupply(t *testing.T) {
	in := Default()
	in.Server.Port = 9124
	SetSectionValue(in, testDispatchers, []testDispatcher{{Name: "d", Host: "http://h:1", Patterns: []string{"a.*"}}})
	var cfg *Config
	app := fxtest.New(t, fx.NopLogger, Module, Supply(in), fx.Populate(&cfg))
	defer app.RequireStart().RequireStop()
	assert.Equal(t, 9124, cfg.Server.Port)
	assert.Equal(t, "/mmmq/messages", SectionValue(cfg, testDispatchers)[0].Path, "normalized")
	assert.Empty(t, SectionValue(in, testDispatchers)[0].Path, "caller's config untouched")
}

func TestModuleSupplyInvalidFails(t *testing.T) {
	in := Default()
	in.Server.Port = -1
	app := fx.New(fx.NopLogger, Module, Supply(in), fx.Invoke(func(*Config) {}))
	require.Error(t, app.Err())
	assert.Contains(t, app.Err().Error(), "server.port")
}

func TestModuleSupplyAndOptionsConflict(t *testing.T) {
	app := fx.New(fx.NopLogger, Module, Supply(Default()), fx.Supply(LoadOptions{}), fx.Invoke(func(*Config) {}))
	require.Error(t, app.Err())
}

func TestModuleLoadErrorFailsApp(t *testing.T) {
	app := fx.New(fx.NopLogger, Module,
		fx.Supply(LoadOptions{Path: filepath.Join(t.TempDir(), "x.yaml"), PathExplicit: true, Environ: []string{}}),
		fx.Invoke(func(*Config) {}))
	require.Error(t, app.Err())
}
