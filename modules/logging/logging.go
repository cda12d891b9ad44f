// Package logging builds the process's *zap.Logger from the configuration
// and routes Fx's own events through it.
//
// Field keys are kebab-case ("topic", "offset", "dispatcher-name"); choosing
// them is the caller's job.
//
// Repeated warnings are counted, not written one per event: a line (same
// logger, level and message; the fields may differ) at warn or error level
// is written at most RepeatBurst (5) times per RepeatWindow (10 s); the
// rest are written as one entry at the window's end, the last one's fields
// plus "repeated" (how many were not written) and "within" ("10s"), and at
// stop. During a failover "publish failed" is then a handful of lines a
// node instead of thousands. Info and debug lines, and every line of the
// audit logger, are all written.
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
// DPanic and above carry a stack trace. Info and Debug entries are all
// written; a warning or error line (same logger, level and message)
// repeated more than RepeatBurst times within RepeatWindow is written as
// one more entry with "repeated": n when the window ends (see repeatCore;
// audit lines are never limited). It fails on an unknown level or format.
// Module provides the logger with it.
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
	core := newRepeatCore(zapcore.NewCore(enc, out, zap.NewAtomicLevelAt(level)))
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
