// Package logging builds the process's *zap.Logger from the configuration
// and routes Fx's own events through it.
//
// Field keys are kebab-case ("topic", "offset", "dispatcher-name"); choosing
// them is the caller's job.
package logging

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/term"

	"github.com/mmmq/mmmq/modules/config"
)

// NewFromConfig returns a logger writing to stderr at c.Level (section
// "logging"): one JSON object per line for format "json" (keys ts, level,
// logger, caller, msg, stacktrace; RFC 3339 time), or human-readable lines
// with local time for "console", their levels colored only when stderr is
// a terminal and NO_COLOR is unset (no escape codes in files and pipes).
// DPanic and above carry a stack trace. No sampling: every entry is
// written. It fails on an unknown level or format. Module provides the
// logger with it.
func NewFromConfig(c config.LoggingConfig) (*zap.Logger, error) {
	return newLogger(c, zapcore.Lock(os.Stderr), colorFor(os.Stderr, os.Getenv("NO_COLOR")))
}

// colorFor says whether console lines written to f are colored: f is a
// terminal and noColor (the NO_COLOR convention) is empty.
func colorFor(f *os.File, noColor string) bool {
	return noColor == "" && term.IsTerminal(int(f.Fd()))
}

func newLogger(c config.LoggingConfig, out zapcore.WriteSyncer, color bool) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		return nil, fmt.Errorf("logging: level: %w", err)
	}
	var enc zapcore.Encoder
	switch c.Format {
	case config.FormatJSON:
		ec := zap.NewProductionEncoderConfig()
		ec.EncodeTime = zapcore.RFC3339NanoTimeEncoder
		ec.EncodeDuration = zapcore.StringDurationEncoder
		enc = zapcore.NewJSONEncoder(ec)
	case config.FormatConsole:
		ec := zap.NewDevelopmentEncoderConfig()
		ec.EncodeLevel = zapcore.CapitalLevelEncoder
		if color {
			ec.EncodeLevel = zapcore.CapitalColorLevelEncoder
		}
		ec.EncodeTime = zapcore.TimeEncoderOfLayout("2006-01-02 15:04:05.000")
		enc = zapcore.NewConsoleEncoder(ec)
	default:
		return nil, fmt.Errorf("logging: unknown format %q (want %q or %q)", c.Format, config.FormatJSON, config.FormatConsole)
	}
	core := zapcore.NewCore(enc, out, zap.NewAtomicLevelAt(level))
	return zap.New(core,
		zap.AddCaller(),
		// Stack traces only for DPanic and above: an operational error (a
		// busy port, a failed fsync) is explained by its message and fields.
		zap.AddStacktrace(zapcore.DPanicLevel),
		zap.ErrorOutput(zapcore.Lock(os.Stderr)),
	), nil
}

// Sync flushes l, ignoring EINVAL and ENOTTY, which fsync returns for
// stdout/stderr attached to a terminal or pipe on Linux and macOS; any other
// error is returned.
func Sync(l *zap.Logger) error {
	return filterSyncErr(l.Sync())
}

func filterSyncErr(err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var keep []error
		for _, e := range j.Unwrap() {
			if e = filterSyncErr(e); e != nil {
				keep = append(keep, e)
			}
		}
		return errors.Join(keep...)
	}
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTTY) {
		return nil
	}
	return err
}
