package logging

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
)

// fakeClock drives a repeatCore's windows by hand: timers fire only when
// the test calls fire.
type fakeClock struct {
	now    time.Time
	timers []func()
}

func (f *fakeClock) fire() {
	ts := f.timers
	f.timers = nil
	for _, t := range ts {
		t()
	}
}

func newRepeatLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs, *fakeClock) {
	t.Helper()
	obs, logs := observer.New(zapcore.DebugLevel)
	rc := newRepeatCore(obs)
	clk := &fakeClock{now: time.Unix(1_800_000_000, 0)}
	rc.st.now = func() time.Time { return clk.now }
	rc.st.after = func(d time.Duration, f func()) *time.Timer {
		clk.timers = append(clk.timers, f)
		return time.NewTimer(time.Hour) // never fires on its own; Stop works
	}
	return zap.New(rc), logs, clk
}

// A warning repeated 100 times in a window (a failover's "publish
// failed") is written RepeatBurst times, then once more at the window's
// end with the count of the rest and the last one's fields; the next
// window starts a new burst.
func TestRepeatedWarningsAreCounted(t *testing.T) {
	log, logs, clk := newRepeatLogger(t)
	http := log.Named("http")
	for i := 0; i < 100; i++ {
		http.Warn("publish failed", zap.Int("status", 503), zap.Error(fmt.Errorf("attempt %d", i)))
	}
	require.Equal(t, RepeatBurst, logs.Len(), "written within the window")
	clk.now = clk.now.Add(RepeatWindow)
	clk.fire()
	all := logs.TakeAll()
	require.Len(t, all, RepeatBurst+1)
	sum := all[RepeatBurst]
	require.Equal(t, "publish failed", sum.Message)
	require.Equal(t, "http", sum.LoggerName)
	require.Equal(t, zapcore.WarnLevel, sum.Level)
	m := sum.ContextMap()
	require.EqualValues(t, 100-RepeatBurst, m["repeated"])
	require.Equal(t, "attempt 99", m["error"], "the last suppressed entry's fields")
	require.Equal(t, RepeatWindow, m["within"])

	http.Warn("publish failed", zap.Error(errors.New("again")))
	require.Equal(t, 1, logs.Len(), "a new window writes again")
}

// Different lines are counted apart; Info lines and the audit logger's are
// never limited; Sync writes a pending count at once (stop).
func TestRepeatLimitsOnlyRepeatedWarnings(t *testing.T) {
	log, logs, _ := newRepeatLogger(t)
	for i := 0; i < 20; i++ {
		log.Info("delivered")
		log.Named("audit").Warn("refused")
		log.Warn("a")
		log.Error("b")
	}
	require.Equal(t, 20, logs.FilterMessage("delivered").Len())
	require.Equal(t, 20, logs.FilterMessage("refused").Len())
	require.Equal(t, RepeatBurst, logs.FilterMessage("a").Len())
	require.Equal(t, RepeatBurst, logs.FilterMessage("b").Len())
	require.NoError(t, log.Sync())
	for _, msg := range []string{"a", "b"} {
		got := logs.FilterMessage(msg).All()
		require.Len(t, got, RepeatBurst+1, msg)
		require.EqualValues(t, 20-RepeatBurst, got[RepeatBurst].ContextMap()["repeated"], msg)
	}
	require.NoError(t, log.Sync())
	require.Equal(t, RepeatBurst+1, logs.FilterMessage("a").Len(), "nothing pending is written twice")
}

// The real logger (NewFromConfig's core) limits repeated warnings.
func TestNewLoggerLimitsRepeats(t *testing.T) {
	var buf buffer
	l, err := newLogger(config.Default().Logging, &buf, false)
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		l.Warn("publish failed")
	}
	require.NoError(t, l.Sync())
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, RepeatBurst+1)
	require.Contains(t, lines[RepeatBurst], `"repeated":45`)
}
