package crashtest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// lazyRounds is what the crash tests with rounds on LazyFS share
// (TestLazyFSPowerLossSharedGroup, TestLazyFSPowerLossKeyOrdering; with fs
// nil their kill -9 twins): starting the broker, again after a stall or a
// stale truncate answer, and ending a round in kill -9 or a power loss.
type lazyRounds struct {
	t  *testing.T
	fs *lazyFS // nil: kill -9 only

	kills, powerLosses int
	stalls, spurious   int // LazyFS stalls and stale truncate answers
}

// mountLazyFS mounts LazyFS for the power-loss rounds of what (a crash
// test's name for them), or returns nil after logging one line saying why
// they do not run (MMMQ_LAZYFS not set, or its library missing).
func mountLazyFS(t *testing.T, what string) *lazyFS {
	bin, lib, why := lazyBin()
	if why != "" {
		t.Log("LazyFS power-loss rounds of " + what + " did not run: " + why)
		return nil
	}
	return newLazyFS(t, bin, lib)
}

// dataRoot is the broker's data directory for rounds on fs: its mount
// point, or a fresh temporary directory when fs is nil (kill -9 only).
func dataRoot(t *testing.T, fs *lazyFS) string {
	if fs != nil {
		return fs.mnt
	}
	return filepath.Join(t.TempDir(), "data")
}

// lazyRoundsCount is the number of rounds of a crash test: the
// -crash.rounds flag, else long with MMMQ_LONG=1, else short.
func lazyRoundsCount(short, long int) int {
	if *roundsFlag > 0 {
		return *roundsFlag
	}
	if os.Getenv("MMMQ_LONG") != "" {
		return long
	}
	return short
}

// stall is the OnStall of the LazyFS rounds (see lzRun.stall): the daemon
// is killed, a power loss.
func (l *lazyRounds) stall(b *broker) bool {
	if !l.fs.alive() {
		return false
	}
	l.stalls++
	l.t.Logf("LazyFS stall %d: broker pid %d stuck; the daemon is killed (a power loss)\nbroker threads:\n%s", l.stalls, b.cmd.Process.Pid, procStacks(b.cmd.Process.Pid))
	if l.stalls > lzMaxStalls {
		l.t.Errorf("LazyFS stalled %d times (at most %d)", l.stalls, lzMaxStalls)
	}
	l.fs.killDaemon()
	return true
}

// start starts the broker conf returns (called once per attempt); on
// LazyFS it mounts again after a power loss or a stall, and starts again
// after a stall at startup or a startup failed by LazyFS's stale truncate
// answer (lazyTruncateENOENT), at most lzMaxSpurious times.
func (l *lazyRounds) start(conf func() brokerConf) *broker {
	t := l.t
	t.Helper()
	for {
		if l.fs == nil {
			return startBroker(t, conf())
		}
		if !l.fs.alive() {
			l.fs.remount()
		}
		c := conf()
		c.NoDiskGuard = true
		c.OnStall = l.stall
		c.MayDieStarting = true
		b := startBroker(t, c)
		if b.stalled && l.stalls <= lzMaxStalls {
			continue
		}
		select {
		case <-b.exited:
			m := lazyTruncateENOENT.FindStringSubmatch(b.logText())
			if m != nil && m[1] == m[2] && l.spurious < lzMaxSpurious {
				if _, err := os.Stat(m[1]); err == nil {
					l.spurious++
					t.Logf("LazyFS answered the truncate of an open, existing file with ENOENT (%d): %s; the broker starts again", l.spurious, m[0])
					continue
				}
			}
			t.Fatalf("broker exited during startup: %v\n%s", b.waitErr, b.logTail())
		default:
		}
		return b
	}
}

// end ends round r: kill -9, or on LazyFS in odd rounds a power loss (the
// broker frozen, frozen called, the daemon killed: every write not fsynced
// is gone; then the broker killed and the root mounted again). It reports
// whether it was a power loss.
func (l *lazyRounds) end(b *broker, r int, frozen func()) bool {
	if l.fs == nil || r%2 == 0 {
		b.kill()
		l.kills++
		return false
	}
	if err := b.freeze(); err != nil {
		l.t.Fatal(err)
	}
	if frozen != nil {
		frozen()
	}
	l.fs.killDaemon()
	b.kill()
	l.fs.remount()
	l.powerLosses++
	return true
}

// counts is the summary fields of the rounds' ends and, on LazyFS, of its
// stalls and stale truncate answers.
func (l *lazyRounds) counts() string {
	s := fmt.Sprintf("kills=%d power_losses=%d", l.kills, l.powerLosses)
	if l.fs != nil {
		s += fmt.Sprintf(" lazyfs_stalls=%d lazyfs_truncate_enoent=%d", l.stalls, l.spurious)
	}
	return s
}
