package crashtest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The LazyFS harness: one LazyFS daemon at a time mounted over a per-test
// root directory (see lazyfs_test.go for what the rounds do with it).

const (
	// lazyCacheSize is LazyFS's page cache, pre-allocated (and zeroed) at
	// every mount. With apply_eviction=false a full cache does not evict:
	// LazyFS then writes every further write straight to the root
	// directory, where it survives a "power loss", which would weaken the
	// rounds silently. A round writes a few MiB; 256 MiB is generous, and
	// every power loss first asks lazyfs::display-cache-usage and fails
	// the test at 90% or more.
	lazyCacheSize = "256mb"
	lazyCacheMax  = 90.0 // percent of pages, see lazyCacheSize
	// lazyCmdMax: the daemon reads its FIFO in chunks of 100 bytes and
	// makes the last byte of a read the end of the command, so a command
	// must fit in 99 bytes plus its newline (a longer one is cut and
	// misread). Faults name files by their full path under the root: the
	// root lives in a short temporary directory (lazyBase).
	lazyCmdMax   = 99
	lazyUpWithin = 10 * time.Second // exec to mounted and reading its FIFO
)

// lazyFS is one LazyFS mount: the daemon serving mnt from root, its
// config, faults FIFO and log.
type lazyFS struct {
	t                    testing.TB
	bin, lib             string
	base, root, mnt      string
	cfg, fifo, log, outp string
	cmd                  *exec.Cmd
	exited               chan struct{}
	mounts               int
}

// lazyBin returns the LazyFS binary named by MMMQ_LAZYFS and its library
// directory ($(dirname $MMMQ_LAZYFS)/../lib, where build-lazyfs.sh puts
// libpcache), or why the LazyFS rounds cannot run.
func lazyBin() (bin, lib, why string) {
	bin = os.Getenv("MMMQ_LAZYFS")
	if bin == "" {
		return "", "", "MMMQ_LAZYFS is not set (build LazyFS with ../shared/tools/build-lazyfs.sh and export MMMQ_LAZYFS=<the path it prints>)"
	}
	return bin, filepath.Join(filepath.Dir(bin), "..", "lib"), ""
}

// lazyBase makes the short base directory of one LazyFS data root: the
// faults name files by full path and must fit in lazyCmdMax bytes.
func lazyBase(t testing.TB) string {
	t.Helper()
	parent := os.TempDir()
	if len(parent) > 20 {
		parent = "/tmp"
	}
	base, err := os.MkdirTemp(parent, "lz")
	if err != nil {
		t.Fatal(err)
	}
	return base
}

// newLazyFS mounts LazyFS at BASE/m over BASE/r (a fresh lazyBase) and
// registers its unmount (and the removal of BASE) as a cleanup, so that
// no mount outlives the test, failed or not.
func newLazyFS(t testing.TB, bin, lib string) *lazyFS {
	t.Helper()
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		t.Fatalf("MMMQ_LAZYFS=%s is not an executable file (%v)", bin, err)
	}
	for _, tool := range []string{"fusermount3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (Debian package fuse3): LazyFS mounts cannot be removed", tool)
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse: %v: FUSE is not available here", err)
	}
	base := lazyBase(t)
	l := &lazyFS{t: t, bin: bin, lib: lib, base: base, root: filepath.Join(base, "r"), mnt: filepath.Join(base, "m"),
		cfg: filepath.Join(base, "lazyfs.toml"), fifo: filepath.Join(base, "faults.fifo"),
		log: filepath.Join(base, "lazyfs.log"), outp: filepath.Join(base, "lazyfs.out")}
	for _, d := range []string{l.root, l.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	toml := fmt.Sprintf(`[faults]
fifo_path=%q
[cache]
apply_eviction=false
[cache.simple]
custom_size=%q
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile=%q
`, l.fifo, lazyCacheSize, l.log)
	if err := os.WriteFile(l.cfg, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.cleanup)
	l.mount()
	return l
}

// mounted reports whether path is a mount point (/proc/self/mountinfo).
func mounted(path string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT ... (octal escapes for spaces)
		if fs := strings.Fields(sc.Text()); len(fs) > 4 && unescapeMount(fs[4]) == path {
			return true, nil
		}
	}
	return false, sc.Err()
}

var octalEsc = regexp.MustCompile(`\\[0-7]{3}`)

func unescapeMount(s string) string {
	return octalEsc.ReplaceAllStringFunc(s, func(e string) string {
		n, _ := strconv.ParseUint(e[1:], 8, 8)
		return string(rune(n))
	})
}

// mount starts the daemon in the foreground (-f) and waits until mnt is
// mounted and the daemon reads its FIFO. A mount already at mnt (a stale
// one) is refused: the rounds would run on it, not on a fresh cache.
func (l *lazyFS) mount() {
	t := l.t
	t.Helper()
	if m, err := mounted(l.mnt); err != nil || m {
		t.Fatalf("LazyFS: %s is already a mount point (%v): a stale mount; remove it with fusermount3 -u -z %s", l.mnt, err, l.mnt)
	}
	l.mounts++
	_ = os.Remove(l.log)
	out, err := os.OpenFile(l.outp, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	// allow_other is harmless as root (a non-root run needs
	// user_allow_other in /etc/fuse.conf); the broker runs as this user.
	l.cmd = exec.Command(l.bin, l.mnt, "--config-path", l.cfg, "-o", "allow_other",
		"-o", "modules=subdir", "-o", "subdir="+l.root, "-f")
	l.cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+l.lib)
	l.cmd.Stdout, l.cmd.Stderr = out, out
	if err := l.cmd.Start(); err != nil {
		out.Close()
		t.Fatalf("LazyFS: start %s: %v", l.bin, err)
	}
	exited := make(chan struct{})
	l.exited = exited
	cmd := l.cmd
	go func() { _ = cmd.Wait(); out.Close(); close(exited) }()
	deadline := time.Now().Add(lazyUpWithin)
	for {
		select {
		case <-exited:
			t.Fatalf("LazyFS exited while mounting (mount %d): %v\n%s", l.mounts, cmd.ProcessState, l.tail())
		default:
		}
		if m, _ := mounted(l.mnt); m && strings.Contains(l.logText(), "waiting for fault commands") {
			if _, err := os.Stat(l.mnt); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			l.killDaemon()
			t.Fatalf("LazyFS not mounted at %s within %s\n%s", l.mnt, lazyUpWithin, l.tail())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *lazyFS) alive() bool {
	select {
	case <-l.exited:
		return false
	default:
		return true
	}
}

// killDaemon SIGKILLs the daemon and waits until it is reaped: its cache,
// every write not fsynced through it, is gone (a power loss).
func (l *lazyFS) killDaemon() {
	if l.cmd == nil || !l.alive() {
		return
	}
	_ = l.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-l.exited:
	case <-time.After(killTimeout):
		l.t.Errorf("LazyFS pid %d not reaped %s after SIGKILL", l.cmd.Process.Pid, killTimeout)
	}
}

// unmount detaches the mount (lazily: processes may still hold files on
// it) and checks it is gone.
func (l *lazyFS) unmount() error {
	m, err := mounted(l.mnt)
	if err != nil {
		return err
	}
	if !m {
		return nil
	}
	if b, err := exec.Command("fusermount3", "-u", "-z", l.mnt).CombinedOutput(); err != nil {
		return fmt.Errorf("fusermount3 -u -z %s: %v: %s", l.mnt, err, b)
	}
	if m, err := mounted(l.mnt); err != nil || m {
		return fmt.Errorf("%s still mounted after fusermount3 -u -z (%v)", l.mnt, err)
	}
	return nil
}

// remount, after the daemon died (killed, or a torn fault made it exit):
// unmount and mount again.
func (l *lazyFS) remount() {
	l.t.Helper()
	if l.alive() {
		l.t.Fatal("LazyFS remount while the daemon runs")
	}
	if err := l.unmount(); err != nil {
		l.t.Fatal("LazyFS: ", err)
	}
	l.mount()
}

// cleanup (t.Cleanup): daemon killed, mount removed, and BASE removed
// only once nothing is mounted there.
func (l *lazyFS) cleanup() {
	l.killDaemon()
	if err := l.unmount(); err != nil {
		l.t.Errorf("LazyFS cleanup: %v (BASE %s left in place)", err, l.base)
		return
	}
	if err := os.RemoveAll(l.base); err != nil {
		l.t.Errorf("LazyFS cleanup: %v", err)
	}
}

func (l *lazyFS) logText() string {
	b, _ := os.ReadFile(l.log)
	return string(b)
}

func (l *lazyFS) tail() string {
	s := l.logText()
	if o, _ := os.ReadFile(l.outp); len(s) == 0 {
		s = string(o)
	}
	if len(s) > 3000 {
		s = "..." + s[len(s)-3000:]
	}
	return s
}

// command writes one command to the faults FIFO and waits, at most 5 s,
// for the daemon's log to grow by a line containing ack (what the daemon
// logs once it handled it), which it returns.
func (l *lazyFS) command(cmd, ack string) (string, error) {
	if len(cmd) > lazyCmdMax {
		return "", fmt.Errorf("LazyFS command of %d bytes, more than the %d the daemon reads: %s", len(cmd), lazyCmdMax, cmd)
	}
	before := len(l.logText())
	f, err := os.OpenFile(l.fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", fmt.Errorf("open faults FIFO: %w", err)
	}
	_, err = f.WriteString(cmd + "\n")
	f.Close()
	if err != nil {
		return "", fmt.Errorf("write faults FIFO: %w", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if s := l.logText(); len(s) > before {
			for _, line := range strings.Split(s[before:], "\n") {
				if strings.Contains(line, ack) {
					return line, nil
				}
				if strings.Contains(line, "INVALID") || strings.Contains(line, "command unknown") {
					return "", fmt.Errorf("LazyFS refused %q: %s", cmd, s[before:])
				}
			}
		}
		if !l.alive() {
			return "", errors.New("LazyFS exited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return "", fmt.Errorf("LazyFS did not answer %q within 5s", cmd)
}

var cacheUsageRE = regexp.MustCompile(`cache usage \(%pages\) is ([0-9.e+-]+)%`)

// cacheUsage is lazyfs::display-cache-usage: the percentage of the
// cache's pages in use.
func (l *lazyFS) cacheUsage() float64 {
	l.t.Helper()
	line, err := l.command("lazyfs::display-cache-usage", "cache usage")
	if err != nil {
		l.t.Fatal(err)
	}
	m := cacheUsageRE.FindStringSubmatch(line)
	if m == nil {
		l.t.Fatalf("LazyFS cache usage line %q", line)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		l.t.Fatalf("LazyFS cache usage line %q: %v", line, err)
	}
	return v
}

// waitExit waits up to d for the daemon to end on its own (a torn fault
// fired) and reports whether it did.
func (l *lazyFS) waitExit(d time.Duration) bool {
	select {
	case <-l.exited:
		return true
	case <-time.After(d):
		return false
	}
}
