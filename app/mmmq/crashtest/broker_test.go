package crashtest

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Bounds of every process operation.
const (
	startTimeout = 20 * time.Second // exec to /readyz 200
	stopTimeout  = 20 * time.Second // SIGTERM to exit
	killTimeout  = 10 * time.Second // SIGKILL to reaped
)

// dispatcherConf is one entry of mmmq.broker.dispatchers.
type dispatcherConf struct {
	Name     string
	Port     int
	Patterns []string
	// Interval, when > 0, sets commit: {policy: interval, interval, max-count: 8}.
	Interval time.Duration
	// MaxInFlight, when > 0, sets max-in-flight (pushes outstanding per
	// topic).
	MaxInFlight int
	// BatchMax, when > 0, sets batch: {max-messages: BatchMax} (one push
	// carries a JSON array of up to that many messages).
	BatchMax int
	// DeadLetter, when not nil, sets dead-letter ("" turns dead letters
	// off: an exhausted message is logged and skipped).
	DeadLetter *string
	// Ordering, when not "", sets ordering (topic, key or none).
	Ordering string
	// MaxUnacked, when > 0, sets max-unacked (ordering key only: the most
	// messages past the checkpoint).
	MaxUnacked int
	// BreakerFailures and BreakerCooloff, when > 0, set breaker-failures
	// and breaker-cooloff (the circuit breaker); PauseAfter, when > 0,
	// sets pause-after (the auto-pause).
	BreakerFailures int
	BreakerCooloff  time.Duration
	PauseAfter      time.Duration
}

// brokerConf is what a test varies in the broker's YAML.
type brokerConf struct {
	DataDir         string
	SegmentMaxBytes int64
	Dispatchers     []dispatcherConf
	// RetentionMaxBytes, when > 0, sets mmmq.broker.retention.max-bytes
	// with a 20ms check-interval.
	RetentionMaxBytes int64
	// DedupWindow, when not "", sets mmmq.broker.dedup.window (the
	// idempotent-publish window; "0s" turns it off).
	DedupWindow string
	// Crashpoint and CrashAfter set MMMQ_CRASHPOINT(_AFTER); "" for none.
	Crashpoint string
	CrashAfter int
	// MayDieStarting accepts a death during startup (a crash point reached
	// by the dispatchers before /readyz answers, or a refusal to start);
	// startBroker then returns the dead broker.
	MayDieStarting bool
	// IndexSync, when not "", sets mmmq.broker.storage.index-sync
	// ("commit" or "lazy"); IndexSyncInterval, when > 0, its
	// index-sync-interval.
	IndexSync         string
	IndexSyncInterval time.Duration
	// BackoffInitial and BackoffMax, when > 0, set
	// mmmq.broker.dispatch.backoff-initial and backoff-max (else 50ms and
	// 200ms).
	BackoffInitial, BackoffMax time.Duration
	// OnCorruption, when not "", sets mmmq.broker.storage.on-corruption.
	OnCorruption string
	// Preallocate, when not nil, sets mmmq.broker.storage.preallocate
	// (0: off); nil keeps the default (on).
	Preallocate *int64
	// NoDiskGuard sets mmmq.broker.storage.min-free-bytes: 0 (the guard
	// off), for a filesystem whose statfs reports nothing free (LazyFS
	// implements no statfs: FUSE then answers 0 blocks).
	NoDiskGuard bool
	// Metrics serves GET /metrics (off otherwise).
	Metrics bool
	// JetStream, when not "", sets mmmq.broker.storage.backend: jetstream
	// with these comma-separated nats:// URLs (mmmq.jetstream.servers),
	// Replicas copies, LeaseTimeout and RequestTimeout (when > 0).
	JetStream      string
	Replicas       int
	LeaseTimeout   time.Duration
	RequestTimeout time.Duration
	// GroupsLeaseTimeout and GroupsMaxDeliveries, when > 0, set
	// mmmq.broker.groups.lease-timeout and max-deliveries (the lease of a
	// consumer group session, and the deliveries after which a shared
	// group dead-letters a message).
	GroupsLeaseTimeout  time.Duration
	GroupsMaxDeliveries int
	// ScheduleBucketWidth, when > 0, sets
	// mmmq.broker.schedule.bucket-width (the span of due times of one
	// scheduled-message bucket file).
	ScheduleBucketWidth time.Duration
	// OnStall, when not nil, is called when the process was not ready
	// startTimeout after exec or not reaped killTimeout after SIGKILL: a
	// process killed inside a FUSE request waits, unkillable, for the
	// daemon's answer. It returns true when it released what held the
	// process (the LazyFS harness kills its daemon: a power loss); kill
	// then waits killTimeout once more, and startBroker returns the broker
	// killed, with stalled set.
	OnStall func(b *broker) bool
}

// broker is one running mmmq child process.
type broker struct {
	t       testing.TB
	cmd     *exec.Cmd
	base    string // http://127.0.0.1:PORT
	logPath string
	exited  chan struct{}
	waitErr error
	onStall func(*broker) bool
	stalled bool // startBroker gave up on it: see brokerConf.OnStall
}

var startSeq int

// startBroker writes the config, starts the crash-test binary, waits until
// /readyz answers 200 and returns the broker. The port is 0 (any free port);
// the address is read from the broker's "http api listening" log line.
func startBroker(t testing.TB, c brokerConf) *broker {
	t.Helper()
	startSeq++
	dir := filepath.Dir(c.DataDir)
	cfgPath := filepath.Join(dir, fmt.Sprintf("mmmq-%03d.yaml", startSeq))
	logPath := filepath.Join(dir, fmt.Sprintf("mmmq-%03d.log", startSeq))
	if err := os.WriteFile(cfgPath, []byte(brokerYAML(c)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binPath, "serve", "--config", cfgPath)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MMMQ_") { // the config rejects unknown MMMQ_ variables
			env = append(env, kv)
		}
	}
	if c.Crashpoint != "" {
		env = append(env, "MMMQ_CRASHPOINT="+c.Crashpoint)
		if c.CrashAfter > 0 {
			env = append(env, fmt.Sprintf("MMMQ_CRASHPOINT_AFTER=%d", c.CrashAfter))
		}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatal(err)
	}
	b := &broker{t: t, cmd: cmd, logPath: logPath, exited: make(chan struct{}), onStall: c.OnStall}
	go func() {
		b.waitErr = cmd.Wait()
		logf.Close()
		close(b.exited)
	}()
	t.Cleanup(func() { b.kill() })
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-b.exited:
			if c.MayDieStarting {
				return b
			}
			t.Fatalf("broker exited during startup: %v\n%s", b.waitErr, b.logTail())
		default:
		}
		if time.Now().After(deadline) {
			if b.onStall != nil && b.onStall(b) {
				b.kill()
				b.stalled = true
				return b
			}
			b.kill()
			t.Fatalf("broker not ready within %s\n%s", startTimeout, b.logTail())
		}
		if b.base == "" {
			b.base = b.listenAddr()
		}
		if b.base != "" {
			resp, err := httpClient.Get(b.base + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return b
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// brokerPreallocate, when not nil, is the mmmq.broker.storage.preallocate
// of every broker whose brokerConf.Preallocate is nil (a test that needs
// the files without preallocation sets it for its run).
var brokerPreallocate *int64

// brokerYAML is the configuration file of c.
func brokerYAML(c brokerConf) string {
	var y strings.Builder
	fmt.Fprintf(&y, "server:\n  host: 127.0.0.1\n  port: 0\n  shutdown-timeout: 5s\nlogging:\n  level: info\n  format: json\n")
	fmt.Fprintf(&y, "mmmq:\n  broker:\n    storage:\n      root-dir: %q\n", c.DataDir)
	if c.IndexSync != "" {
		fmt.Fprintf(&y, "      index-sync: %s\n", c.IndexSync)
	}
	if c.IndexSyncInterval > 0 {
		fmt.Fprintf(&y, "      index-sync-interval: %s\n", c.IndexSyncInterval)
	}
	if c.OnCorruption != "" {
		fmt.Fprintf(&y, "      on-corruption: %s\n", c.OnCorruption)
	}
	if p := cmp.Or(c.Preallocate, brokerPreallocate); p != nil {
		fmt.Fprintf(&y, "      preallocate: %d\n", *p)
	}
	if c.NoDiskGuard {
		fmt.Fprintf(&y, "      min-free-bytes: 0\n")
	}
	if c.JetStream != "" {
		fmt.Fprintf(&y, "      backend: jetstream\n")
	}
	if c.SegmentMaxBytes > 0 {
		fmt.Fprintf(&y, "    segment:\n      max-bytes: %d\n      max-record-bytes: %d\n", c.SegmentMaxBytes, min(c.SegmentMaxBytes, 1024))
	}
	fmt.Fprintf(&y, "    dispatch:\n      backoff-initial: %s\n      backoff-max: %s\n      timeout: 5s\n",
		cmp.Or(c.BackoffInitial, 50*time.Millisecond), cmp.Or(c.BackoffMax, 200*time.Millisecond))
	if c.GroupsLeaseTimeout > 0 || c.GroupsMaxDeliveries > 0 {
		y.WriteString("    groups:\n")
		if c.GroupsLeaseTimeout > 0 {
			fmt.Fprintf(&y, "      lease-timeout: %s\n", c.GroupsLeaseTimeout)
		}
		if c.GroupsMaxDeliveries > 0 {
			fmt.Fprintf(&y, "      max-deliveries: %d\n", c.GroupsMaxDeliveries)
		}
	}
	if c.ScheduleBucketWidth > 0 {
		fmt.Fprintf(&y, "    schedule:\n      bucket-width: %s\n", c.ScheduleBucketWidth)
	}
	if c.RetentionMaxBytes > 0 {
		fmt.Fprintf(&y, "    retention:\n      max-bytes: %d\n      check-interval: 20ms\n", c.RetentionMaxBytes)
	}
	if c.DedupWindow != "" {
		fmt.Fprintf(&y, "    dedup:\n      window: %s\n", c.DedupWindow)
	}
	if len(c.Dispatchers) > 0 {
		y.WriteString("    dispatchers:\n")
		for _, d := range c.Dispatchers {
			pats, _ := json.Marshal(d.Patterns)
			fmt.Fprintf(&y, "      - name: %s\n        host: http://127.0.0.1:%d\n        patterns: %s\n", d.Name, d.Port, pats)
			if d.Interval > 0 {
				fmt.Fprintf(&y, "        commit: {policy: interval, interval: %s, max-count: 8}\n", d.Interval)
			}
			if d.MaxInFlight > 0 {
				fmt.Fprintf(&y, "        max-in-flight: %d\n", d.MaxInFlight)
			}
			if d.BatchMax > 0 {
				fmt.Fprintf(&y, "        batch: {max-messages: %d}\n", d.BatchMax)
			}
			if d.DeadLetter != nil {
				fmt.Fprintf(&y, "        dead-letter: %q\n", *d.DeadLetter)
			}
			if d.Ordering != "" {
				fmt.Fprintf(&y, "        ordering: %s\n", d.Ordering)
			}
			if d.MaxUnacked > 0 {
				fmt.Fprintf(&y, "        max-unacked: %d\n", d.MaxUnacked)
			}
			if d.BreakerFailures > 0 {
				fmt.Fprintf(&y, "        breaker-failures: %d\n", d.BreakerFailures)
			}
			if d.BreakerCooloff > 0 {
				fmt.Fprintf(&y, "        breaker-cooloff: %s\n", d.BreakerCooloff)
			}
			if d.PauseAfter > 0 {
				fmt.Fprintf(&y, "        pause-after: %s\n", d.PauseAfter)
			}
		}
	}
	fmt.Fprintf(&y, "  metrics:\n    enabled: %t\n", c.Metrics)
	if c.JetStream != "" {
		fmt.Fprintf(&y, "  jetstream:\n    servers: %q\n    replicas: %d\n", c.JetStream, max(c.Replicas, 1))
		if c.LeaseTimeout > 0 {
			fmt.Fprintf(&y, "    lease-timeout: %s\n", c.LeaseTimeout)
		}
		if c.RequestTimeout > 0 {
			fmt.Fprintf(&y, "    request-timeout: %s\n", c.RequestTimeout)
		}
	}
	return y.String()
}

// listenAddr returns "http://ADDR" from the log once the API listens.
func (b *broker) listenAddr() string {
	f, err := os.Open(b.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte("http api listening")) {
			continue
		}
		var v struct {
			Addr string `json:"addr"`
		}
		if json.Unmarshal(line, &v) == nil && v.Addr != "" {
			return "http://" + v.Addr
		}
	}
	return ""
}

// kill sends SIGKILL and waits until the process is reaped.
func (b *broker) kill() {
	select {
	case <-b.exited:
		return
	default:
	}
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-b.exited:
		return
	case <-time.After(killTimeout):
	}
	if b.onStall != nil && b.onStall(b) {
		select {
		case <-b.exited:
			return
		case <-time.After(killTimeout):
		}
	}
	b.t.Errorf("broker pid %d not reaped %s after SIGKILL\n%s", b.cmd.Process.Pid, killTimeout, procStacks(b.cmd.Process.Pid))
}

// freeze stops every thread of the broker (SIGSTOP) and waits, at most
// killTimeout, until each one is stopped or inside an uninterruptible wait
// it will stop on leaving. A process-wide SIGSTOP is not enough on FUSE:
// the kernel hands it to one thread, and when that thread is waiting for
// the daemon (a frozen LazyFS) the stop is not handled until the daemon
// answers, while the other threads run on (seen: a broker answering NACKs
// after the "power loss"). A SIGSTOP sent to each thread (tgkill) is
// handled by the first one that runs, which stops the whole process.
func (b *broker) freeze() error {
	pid := b.cmd.Process.Pid
	deadline := time.Now().Add(killTimeout)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return fmt.Errorf("freeze broker pid %d: %w", pid, err)
		}
		running := 0
		for _, tk := range tasks {
			tid, err := strconv.Atoi(tk.Name())
			if err != nil {
				continue
			}
			switch threadState(pid, tid) {
			case 'T', 't', 'D', 'Z', 'X', 0:
				continue
			}
			running++
			if err := syscall.Tgkill(pid, tid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("freeze broker pid %d thread %d: %w", pid, tid, err)
			}
		}
		if running == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("broker pid %d not frozen %s after SIGSTOP:\n%s", pid, killTimeout, procStacks(pid))
		}
		time.Sleep(time.Millisecond)
	}
}

// threadState is the state letter of /proc/PID/task/TID/stat (R, S, D, T
// ...), 0 when the thread is gone.
func threadState(pid, tid int) byte {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/stat", pid, tid))
	if err != nil {
		return 0
	}
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2]
	}
	return 0
}

// procStacks describes where each thread of process pid waits: its
// state, wait channel and (readable by root) kernel stack, from
// /proc/PID/task. It is what a stall report shows; "" once pid is gone.
func procStacks(pid int) string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return ""
	}
	var out strings.Builder
	for _, tk := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s", pid, tk.Name())
		state := "?"
		if tid, err := strconv.Atoi(tk.Name()); err == nil && threadState(pid, tid) != 0 {
			state = string(threadState(pid, tid))
		}
		comm, _ := os.ReadFile(dir + "/comm")
		wchan, _ := os.ReadFile(dir + "/wchan")
		fmt.Fprintf(&out, "  pid %d tid %s (%s) state %s wchan %s\n", pid, tk.Name(), bytes.TrimSpace(comm), state, wchan)
		if stack, err := os.ReadFile(dir + "/stack"); err == nil && state == "D" {
			for _, l := range strings.Split(strings.TrimSpace(string(stack)), "\n") {
				fmt.Fprintf(&out, "      %s\n", l)
			}
		}
	}
	return out.String()
}

// stop sends SIGTERM and waits for a clean exit (status 0).
func (b *broker) stop() {
	b.t.Helper()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
		if b.waitErr != nil {
			b.t.Fatalf("broker stop: %v\n%s", b.waitErr, b.logTail())
		}
	case <-time.After(stopTimeout):
		b.kill()
		b.t.Fatalf("broker did not stop within %s after SIGTERM", stopTimeout)
	}
}

// waitDeath waits up to d for the process to end on its own (a crash point)
// and reports whether it died of SIGKILL.
func (b *broker) waitDeath(d time.Duration) (killed bool, err error) {
	select {
	case <-b.exited:
	case <-time.After(d):
		return false, fmt.Errorf("broker still alive %s later", d)
	}
	var ee *exec.ExitError
	if errors.As(b.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return ws.Signal() == syscall.SIGKILL, nil
		}
	}
	return false, fmt.Errorf("broker exited without a signal: %v", b.waitErr)
}

// exitCode waits, at most killTimeout, for the process to have ended and
// returns its exit status; -1 when a signal ended it.
func (b *broker) exitCode() int {
	b.t.Helper()
	select {
	case <-b.exited:
	case <-time.After(killTimeout):
		b.t.Fatalf("broker still running %s after it was expected to exit\n%s", killTimeout, b.logTail())
	}
	if b.waitErr == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(b.waitErr, &ee) {
		return ee.ExitCode()
	}
	b.t.Fatalf("broker wait: %v", b.waitErr)
	return -1
}

func (b *broker) alive() bool {
	select {
	case <-b.exited:
		return false
	default:
		return true
	}
}

// logText is the broker's whole output.
func (b *broker) logText() string {
	data, _ := os.ReadFile(b.logPath)
	return string(data)
}

func (b *broker) logTail() string {
	s := b.logText()
	if len(s) > 4000 {
		s = "..." + s[len(s)-4000:]
	}
	return s
}
