package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
)

type buffer struct{ bytes.Buffer }

func (*buffer) Sync() error { return nil }

func TestNewJSON(t *testing.T) {
	cfg := config.Default()
	var buf buffer
	l, err := newLogger(cfg.Logging, &buf, false)
	require.NoError(t, err)
	l.Debug("hidden")
	l.Info("published", zap.String("topic", "order.created"), zap.Int64("offset", 17))

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1, "debug is below the default info level")
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &m))
	assert.Equal(t, "info", m["level"])
	assert.Equal(t, "published", m["msg"])
	assert.Equal(t, "order.created", m["topic"])
	assert.EqualValues(t, 17, m["offset"])
	assert.Contains(t, m, "ts")
}

func TestNewConsole(t *testing.T) {
	cfg := config.Default()
	cfg.Logging.Format = config.FormatConsole
	cfg.Logging.Level = "debug"
	var buf buffer
	l, err := newLogger(cfg.Logging, &buf, true)
	require.NoError(t, err)
	l.Debug("hello", zap.String("topic", "t"))
	out := buf.String()
	assert.Contains(t, out, "\x1b[", "colored level")
	var plain buffer
	l, err = newLogger(cfg.Logging, &plain, false)
	require.NoError(t, err)
	l.Debug("hello")
	assert.NotContains(t, plain.String(), "\x1b[", "no color codes off a terminal")
	assert.Contains(t, out, "DEBUG")
	assert.Contains(t, out, "hello")
	assert.NotEqual(t, '{', out[0], "not JSON")
}

func TestNewRejectsBadConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Logging.Level = "loud"
	_, err := NewFromConfig(cfg.Logging)
	assert.Error(t, err)

	cfg = config.Default()
	cfg.Logging.Format = "xml"
	_, err = NewFromConfig(cfg.Logging)
	assert.Error(t, err)
}

func TestSyncFilter(t *testing.T) {
	einval := &os.PathError{Op: "sync", Path: "/dev/stderr", Err: syscall.EINVAL}
	enotty := &os.PathError{Op: "sync", Path: "/dev/stdout", Err: syscall.ENOTTY}
	other := errors.New("disk on fire")
	assert.NoError(t, filterSyncErr(nil))
	assert.NoError(t, filterSyncErr(einval))
	assert.NoError(t, filterSyncErr(errors.Join(einval, enotty)))
	assert.ErrorIs(t, filterSyncErr(errors.Join(einval, other)), other)
	assert.ErrorIs(t, filterSyncErr(fmt.Errorf("wrap: %w", other)), other)
}

func TestModuleRoutesFxEvents(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	observed := zap.New(core)

	var got *zap.Logger
	app := fxtest.New(t,
		config.Module,
		config.Supply(config.Default()),
		Module,
		fx.Decorate(func(*zap.Logger) *zap.Logger { return observed }),
		fx.Populate(&got),
	)
	app.RequireStart().RequireStop()

	assert.Same(t, observed, got)
	fx := logs.FilterLoggerName("fx")
	assert.NotZero(t, fx.FilterMessage("provided").Len(), "provide events")
	assert.NotZero(t, fx.FilterMessage("started").Len(), "start event")
	assert.NotZero(t, fx.FilterMessage("OnStop hook executed").Len(), "the sync hook ran")
	for _, e := range fx.All() {
		assert.Equal(t, zapcore.DebugLevel, e.Level, e.Message)
	}
}

func TestModuleBuildsFromConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Logging.Level = "warn"
	var l *zap.Logger
	app := fxtest.New(t, config.Module, config.Supply(cfg), Module, fx.Populate(&l))
	app.RequireStart().RequireStop()
	require.NotNil(t, l)
	assert.False(t, l.Core().Enabled(zapcore.InfoLevel))
	assert.True(t, l.Core().Enabled(zapcore.WarnLevel))
}

// Color only on a terminal and without NO_COLOR: a file or pipe gets none
// (round-3 item 18: escape codes ended up in log files).
func TestColorOnlyOnATerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, colorFor(f, ""), "a file")
	r, w, err := os.Pipe()
	require.NoError(t, err)
	defer r.Close()
	defer w.Close()
	assert.False(t, colorFor(w, ""), "a pipe")
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		assert.True(t, colorFor(tty, ""), "a terminal")
		assert.False(t, colorFor(tty, "1"), "a terminal with NO_COLOR")
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	assert.False(t, colorFor(null, ""), "a character device that is not a terminal")
}
