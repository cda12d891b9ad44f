// Package jscluster runs a real NATS JetStream cluster as separate
// nats-server processes for Go tests: the server pinned in go.mod (the tool
// directive's github.com/nats-io/nats-server/v2), built once per test
// binary, on free loopback ports, each node with its own store directory and
// `sync_interval: always` (every write fsynced before it is acknowledged).
//
// Processes, not an embedded server, so that a test can do to a node what an
// operator or a crash does to a real one: SIGKILL it ([Cluster.Kill]),
// start it again on its data ([Cluster.Restart]), or freeze it
// ([Cluster.Stop], [Cluster.Cont]).
//
//	c := jscluster.Start(t, 3)
//	nc, err := nats.Connect(strings.Join(c.URLs(), ","))
//
// Every node is stopped (SIGKILL) when the test ends; when the test failed,
// the last lines of each node's log are logged first.
package jscluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serverPkg is the nats-server main package, at the version go.mod pins.
const serverPkg = "github.com/nats-io/nats-server/v2"

// Options change how [StartOptions] runs the cluster. The zero value is
// what [Start] uses.
type Options struct {
	// Binary is the nats-server executable to run; "" builds the version
	// go.mod pins (once per test binary, into a temporary directory).
	Binary string
	// ReadyTimeout bounds the wait for a node to report JetStream healthy;
	// 0 means 60 s.
	ReadyTimeout time.Duration
}

// Cluster is a running set of nats-server processes that form one JetStream
// cluster (a single node runs standalone JetStream).
type Cluster struct {
	t       testing.TB
	name    string // cluster name, unique per Start
	bin     string
	timeout time.Duration
	nodes   []*node
	release func()
}

type node struct {
	name                         string
	dir, conf, log               string
	clientPort, routePort, mPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	err  error         // cmd.Wait's result, once done is closed
}

// Start starts an n-node cluster and waits until every node reports
// JetStream healthy (in contact with the meta leader and current with it).
// It fails the test at once, with the node's log, when a node cannot start.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartOptions(t, n, Options{})
}

// StartOptions is [Start] with [Options].
func StartOptions(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("jscluster: %d nodes; need at least 1", n)
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 60 * time.Second
	}
	c := &Cluster{t: t, timeout: opts.ReadyTimeout, release: func() {}}
	if opts.Binary != "" {
		c.bin = opts.Binary
	} else {
		bin, release, err := acquireBinary()
		if err != nil {
			t.Fatalf("jscluster: %v", err)
		}
		c.bin, c.release = bin, release
	}
	base := t.TempDir()
	t.Cleanup(c.cleanup)

	// Ports are picked free, then given up for nats-server to take: another
	// process can take one in between. A node that then fails to bind makes
	// Start try again with new ports (at most 3 times).
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		dir := filepath.Join(base, fmt.Sprintf("try%d", attempt))
		if err = c.launch(dir, n); err == nil {
			return c
		}
		c.killAll()
		if !errors.Is(err, errAddrInUse) {
			break
		}
		t.Logf("jscluster: attempt %d: %v; trying other ports", attempt, err)
	}
	t.Fatalf("jscluster: %v", err)
	return nil
}

var errAddrInUse = errors.New("a port was taken by another process")

// launch writes the configs for n nodes under dir and starts them.
func (c *Cluster) launch(dir string, n int) error {
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	c.name = "jsc-" + randHex(4)
	c.nodes = make([]*node, n)
	var routes []string
	for i := range c.nodes {
		nd := &node{
			name:       fmt.Sprintf("n%d", i+1),
			dir:        filepath.Join(dir, fmt.Sprintf("n%d", i+1)),
			clientPort: ports[3*i],
			routePort:  ports[3*i+1],
			mPort:      ports[3*i+2],
		}
		nd.conf = filepath.Join(nd.dir, "nats.conf")
		nd.log = filepath.Join(nd.dir, "nats.log")
		c.nodes[i] = nd
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", nd.routePort))
	}
	for _, nd := range c.nodes {
		if err := os.MkdirAll(nd.dir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(nd.conf, []byte(c.config(nd, routes)), 0o644); err != nil {
			return err
		}
		if err := c.spawn(nd); err != nil {
			return err
		}
	}
	for _, nd := range c.nodes {
		if err := c.awaitReady(nd); err != nil {
			return err
		}
	}
	return nil
}

// config is one node's nats-server configuration.
func (c *Cluster) config(nd *node, routes []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", nd.name, nd.clientPort, nd.mPort)
	// sync_interval always: every write fsynced on each replica before its
	// ack (NATS's default fsyncs every 2 minutes).
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  sync_interval: always\n}\n", filepath.Join(nd.dir, "js"))
	if len(c.nodes) > 1 {
		fmt.Fprintf(&b, "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  routes: [\n", c.name, nd.routePort)
		for _, r := range routes {
			fmt.Fprintf(&b, "    %s\n", r)
		}
		b.WriteString("  ]\n}\n")
	}
	return b.String()
}

// spawn starts nd's process, its output appended to nd.log.
func (c *Cluster) spawn(nd *node) error {
	f, err := os.OpenFile(nd.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy
	fmt.Fprintf(f, "=== jscluster: start %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), nd.name)
	cmd := exec.Command(c.bin, "-c", nd.conf)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("node %s: cannot run %s: %w", nd.name, c.bin, err)
	}
	done := make(chan struct{})
	nd.mu.Lock()
	nd.cmd, nd.done, nd.err = cmd, done, nil
	nd.mu.Unlock()
	go func() {
		err := cmd.Wait()
		nd.mu.Lock()
		nd.err = err
		nd.mu.Unlock()
		close(done)
	}()
	return nil
}

// awaitReady waits until nd's /healthz answers 200 (JetStream enabled, in
// contact with the meta leader and current with it, its streams recovered)
// and checks that the server answering is nd: its name, this cluster's name
// and sync_interval always.
func (c *Cluster) awaitReady(nd *node) error {
	nd.mu.Lock()
	done := nd.done
	nd.mu.Unlock()
	mon := fmt.Sprintf("http://127.0.0.1:%d", nd.mPort)
	deadline := time.Now().Add(c.timeout)
	last := "no answer"
	for {
		select {
		case <-done:
			return c.exited(nd, "at startup")
		default:
		}
		code, body, err := get(mon + "/healthz")
		switch {
		case err != nil:
			last = err.Error()
		case code == http.StatusOK:
			return c.checkIdentity(nd, mon)
		default:
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(string(body)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s (pid %d): not healthy after %s (last /healthz: %s)%s", nd.name, c.pidOf(nd), c.timeout, last, tail(nd.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) checkIdentity(nd *node, mon string) error {
	var v struct {
		Name    string `json:"server_name"`
		Cluster struct {
			Name string `json:"name"`
		} `json:"cluster"`
		JetStream struct {
			Config struct {
				SyncAlways bool `json:"sync_always"`
			} `json:"config"`
		} `json:"jetstream"`
	}
	_, body, err := get(mon + "/varz")
	if err == nil {
		err = json.Unmarshal(body, &v)
	}
	if err != nil {
		return fmt.Errorf("node %s: /varz: %v", nd.name, err)
	}
	wantCluster := c.name
	if len(c.nodes) == 1 {
		wantCluster = ""
	}
	if v.Name != nd.name || v.Cluster.Name != wantCluster {
		return fmt.Errorf("node %s: port %d answered by another server (name %q, cluster %q)", nd.name, nd.mPort, v.Name, v.Cluster.Name)
	}
	if !v.JetStream.Config.SyncAlways {
		return fmt.Errorf("node %s: JetStream runs without sync_interval always", nd.name)
	}
	return nil
}

// exited describes nd's exit, with the end of its log.
func (c *Cluster) exited(nd *node, when string) error {
	nd.mu.Lock()
	werr := nd.err
	nd.mu.Unlock()
	t := tail(nd.log)
	err := fmt.Errorf("node %s (%s) exited %s: %v%s", nd.name, c.bin, when, werr, t)
	if strings.Contains(t, "address already in use") {
		return fmt.Errorf("%w: %w", errAddrInUse, err)
	}
	return err
}

// URLs are the client URLs of all nodes (nats://127.0.0.1:port), running or
// not, in node order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.nodes))
	for i, nd := range c.nodes {
		urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", nd.clientPort)
	}
	return urls
}

// Name is node i's server name ("n1" for i 0), as in stream and meta
// leader fields.
func (c *Cluster) Name(i int) string { return c.node(i).name }

// Index is the index of the node with server name name, or -1.
func (c *Cluster) Index(name string) int {
	for i, nd := range c.nodes {
		if nd.name == name {
			return i
		}
	}
	return -1
}

// MonitorURL is node i's monitoring endpoint (http://127.0.0.1:port), for
// /healthz, /varz and /jsz.
func (c *Cluster) MonitorURL(i int) string {
	return fmt.Sprintf("http://127.0.0.1:%d", c.node(i).mPort)
}

// runningNode is node i, failing the test when it is not running (op
// names the method in the message).
func (c *Cluster) runningNode(op string, i int) *node {
	c.t.Helper()
	nd := c.node(i)
	if !c.running(nd) {
		c.t.Fatalf("jscluster: %s(%d): node %s is not running", op, i, nd.name)
	}
	return nd
}

// Pid is node i's process id, 0 when it is not running.
func (c *Cluster) Pid(i int) int { return c.pidOf(c.node(i)) }

// Kill sends node i SIGKILL and waits for it to exit (a crash: nothing
// flushed, no leader handed over).
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	nd := c.runningNode("Kill", i)
	c.signal(nd, syscall.SIGKILL)
	nd.mu.Lock()
	done := nd.done
	nd.mu.Unlock()
	<-done
}

// Restart starts node i again on its configuration and data, after killing
// it (SIGKILL) if it still runs, and waits until it reports JetStream
// healthy, which includes having caught up on its streams.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	nd := c.node(i)
	if c.running(nd) {
		c.Kill(i)
	}
	if err := c.spawn(nd); err != nil {
		c.t.Fatalf("jscluster: Restart(%d): %v", i, err)
	}
	if err := c.awaitReady(nd); err != nil {
		c.t.Fatalf("jscluster: Restart(%d): %v", i, err)
	}
}

// Stop freezes node i with SIGSTOP: its sockets stay open and nothing
// answers, as on a hung machine or a long GC pause. [Cluster.Cont] resumes it.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	nd := c.runningNode("Stop", i)
	c.signal(nd, syscall.SIGSTOP)
}

// Cont resumes node i after [Cluster.Stop] (SIGCONT).
func (c *Cluster) Cont(i int) {
	c.t.Helper()
	nd := c.runningNode("Cont", i)
	c.signal(nd, syscall.SIGCONT)
}

func (c *Cluster) node(i int) *node {
	c.t.Helper()
	if i < 0 || i >= len(c.nodes) {
		c.t.Fatalf("jscluster: node %d of %d", i, len(c.nodes))
	}
	return c.nodes[i]
}

func (c *Cluster) running(nd *node) bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

func (c *Cluster) pidOf(nd *node) int {
	if !c.running(nd) {
		return 0
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd.Process.Pid
}

func (c *Cluster) signal(nd *node, sig syscall.Signal) {
	nd.mu.Lock()
	cmd := nd.cmd
	nd.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		c.t.Fatalf("jscluster: %s to node %s: %v", sig, nd.name, err)
	}
}

// killAll SIGKILLs every running node and waits for it (a stopped process
// dies of SIGKILL too).
func (c *Cluster) killAll() {
	for _, nd := range c.nodes {
		if c.running(nd) {
			nd.mu.Lock()
			cmd, done := nd.cmd, nd.done
			nd.mu.Unlock()
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

func (c *Cluster) cleanup() {
	if c.t.Failed() {
		for _, nd := range c.nodes {
			if _, err := os.Stat(nd.log); err != nil {
				continue // never started
			}
			c.t.Logf("jscluster: node %s (client port %d, log %s):%s", nd.name, nd.clientPort, nd.log, tail(nd.log))
		}
	}
	c.killAll()
	c.release()
}

// The nats-server binary: built on first use into a temporary directory,
// shared by the clusters of this test binary, removed when the last one
// ends (and built again if another starts later).
var bin struct {
	sync.Mutex
	dir   string
	users int
}

func acquireBinary() (path string, release func(), err error) {
	bin.Lock()
	defer bin.Unlock()
	if bin.dir == "" {
		dir, err := os.MkdirTemp("", "jscluster-")
		if err != nil {
			return "", nil, err
		}
		p := filepath.Join(dir, "nats-server")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", p, serverPkg).CombinedOutput()
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, fmt.Errorf("go build %s: %v\n%s", serverPkg, err, out)
		}
		bin.dir = dir
	}
	bin.users++
	var once sync.Once
	return filepath.Join(bin.dir, "nats-server"), func() {
		once.Do(func() {
			bin.Lock()
			defer bin.Unlock()
			if bin.users--; bin.users == 0 {
				_ = os.RemoveAll(bin.dir)
				bin.dir = ""
			}
		})
	}, nil
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago (all held open at once, so none repeats).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

var client = &http.Client{Timeout: 2 * time.Second}

func get(url string) (int, []byte, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes(), err
}

// tail is the last lines of a log file, each indented, after a newline.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "\n\t(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "\n\t" + strings.Join(lines, "\n\t")
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
