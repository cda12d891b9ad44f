package crashtest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestLazyFSPowerLoss runs the real binary with its data directory on
// LazyFS (github.com/dsrhaslab/lazyfs: a FUSE filesystem with its own page
// cache, in which nothing written reaches the directory underneath before
// an fsync of its file), the tool Jepsen uses for power-loss faults, and
// checks after every restart what a power loss may not take:
//
//   - every DURABLE-acknowledged message is at its offset, byte-identical
//     (checkAcked), and nothing is in the log that was not sent, or twice
//     (checkLogIDs);
//   - no topic is refused at startup (GET /topics lists none quarantined
//     or failed; the broker runs with on-corruption: quarantine so that a
//     refusal is counted, with the startup log's reason, instead of
//     ending the run); a refusal fails the test and the fault model goes
//     on on a fresh data root;
//   - nothing recovery served (read back after a restart) is taken by a
//     later power loss (checkPrefix on the DURABLE topics), reported as
//     served_then_lost and failed on.
//
// Per index-sync mode (commit, lazy), one subtest per fault model, each on
// its own mount, 6 producers publishing DURABLE to 3 topics (16 KiB
// segments: a few rotations per round):
//
//   - power-loss: even rounds freeze the broker (SIGSTOP to every thread:
//     broker.freeze), SIGKILL the LazyFS daemon (every write not fsynced
//     through it is gone: a power loss), kill the broker, unmount
//     (fusermount3 -u -z) and mount the same root again; odd rounds kill -9 the broker only (the cache
//     kept, like the page cache after a process crash). The negative
//     control runs here: 2 producers publish ACCEPTED (?ack=accepted: no
//     offset, answered when queued) to lz.acc; one is lost when its id is
//     nowhere in the log (as in accepted_test.go), and each power loss
//     comes in a burst of 64 more at once (controlBurst): in rounds 4n+2
//     the daemon is frozen first (SIGSTOP: the filesystem stalls), the
//     burst is answered from memory, then the broker is frozen and the
//     power loss follows, so that every answer of the burst must be lost;
//     in the others the broker is frozen after 16 answers. Over the
//     power-loss rounds the control must lose some (> 0), or the rounds
//     did not cut anything the checks could see.
//   - kill-restart-loss: kill -9 the broker, restart it (recovery runs on
//     what the killed process left in the cache, and the test reads it
//     back), then a power loss: in odd rounds before any new traffic, in
//     even ones 20–150 ms into new traffic. This is the shape where
//     recovery must itself make durable what it serves: syncfs(2), which
//     the broker calls once at startup instead of fsyncing every topic's
//     files (modules/topicqueue Topics), returns success on FUSE and
//     syncs nothing (the kernel sends FUSE no syncfs request), so the
//     served data would stay in LazyFS's cache: the broker does not trust
//     syncfs on FUSE (vfs.OS.SyncFS), and each topic's recovery fsyncs
//     what it serves there.
//   - torn-op: LazyFS's torn-op fault on the last segment (.mmm) of a
//     topic, during the traffic: the next write to that file is split in
//     parts, some written to the root, then LazyFS kills itself (the rest
//     of its cache lost). Variants by round: 2 parts keep 1; 2 parts keep
//     2; 3 parts keep 1 and 3.
//   - torn-seq (lazy mode only, the index-sync-interval an hour): torn-seq
//     on the last offset index (.idx): within the next run of writes to it
//     without an fsync only some writes reach the root, then LazyFS kills
//     itself. It fires only on a file written twice or more between
//     fsyncs, which under commit (an index fsync per group commit) never
//     happens. Variants: keep writes 1,2; 2; 1,3.
//
// A torn fault is keyed by the file's exact path under the root and lasts
// one daemon: each torn round remounts. A fault that did not fire within
// 5 s (the topic rotated to a new segment first) ends the round as a
// plain power loss, counted as not fired.
//
// Traps, and what the harness does about them:
//
//   - lazyfs::clear-cache is not an atomic power loss: a write already
//     inside the daemon when the broker is frozen lands after the clear,
//     and LazyFS fills the gap below it with zeros, a state no disk leaves
//     (it can make startup refuse a topic for a hole no real power loss
//     makes). The rounds kill the daemon instead: whatever it was doing
//     is lost with its cache.
//   - torn-op and torn-seq persist parts of single write calls, not
//     pages: they can leave zeros below persisted bytes within one
//     512-byte sector (torn-seq on a lazy index: a hole from index byte
//     8, entries valid again at bytes 104 to 552), which a disk behind a
//     page cache does not produce for appends in order (writeback writes
//     a page with every earlier write in it). Recovery accepts it all the
//     same: the last segment's index past its valid prefix is rebuilt
//     from the segment, and a hole in the segment within one group
//     commit is cut. (torn-seq counts writes from when the fault is
//     injected, so a file already written since its last fsync always
//     gets a hole.)
//   - LazyFS passes directory operations through to the root at once:
//     creating, renaming and removing files are durable without a
//     directory fsync, so a lost rename or a lost new segment file is not
//     tested here (modules/storage's fault-injecting filesystem covers
//     those).
//   - The daemon reads its FIFO in chunks of 100 bytes: a command (with
//     the full path of a file) must fit in 99 bytes, so the root is in a
//     short temporary directory (lazyBase); and one command at a time,
//     each waited for in the daemon's log.
//   - The cache is pre-allocated; with apply_eviction=false a full cache
//     writes through (what a power loss would then not take). It is 256
//     MiB and every power loss checks lazyfs::display-cache-usage first.
//   - LazyFS implements no statfs: FUSE answers 0 blocks free, and the
//     broker's disk guard (min-free-bytes) would refuse every publish
//     with 507; the rounds turn the guard off.
//   - A mount left behind would outlive the test: every mount is removed
//     in a t.Cleanup (fusermount3 -u -z, failed test or not); a mount
//     already at the mount point is refused at mount time.
//   - Every broker picks free ports (port 0) and startBroker fails the
//     test at once when one did not start.
//   - A process SIGKILLed on a FUSE mount is reaped only once the daemon
//     has answered its last requests (exit closes every file: FLUSH). CI
//     once saw a broker not reaped 10 s after SIGKILL in a
//     kill-restart-loss round under load, and the next broker never got
//     ready: the daemon had stopped answering. Such a stall (a broker not
//     ready or not reaped in time, the daemon alive) is logged with where
//     every thread of both processes waits (state, wait channel, kernel
//     stack), the daemon is killed (a power loss: the round becomes one,
//     with every check of the next start), and the next start mounts
//     again; more than lzMaxStalls in one fault model fails the test.
//     TestLazyFSStallIsAPowerLoss makes a stall on purpose (the daemon
//     frozen) and checks the way out.
//   - LazyFS's truncate handler can answer a truncate of an open file
//     that exists with ENOENT: for a file in its cache it never assigns
//     the result it checks, so the answer is stack garbage compared with
//     -1 and a stale errno (lazyTruncateENOENT has the details). It was
//     seen once, as a broker that failed to start in a lazy,
//     prealloc-on, torn-seq round ("truncate segment
//     …0000000000000000000.mmm: …: no such file or directory");
//     preallocation makes every restart of a killed broker cut zero
//     tails, hence more truncates. A startup failed by that answer on an
//     existing file is logged, counted (lazyfs_truncate_enoent in the
//     summary; more than lzMaxSpurious fails the test) and followed by
//     another start on the same data root, with every check; any other
//     startup failure is the broker's and fails the test
//     (TestLazyFSStaleTruncateAnswerIsRecognised). The same answer to a
//     running broker's trim (rotation, idle, close) fails that topic:
//     its publishes NACK and the test reports them.
//
// The rounds run only with MMMQ_LAZYFS set to the lazyfs binary (its
// libpcache in $(dirname $MMMQ_LAZYFS)/../lib, as
// ../shared/tools/build-lazyfs.sh leaves it; .ci/run builds it and exports
// the variable); without it the test logs one line saying why and passes.
// `make test` runs a few rounds per fault model and mode (lzRounds),
// `make crash` (MMMQ_LONG=1) 16 each. Each subtest prints a summary line
// "crashtest lazyfs: mode=... fault=... rounds=... acked=... lost=0
// refused=0 ..." with what recovery cut (the fields of the storage
// engine's "recovery changed the topic" log lines, summed) and the
// control's losses.
func TestLazyFSPowerLoss(t *testing.T) {
	bin, lib, why := lazyBin()
	if why != "" {
		t.Log("LazyFS power-loss rounds did not run: " + why)
		return
	}
	for _, m := range rkModes {
		t.Run(m.Name, func(t *testing.T) {
			for _, pre := range lzPrealloc {
				t.Run(pre.name, func(t *testing.T) {
					for _, f := range lzFaults {
						if f == "torn-seq" && m.IndexSync != "lazy" {
							continue
						}
						t.Run(f, func(t *testing.T) { runLazyFS(t, m, pre, f, bin, lib) })
					}
				})
			}
		})
	}
}

// lzPreallocMode is one setting of mmmq.broker.storage.preallocate the
// rounds run with: nil keeps the default (on: the active segment and its
// index carry fsynced zeros ahead of the writer, group commits into them
// use fdatasync, and a killed broker leaves zero tails that recovery
// cuts), 0 turns it off.
type lzPreallocMode struct {
	name  string
	bytes *int64
}

var lzPrealloc = []lzPreallocMode{{name: "prealloc-on"}, {name: "prealloc-off", bytes: new(int64)}}

// TestLazyFSStallIsAPowerLoss proves the harness's way out of a LazyFS
// stall (lzRun.stall). A process's exit closes its files, and FUSE sends
// the first close of a mount's regular file as a FLUSH request and waits
// for the answer (LazyFS answers ENOSYS, after which the kernel sends no
// more FLUSH on that mount). So on a fresh mount where the broker has
// closed no file yet (it holds the data root's lock file open), with the
// daemon frozen (SIGSTOP) and a publish waiting on it, the SIGKILLed broker
// cannot be reaped: kill must then kill the daemon and see the broker
// reaped, and the next start must mount again, serve and keep a DURABLE
// publish.
func TestLazyFSStallIsAPowerLoss(t *testing.T) {
	bin, lib, why := lazyBin()
	if why != "" {
		t.Log("LazyFS stall test did not run: " + why)
		return
	}
	k := &lzRun{t: t, mode: rkModes[0], fault: "power-loss", bin: bin, lib: lib, kinds: map[int]string{}, st: lzStats{Cut: map[string]int64{}}}
	k.rng = rand.New(rand.NewPCG(1, 2))
	k.fresh()
	k.cur = 1
	b := k.start(1, "stall round")
	if err := k.fs.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP LazyFS: %v", err)
	}
	stalled := make(chan pubResult, 1)
	go func() { stalled <- publish(b.base, lzTopics[0], "stalled", []byte(`{"n":0}`), "durable") }() // waits on the frozen daemon
	time.Sleep(100 * time.Millisecond)
	b.kill()
	select {
	case <-b.exited:
	default:
		t.Fatal("the broker is still running after kill")
	}
	if k.st.Stalls != 1 || k.fs.alive() {
		t.Fatalf("stalls=%d daemon alive=%t, want 1 stall and the daemon killed", k.st.Stalls, k.fs.alive())
	}
	k.sent = append(k.sent, sentMsg{Round: 1, Topic: lzTopics[0], ID: "stalled", Level: "durable", Content: []byte(`{"n":0}`), Res: <-stalled})
	b = k.start(2, "after the stall")
	r := publish(b.base, lzTopics[0], "after", []byte(`{"n":1}`), "durable")
	if !r.Ack {
		t.Fatalf("publish after the stall: %+v", r)
	}
	k.sent = append(k.sent, sentMsg{Round: 2, Topic: lzTopics[0], ID: "after", Level: "durable", Content: []byte(`{"n":1}`), Res: r})
	b.stop()
	b = k.start(3, "after a clean stop")
	got, err := readAll(b.base, lzTopics[0])
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range got {
		found = found || m.ID == "after"
	}
	if !found {
		t.Fatalf("the DURABLE publish after the stall is not served: %+v", got)
	}
	b.stop()
	t.Logf("stall released; kind=%q", k.kinds[1])
}

var (
	lzFaults  = []string{"power-loss", "kill-restart-loss", "torn-op", "torn-seq"}
	lzTopics  = []string{"lz.a", "lz.b", "lz.c"}
	lzControl = "lz.acc"
)

const (
	lzProducers        = 6
	lzControlProducers = 2
	lzControlBurst     = 64 // ACCEPTED publishes at once just before a power loss
	lzSegmentMaxBytes  = 16 << 10
	lzFaultWait        = 5 * time.Second // a torn fault must fire within it
	// lzMaxStalls: LazyFS stalls (its daemon stops answering: see
	// lzRun.stall) a fault model tolerates, each turned into a power loss,
	// before the test fails: rounds on a filesystem that hangs test nothing.
	lzMaxStalls = 2
	// lzMaxSpurious: startups failed by LazyFS's stale truncate answer
	// (lazyTruncateENOENT) that a fault model tolerates, each followed by
	// another start on the same data root.
	lzMaxSpurious = 2
)

// lzRounds is the number of rounds of fault model f in one mode.
func lzRounds(f string) int {
	if os.Getenv("MMMQ_LONG") != "" {
		return 16
	}
	if f == "power-loss" {
		return 6 // 3 power losses, 3 kill -9
	}
	return 3 // a torn fault's three variants; kill-restart-loss both shapes
}

// lzStats is what a fault model's summary line reports.
type lzStats struct {
	Rounds, PowerLosses, Kills int
	Fired, NotFired            int
	Stalls                     int // LazyFS stopped answering: see lzRun.stall
	Spurious                   int // LazyFS's stale truncate answers: see lazyTruncateENOENT
	Roots                      int // data roots used (a refusal starts a fresh one)
	Refusals                   []string
	Recoveries                 int              // startups whose recovery changed a topic
	Cut                        map[string]int64 // the numeric fields of those log lines, summed
	ServedLost                 []string
	MaxCache                   float64
	// Carried over from data roots left after a refusal.
	carry lzCount
}

// lzCount are the acknowledgement counters of one data root.
type lzCount struct {
	Acked, Lost                     int // DURABLE
	Unverified                      int // DURABLE acks in a refused topic: not readable
	AccAcked, AccLost, AccLostPower int // the ACCEPTED control; AccLostPower: sent in a power-loss round
}

func (c lzCount) add(o lzCount) lzCount {
	return lzCount{c.Acked + o.Acked, c.Lost + o.Lost, c.Unverified + o.Unverified, c.AccAcked + o.AccAcked, c.AccLost + o.AccLost, c.AccLostPower + o.AccLostPower}
}

// lzRun is one fault model in one mode: its mount, what was sent, the log
// as last read back.
type lzRun struct {
	t        *testing.T
	mode     indexSyncMode
	pre      lzPreallocMode
	fault    string
	bin, lib string
	fs       *lazyFS
	seed     uint64
	rng      *rand.Rand
	st       lzStats
	now      lzCount
	kinds    map[int]string // round → what ended it
	cur      int            // the round running

	mu   sync.Mutex
	sent []sentMsg
	prev map[string][]stored
}

func runLazyFS(t *testing.T, m indexSyncMode, pre lzPreallocMode, fault, bin, lib string) {
	k := &lzRun{t: t, mode: m, pre: pre, fault: fault, bin: bin, lib: lib, seed: uint64(time.Now().UnixNano()),
		kinds: map[int]string{}, st: lzStats{Cut: map[string]int64{}}}
	k.rng = rand.New(rand.NewPCG(k.seed, 0x6c617a79))
	k.fresh()
	rounds := lzRounds(fault)
	began := time.Now()
	deadline, limited := t.Deadline()
	for r := 1; r <= rounds; r++ {
		if limited && time.Now().After(deadline.Add(-2*time.Minute)) {
			t.Fatalf("out of time after %d rounds (raise go test -timeout)", r-1)
		}
		k.round(r)
	}
	b := k.start(rounds+1, "final")
	b.stop()
	k.summary(rounds, time.Since(began))
}

// fresh starts the fault model on a new data root (at the start, and
// after a refusal, whose topic stays refused).
func (k *lzRun) fresh() {
	if k.fs != nil {
		k.fs.cleanup()
	}
	k.st.carry = k.st.carry.add(k.now)
	k.now = lzCount{}
	k.sent, k.prev = nil, map[string][]stored{}
	k.fs = newLazyFS(k.t, k.bin, k.lib)
	k.st.Roots++
}

func (k *lzRun) conf(r int) brokerConf {
	c := k.mode.conf(brokerConf{DataDir: k.fs.mnt, SegmentMaxBytes: lzSegmentMaxBytes, OnCorruption: "quarantine", NoDiskGuard: true, OnStall: k.stall}, r)
	if k.fault == "torn-seq" {
		c.IndexSyncInterval = time.Hour // the index written many times between fsyncs
	}
	c.Preallocate = k.pre.bytes
	return c
}

// round r: start the broker (checking what the previous round left), run
// the traffic and end it the fault model's way.
func (k *lzRun) round(r int) {
	k.st.Rounds++
	k.cur = r
	b := k.start(r, fmt.Sprintf("round %d after restart", r))
	busy := func() { time.Sleep(time.Duration(100+k.rng.IntN(301)) * time.Millisecond) }
	switch {
	case k.fault == "power-loss" && r%2 == 1:
		k.kinds[r] = "kill"
		stop := k.traffic(b, r, true, false)
		busy()
		b.kill()
		stop()
		k.st.Kills++
	case k.fault == "power-loss" && r%4 == 2:
		// The filesystem stalls first (the daemon frozen: every write and
		// fsync of the broker waits), then the ACCEPTED burst, answered
		// from memory, then the power loss: every answer of the burst is
		// lost, whatever the timing.
		k.kinds[r] = "power-loss (filesystem stalled)"
		stop := k.traffic(b, r, true, false)
		busy()
		k.checkCache()
		if err := k.fs.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			k.t.Fatalf("SIGSTOP LazyFS: %v", err)
		}
		wait := k.controlBurst(b, r, lzControlBurst) // freezes b
		k.powerLoss(b, false)
		wait()
		stop()
	case k.fault == "power-loss":
		k.kinds[r] = "power-loss"
		stop := k.traffic(b, r, true, false)
		busy()
		wait := k.controlBurst(b, r, lzControlBurst/4) // freezes b
		k.powerLoss(b, true)
		wait()
		stop()
	case k.fault == "kill-restart-loss":
		k.kinds[r] = "kill-restart-loss"
		stop := k.traffic(b, r, false, false)
		busy()
		b.kill()
		stop()
		k.st.Kills++
		b = k.start(r, fmt.Sprintf("round %d after kill -9 and restart", r))
		if r%2 == 1 { // power loss before any new traffic
			k.powerLoss(b, true)
			break
		}
		stop = k.traffic(b, r, false, false)
		time.Sleep(time.Duration(20+k.rng.IntN(131)) * time.Millisecond)
		k.powerLoss(b, true)
		stop()
	default: // torn-op, torn-seq
		k.kinds[r] = k.fault
		stop := k.traffic(b, r, false, true)
		busy()
		fired := k.tear(r)
		b.kill()
		stop()
		if fired {
			k.st.Fired++
		} else {
			k.st.NotFired++
			k.fs.killDaemon() // a plain power loss instead
		}
		k.fs.remount()
		k.st.PowerLosses++
	}
}

// powerLoss freezes b, checks (with check) the cache did not fill, kills
// the LazyFS daemon, then b, and mounts the root again.
func (k *lzRun) powerLoss(b *broker, check bool) {
	k.t.Helper()
	if err := b.freeze(); err != nil {
		k.t.Fatal(err)
	}
	if check {
		k.checkCache()
	}
	k.fs.killDaemon()
	b.kill()
	k.fs.remount()
	k.st.PowerLosses++
}

// stall is the brokers' OnStall: broker b was not ready within
// startTimeout or not reaped after SIGKILL, which on FUSE means a request
// the daemon never answered (a process killed inside a FUSE request is
// reaped only once the daemon answers it; seen once in CI, in the
// kill-restart-loss rounds under load). It logs where the broker's and
// the daemon's threads wait and kills the daemon: a power loss, which
// ends the round as such (every check of the next start still applies;
// the next start mounts again). After lzMaxStalls the test fails.
func (k *lzRun) stall(b *broker) bool {
	t := k.t
	if !k.fs.alive() {
		return false // the daemon is dead already: nothing of ours to release
	}
	k.st.Stalls++
	t.Logf("LazyFS stall %d (mode %s, fault %s, round %d): broker pid %d stuck; the daemon is killed (a power loss)\nbroker threads:\n%sLazyFS threads:\n%sLazyFS log tail:\n%s",
		k.st.Stalls, k.mode.Name, k.fault, k.cur, b.cmd.Process.Pid, procStacks(b.cmd.Process.Pid), procStacks(k.fs.cmd.Process.Pid), k.fs.tail())
	if k.st.Stalls > lzMaxStalls {
		t.Errorf("LazyFS stalled %d times in one fault model (at most %d): the rounds test nothing on a filesystem that hangs", k.st.Stalls, lzMaxStalls)
	}
	k.fs.killDaemon()
	k.st.PowerLosses++
	if !strings.Contains(k.kinds[k.cur], "LazyFS stalled") {
		k.kinds[k.cur] += " (LazyFS stalled: a power loss)"
	}
	return true
}

// daemonState says, for a failure report, whether the LazyFS daemon is
// still running, and if not how it ended and the tail of its log: a write
// answered "software caused connection abort" (ECONNABORTED) means the
// FUSE connection was gone while the broker was running.
func (k *lzRun) daemonState() string {
	if k.fs.alive() {
		return " [LazyFS daemon running]"
	}
	return fmt.Sprintf(" [LazyFS daemon ended: %v; its log:\n%s]", k.fs.cmd.ProcessState, k.fs.tail())
}

// checkCache fails the test when LazyFS's cache is lazyCacheMax full.
func (k *lzRun) checkCache() {
	k.t.Helper()
	u := k.fs.cacheUsage()
	k.st.MaxCache = max(k.st.MaxCache, u)
	if u >= lazyCacheMax {
		k.t.Fatalf("LazyFS cache %.1f%% full (%s): with apply_eviction=false a full cache writes through; raise lazyCacheSize", u, lazyCacheSize)
	}
}

// controlBurst publishes lzControlBurst ACCEPTED messages to lzControl at
// once and freezes the broker (SIGSTOP, from the goroutine that got it)
// as soon as freezeAt of them were answered. With freezeAt a quarter,
// the most recent answers are then still queued or in a group commit not
// yet fsynced, for the power loss that follows (a freeze at a random
// moment of the background control load often finds the writer's queue
// empty: under go test -race a round could lose nothing); with the
// filesystem stalled first, all of them are. The returned wait, called
// after the broker was killed, waits for the burst's publishes; answers
// sent before the freeze are read and recorded as ACKs.
func (k *lzRun) controlBurst(b *broker, r, freezeAt int) (wait func()) {
	var (
		wg       sync.WaitGroup
		answered atomic.Int64
		freeze   sync.Once
		frozen   = make(chan struct{})
	)
	stopBroker := func() {
		freeze.Do(func() {
			if err := b.freeze(); err != nil {
				k.t.Error(err)
			}
			close(frozen)
		})
	}
	for i := range lzControlBurst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := sentMsg{Round: r, Topic: lzControl, ID: fmt.Sprintf("r%03d-burst-%02d-%d", r, i, b.cmd.Process.Pid), Level: "accepted"}
			m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "pad": strings.Repeat("b", 100)})
			m.Res = publish(b.base, m.Topic, m.ID, m.Content, m.Level)
			if m.Res.Replied && answered.Add(1) == int64(freezeAt) {
				stopBroker()
			}
			k.mu.Lock()
			k.sent = append(k.sent, m)
			k.mu.Unlock()
			if m.Res.Replied && (!m.Res.Ack || m.Res.Offset != -1 || m.Res.Level != "ACCEPTED") {
				k.t.Errorf("round %d: accepted publish %s answered %+v", r, m.ID, m.Res)
			}
		}()
	}
	all := make(chan struct{})
	go func() { wg.Wait(); close(all) }()
	select {
	case <-frozen:
	case <-all: // fewer answers than freezeAt (a failure is reported)
		stopBroker()
	case <-time.After(5 * time.Second):
		k.t.Errorf("round %d: %d of %d ACCEPTED publishes answered within 5s, waiting for %d", r, answered.Load(), lzControlBurst, freezeAt)
		stopBroker()
	}
	return wg.Wait
}

// tearVariants are the torn faults' parameters, by round.
var tearVariants = map[string][]string{
	"torn-op":  {"parts=2::persist=1", "parts=2::persist=2", "parts=3::persist=1,3"},
	"torn-seq": {"op=write::persist=1,2", "op=write::persist=2", "op=write::persist=1,3"},
}

// tear injects the round's torn fault on the last segment (torn-op) or
// offset index (torn-seq) of a random topic and waits until LazyFS killed
// itself; false when it did not fire within lzFaultWait. A topic that
// rotated to a new segment before the fault fired no longer writes the
// file: every 200 ms the newest file gets the fault too (the first to
// fire ends the daemon).
func (k *lzRun) tear(r int) bool {
	t := k.t
	t.Helper()
	topic := lzTopics[k.rng.IntN(len(lzTopics))]
	ext := ".mmm"
	if k.fault == "torn-seq" {
		ext = ".idx"
	}
	v := tearVariants[k.fault]
	variant := v[(r-1)%len(v)]
	k.kinds[r] = k.fault + " " + variant
	injected := map[string]bool{}
	var cmds []string
	deadline := time.Now().Add(lzFaultWait)
	for {
		names, err := filepath.Glob(filepath.Join(k.fs.root, topic, "*"+ext))
		if err != nil || len(names) == 0 {
			t.Fatalf("round %d: no %s file of %s under %s (%v)", r, ext, topic, k.fs.root, err)
		}
		sort.Strings(names)
		if last := names[len(names)-1]; !injected[last] && k.fs.alive() {
			injected[last] = true
			cmd := fmt.Sprintf("lazyfs::%s::file=%s::%s", k.fault, last, variant)
			cmds = append(cmds, cmd)
			if _, err := k.fs.command(cmd, "configured successfully"); err != nil && k.fs.alive() {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		if k.fs.waitExit(200 * time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("round %d: %s did not fire within %s (%d files tried)", r, cmds[len(cmds)-1], lzFaultWait, len(cmds))
			return false
		}
	}
	if !strings.Contains(k.fs.logText(), "Added crash fault") {
		t.Fatalf("round %d: LazyFS exited without having injected %v:\n%s", r, cmds, k.fs.tail())
	}
	return true
}

// traffic starts lzProducers producers publishing DURABLE to lzTopics
// (and, with control, lzControlProducers publishing ACCEPTED to
// lzControl) until the returned stop is called or the broker is gone. A
// NACK fails the test unless nackOK (a torn fault kills LazyFS under the
// running broker, whose writes then fail).
func (k *lzRun) traffic(b *broker, r int, control, nackOK bool) (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	n := lzProducers
	if control {
		n += lzControlProducers
	}
	for g := range n {
		prng := rand.New(rand.NewPCG(k.rng.Uint64(), uint64(g)))
		level, topics := "durable", lzTopics
		if g >= lzProducers {
			level, topics = "accepted", []string{lzControl}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				m := sentMsg{Round: r, Topic: topics[prng.IntN(len(topics))], ID: fmt.Sprintf("r%03d-g%d-%05d-%d", r, g, i, b.cmd.Process.Pid), Level: level}
				m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "pad": strings.Repeat("x", prng.IntN(160))})
				m.Res = publish(b.base, m.Topic, m.ID, m.Content, level)
				k.mu.Lock()
				k.sent = append(k.sent, m)
				k.mu.Unlock()
				if !m.Res.Replied {
					return // the broker is gone
				}
				if !m.Res.Ack {
					if !nackOK {
						k.t.Errorf("round %d: publish %s NACK %d: %s%s", r, m.ID, m.Res.Status, m.Res.Err, k.daemonState())
					}
					return
				}
				if level == "accepted" && (m.Res.Offset != -1 || m.Res.Level != "ACCEPTED") {
					k.t.Errorf("round %d: accepted publish %s answered %+v", r, m.ID, m.Res)
					return
				}
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

// start starts the broker on the mount, counts what recovery changed and
// any refused topic, and reads everything back (verify). On a refusal the
// test fails and the fault model goes on on a fresh data root.
func (k *lzRun) start(r int, label string) *broker {
	t := k.t
	t.Helper()
	if !k.fs.alive() { // killed by a stall
		k.fs.remount()
	}
	c := k.conf(r)
	c.MayDieStarting = true // a startup failure is judged here
	b := startBroker(t, c)
	if b.stalled {
		return k.start(r, label+", again after a LazyFS stall")
	}
	select {
	case <-b.exited:
		if k.staleTruncate(b.logText()) {
			return k.start(r, label+", again after LazyFS answered a truncate with a stale ENOENT")
		}
		t.Fatalf("%s: broker exited during startup: %v%s\n%s", label, b.waitErr, k.daemonState(), b.logTail())
	default:
	}
	k.recovery(b)
	refused := k.refused(b)
	for tp, why := range refused {
		msg := fmt.Sprintf("%s (mode %s, fault %s, round ended by %s): topic %s refused: %s", label, k.mode.Name, k.fault, k.kinds[r-1], tp, why)
		k.st.Refusals = append(k.st.Refusals, msg)
		t.Errorf("%s\n%s", msg, b.logTail())
	}
	k.verify(b, label, refused)
	if len(refused) > 0 {
		b.kill()
		k.fresh()
		return k.start(r, label+", on a fresh data root")
	}
	return b
}

// lazyTruncateENOENT matches the startup failure of a broker whose
// recovery had an ftruncate(2) of an open descriptor answered ENOENT, as
// the storage engine's repair ("truncate segment|index <path>: ...") and
// os.(*File).Truncate ("truncate <path>: ...") word it: a descriptor pins
// its inode, so no Linux filesystem answers that. LazyFS does: its
// truncate handler (lfs_truncate) returns -errno whenever its local res
// is -1, and on the path taken for every file in its cache (any file
// opened since the mount) res is never assigned — an uninitialized int,
// in this build the stack slot -0x334(%rbp), compared with -1 at
// lfs_truncate+0x9f0. A debugger on the daemon saw stack garbage there
// (21888, 32558: halves of old pointers) and errno 2 left from a lookup
// of a missing name, at every one of 3,300 truncates; the cut itself is
// applied to its cache before the check. When the garbage is -1 the
// answer is ENOENT and the broker stops with "startup failed" (an I/O
// error is no corruption: no topic is quarantined for it); setting that
// slot to -1 once under the debugger, while a broker restarted after kill
// -9, failed its startup exactly so. An open that fails is worded "open
// <path>: ..." and does not match.
var lazyTruncateENOENT = regexp.MustCompile(`startup failed: .*truncate (?:segment|index) (/\S+): truncate (/\S+): no such file or directory`)

// staleTruncate reports whether a broker's startup failed, by its log, on
// LazyFS's stale truncate answer (lazyTruncateENOENT) for a file that is
// there: then it logs and counts it (more than lzMaxSpurious in one fault
// model fails the test) and the caller starts the broker again on the
// same data root, where recovery plans and applies the cut again (each
// step of a repair leaves what the next start plans the same way) and
// every check of a start applies. Any other startup failure, or a named
// file that is missing, is the broker's.
func (k *lzRun) staleTruncate(log string) bool {
	m := lazyTruncateENOENT.FindStringSubmatch(log)
	if m == nil || m[1] != m[2] {
		return false
	}
	if _, err := os.Stat(m[1]); err != nil {
		return false
	}
	k.st.Spurious++
	k.t.Logf("LazyFS answered the truncate of an open, existing file with ENOENT (its uninitialized result; %d in this fault model): %s; the broker starts again on the same data root", k.st.Spurious, m[0])
	if k.st.Spurious > lzMaxSpurious {
		k.t.Errorf("LazyFS answered %d truncates with a stale ENOENT in one fault model (at most %d)", k.st.Spurious, lzMaxSpurious)
	}
	return true
}

// recovery adds up the numeric fields of the startup log's "recovery
// changed the topic" lines (cut-entries, truncated-bytes,
// reindexed-entries, and any the engine adds).
func (k *lzRun) recovery(b *broker) {
	for _, line := range strings.Split(b.logText(), "\n") {
		if !strings.Contains(line, "recovery changed the topic") {
			continue
		}
		var v map[string]any
		if json.Unmarshal([]byte(line), &v) != nil {
			continue
		}
		k.st.Recoveries++
		for key, x := range v {
			if f, ok := x.(float64); ok && key != "ts" {
				k.st.Cut[key] += int64(f)
			}
		}
	}
}

// refused lists the topics b refused at startup (quarantined, or failed)
// with the reason: GET /topics, and the startup log's "topic refused"
// line where there is one.
func (k *lzRun) refused(b *broker) map[string]string {
	t := k.t
	t.Helper()
	resp, err := httpClient.Get(b.base + "/topics")
	if err != nil {
		t.Fatalf("GET /topics: %v", err)
	}
	defer resp.Body.Close()
	var v struct {
		Topics []struct {
			Name   string `json:"name"`
			Failed string `json:"failed"`
		} `json:"topics"`
		Quarantined map[string]string `json:"quarantined"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&v) != nil {
		t.Fatalf("GET /topics: %d", resp.StatusCode)
	}
	out := map[string]string{}
	for n, why := range v.Quarantined {
		out[n] = "quarantined: " + why
	}
	for _, tp := range v.Topics {
		if tp.Failed != "" {
			out[tp.Name] = "failed: " + tp.Failed
		}
	}
	for _, line := range strings.Split(b.logText(), "\n") {
		if !strings.Contains(line, "topic refused") {
			continue
		}
		var l struct {
			Topic string `json:"topic"`
		}
		if json.Unmarshal([]byte(line), &l) == nil {
			out[l.Topic] += " [log: " + line + "]"
		}
	}
	return out
}

// verify reads every topic not refused back and checks it against what
// was sent: DURABLE acks exact (a failure ends the test at once), ids
// sent and once, and what the previous read-back served still there.
func (k *lzRun) verify(b *broker, label string, refused map[string]string) {
	t := k.t
	t.Helper()
	cur := map[string][]stored{}
	for _, tp := range append(append([]string(nil), lzTopics...), lzControl) {
		if _, bad := refused[tp]; bad {
			continue
		}
		l, err := readAll(b.base, tp)
		if err != nil {
			t.Fatalf("%s: read back %s: %v", label, tp, err)
		}
		cur[tp] = l
	}
	k.mu.Lock()
	var sent []sentMsg
	unverified := 0
	for _, m := range k.sent {
		if _, bad := refused[m.Topic]; !bad {
			sent = append(sent, m)
		} else if m.Level == "durable" && m.Res.Ack {
			unverified++
		}
	}
	k.mu.Unlock()
	var tl tally
	bad := checkAcked(sent, cur, &tl)
	bad = append(bad, checkLogIDs(sent, cur)...)
	if len(bad) > 0 {
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("... and %d more", len(bad)-30))
		}
		t.Fatalf("%s: %d violations (mode %s, fault %s, seed %d, root %s):\n  %s", label, len(bad), k.mode.Name, k.fault, k.seed, k.fs.root, strings.Join(bad, "\n  "))
	}
	// Served, then lost: only the DURABLE topics (ACCEPTED entries may be
	// visible before any fsync).
	prevD, curD := map[string][]stored{}, map[string][]stored{}
	for _, tp := range lzTopics {
		if _, bad := refused[tp]; !bad {
			prevD[tp], curD[tp] = k.prev[tp], cur[tp]
		}
	}
	for _, v := range checkPrefix(prevD, curD) {
		msg := fmt.Sprintf("%s (mode %s, fault %s, round ended by %s): %s", label, k.mode.Name, k.fault, k.lastKind(), v)
		k.st.ServedLost = append(k.st.ServedLost, msg)
		t.Errorf("served, then lost: %s", msg)
	}
	c := lzCount{Acked: tl.AckedDurable, Lost: tl.LostDurable, Unverified: unverified, AccAcked: tl.AckedAccepted, AccLost: tl.LostAccepted}
	ids := map[string]bool{}
	for _, s := range cur[lzControl] {
		ids[s.ID] = true
	}
	perRound := map[int][2]int{} // round → ACCEPTED acked, lost
	for _, m := range sent {
		if m.Level != "accepted" || !m.Res.Ack {
			continue
		}
		n := perRound[m.Round]
		n[0]++
		if !ids[m.ID] {
			n[1]++
			if strings.HasPrefix(k.kinds[m.Round], "power-loss") {
				c.AccLostPower++
			}
		}
		perRound[m.Round] = n
	}
	if last := k.lastKind(); last != "" {
		r := 0
		for x := range k.kinds {
			r = max(r, x)
		}
		t.Logf("%s: round %d ended by %s; control ACCEPTED acked %d, lost %d", label, r, last, perRound[r][0], perRound[r][1])
	}
	k.now, k.prev = c, cur
}

func (k *lzRun) lastKind() string {
	last := 0
	for r := range k.kinds {
		last = max(last, r)
	}
	return k.kinds[last]
}

// summary prints the fault model's line and fails on what must not be:
// a lost DURABLE ack or a refusal (already failed), no traffic, and a
// negative control that lost nothing over the power-loss rounds.
func (k *lzRun) summary(rounds int, took time.Duration) {
	t := k.t
	c := k.st.carry.add(k.now)
	keys := make([]string, 0, len(k.st.Cut))
	for key := range k.st.Cut {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	var cut []string
	for _, key := range keys {
		cut = append(cut, fmt.Sprintf("%s=%d", key, k.st.Cut[key]))
	}
	line := fmt.Sprintf("mode=%s %s fault=%s rounds=%d power_losses=%d kills=%d acked=%d lost=%d acked_in_refused_topics=%d refused=%d served_then_lost=%d recoveries=%d cut{%s}",
		k.mode.Name, k.pre.name, k.fault, rounds, k.st.PowerLosses, k.st.Kills, c.Acked, c.Lost, c.Unverified, len(k.st.Refusals), len(k.st.ServedLost), k.st.Recoveries, strings.Join(cut, " "))
	if k.fault == "torn-op" || k.fault == "torn-seq" {
		line += fmt.Sprintf(" fired=%d not_fired=%d", k.st.Fired, k.st.NotFired)
	}
	if k.fault == "power-loss" {
		line += fmt.Sprintf(" control_accepted_acked=%d control_accepted_lost=%d control_lost_in_power_loss_rounds=%d", c.AccAcked, c.AccLost, c.AccLostPower)
	}
	line += fmt.Sprintf(" stalls=%d lazyfs_truncate_enoent=%d data_roots=%d max_cache=%.3f%% seed=%d took=%s", k.st.Stalls, k.st.Spurious, k.st.Roots, k.st.MaxCache, k.seed, took.Round(100*time.Millisecond))
	t.Log(line)
	fmt.Println("crashtest lazyfs:", line)
	if c.Acked == 0 {
		t.Errorf("no DURABLE publish was acknowledged: the rounds tested nothing")
	}
	if c.Lost != 0 {
		t.Errorf("%d DURABLE-acknowledged messages lost", c.Lost)
	}
	if k.fault == "power-loss" && c.AccLostPower == 0 {
		t.Errorf("negative control: the ACCEPTED publishes of the power-loss rounds lost nothing (%d acked): the power losses took nothing the checks could see", c.AccAcked)
	}
	if (k.fault == "torn-op" || k.fault == "torn-seq") && k.st.Fired == 0 {
		t.Errorf("%s never fired in %d rounds", k.fault, rounds)
	}
}
