package logging

import (
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Repeated warnings and errors are rate-limited with a count instead of
// written one per event: a failover or a consumer gone down can make the
// same line thousands of times a minute (one "publish failed" per refused
// request), which buries everything else and fills disks.
const (
	// RepeatWindow is the period over which one line is counted: the
	// first RepeatBurst entries of a line within it are written, the
	// rest are counted and written as one entry when it ends.
	RepeatWindow = 10 * time.Second
	// RepeatBurst is how many entries of one line are written per
	// RepeatWindow before the rest are counted.
	RepeatBurst = 5
	// maxRepeatKeys bounds the lines tracked at once; past it a new
	// line is written unlimited (messages are constant strings, so this
	// is only reached by a caller that formats values into its message).
	maxRepeatKeys = 4096
)

// repeatKey is what makes two entries "the same line": logger name, level
// and message; fields (topic, error) may differ.
type repeatKey struct {
	name  string
	level zapcore.Level
	msg   string
}

// repeatLine is one line's count in its current window.
type repeatLine struct {
	windowEnd  time.Time
	written    int
	suppressed int
	// last is the last suppressed entry, written with the count when the
	// window ends (its fields: the latest error, the latest topic).
	last struct {
		core   zapcore.Core
		ent    zapcore.Entry
		fields []zapcore.Field
	}
	timer *time.Timer
}

// repeatState is shared by a repeatCore and every core derived from it
// with With, so that a line is counted across child loggers.
type repeatState struct {
	mu    sync.Mutex
	lines map[repeatKey]*repeatLine
	now   func() time.Time
	// after schedules f once d has passed (time.AfterFunc; tests replace it).
	after func(d time.Duration, f func()) *time.Timer
}

// repeatCore wraps a core so that entries at Warn level and above are
// rate-limited per line: within RepeatWindow the first RepeatBurst
// entries of a line are written as they come, later ones are counted,
// and when the window ends one entry is written with the last suppressed
// entry's message and fields plus "repeated" (how many were not written)
// and "within" (the window). Info and Debug entries, and every entry of
// the audit logger (named "audit", whose lines are records, not
// diagnostics), are never limited.
type repeatCore struct {
	zapcore.Core
	st *repeatState
}

func newRepeatCore(c zapcore.Core) *repeatCore {
	return &repeatCore{Core: c, st: &repeatState{
		lines: make(map[repeatKey]*repeatLine),
		now:   time.Now,
		after: time.AfterFunc,
	}}
}

// limited says whether ent is rate-limited.
func limited(ent zapcore.Entry) bool {
	return ent.Level >= zapcore.WarnLevel && ent.Level < zapcore.DPanicLevel &&
		ent.LoggerName != "audit" && !strings.HasPrefix(ent.LoggerName, "audit.")
}

func (c *repeatCore) With(fields []zapcore.Field) zapcore.Core {
	return &repeatCore{Core: c.Core.With(fields), st: c.st}
}

func (c *repeatCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if !c.Enabled(ent.Level) {
		return ce
	}
	if !limited(ent) {
		return c.Core.Check(ent, ce)
	}
	return ce.AddCore(ent, c)
}

// Write is only reached for limited entries (Check routes the others to
// the wrapped core).
func (c *repeatCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	st := c.st
	k := repeatKey{ent.LoggerName, ent.Level, ent.Message}
	st.mu.Lock()
	now := st.now()
	l := st.lines[k]
	if l == nil {
		if len(st.lines) >= maxRepeatKeys {
			st.pruneLocked(now)
		}
		if len(st.lines) >= maxRepeatKeys {
			st.mu.Unlock()
			return c.Core.Write(ent, fields)
		}
		l = &repeatLine{}
		st.lines[k] = l
	}
	if !now.Before(l.windowEnd) && l.suppressed == 0 {
		l.windowEnd, l.written = now.Add(RepeatWindow), 0
	}
	if l.written < RepeatBurst {
		l.written++
		st.mu.Unlock()
		return c.Core.Write(ent, fields)
	}
	l.suppressed++
	l.last.core, l.last.ent = c.Core, ent
	l.last.fields = append(l.last.fields[:0], fields...)
	if l.timer == nil {
		l.timer = st.after(l.windowEnd.Sub(now), func() { st.flush(k) })
	}
	st.mu.Unlock()
	return nil
}

// pruneLocked forgets lines whose window has ended with nothing pending.
func (st *repeatState) pruneLocked(now time.Time) {
	for k, l := range st.lines {
		if l.suppressed == 0 && !now.Before(l.windowEnd) {
			delete(st.lines, k)
		}
	}
}

// flush writes k's count, if any, and starts its next window.
func (st *repeatState) flush(k repeatKey) {
	st.mu.Lock()
	l := st.lines[k]
	if l == nil || l.suppressed == 0 {
		st.mu.Unlock()
		return
	}
	n, last := l.suppressed, l.last
	l.suppressed, l.timer, l.last.fields = 0, nil, nil
	// The count closes the window; the next entry starts a new one.
	l.windowEnd = st.now()
	st.mu.Unlock()
	writeRepeated(last.core, last.ent, last.fields, n)
}

func writeRepeated(core zapcore.Core, ent zapcore.Entry, fields []zapcore.Field, n int) {
	fields = append(fields, zap.Int("repeated", n), zap.Duration("within", RepeatWindow))
	_ = core.Write(ent, fields)
}

// Sync writes every pending count at once (the process is stopping), then
// syncs the wrapped core.
func (c *repeatCore) Sync() error {
	st := c.st
	st.mu.Lock()
	var keys []repeatKey
	for k, l := range st.lines {
		if l.suppressed > 0 {
			if l.timer != nil {
				l.timer.Stop()
			}
			keys = append(keys, k)
		}
	}
	st.mu.Unlock()
	for _, k := range keys {
		st.flush(k)
	}
	return c.Core.Sync()
}
