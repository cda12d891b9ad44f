package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// build compiles this binary into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "custom-broker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runBroker runs bin in a fresh directory with env added to the process
// environment (MMMQ_ variables of the test process removed) and returns
// its exit code and stderr. A broker that starts is a test failure: it is
// killed after the timeout.
func runBroker(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MMMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "MMMQ_BROKER_STORAGE_ROOT_DIR="+filepath.Join(cmd.Dir, "data"), "MMMQ_SERVER_PORT=0")
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), stderr.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, stderr.String()
	case <-t.Context().Done():
	}
	cmd.Process.Kill()
	<-done
	t.Fatalf("the broker did not exit; stderr:\n%s", stderr.String())
	return 0, ""
}

// oneLine fails unless stderr is exactly one line starting with
// "custom-broker: startup failed:" (the binary's own name) and containing
// every want.
func oneLine(t *testing.T, code int, stderr string, want ...string) {
	t.Helper()
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "custom-broker: startup failed: ") {
		t.Fatalf("stderr is %d lines (%d bytes), want one \"custom-broker: startup failed:\" line:\n%.2000s", len(lines), len(stderr), stderr)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("stderr line %q does not mention %q", lines[0], w)
		}
	}
}

func TestStartupFailuresAreOneLine(t *testing.T) {
	bin := build(t)
	t.Run("bad env value", func(t *testing.T) {
		code, stderr := runBroker(t, bin, []string{"MMMQ_SERVER_PORT=abc"})
		oneLine(t, code, stderr, "server.port", "MMMQ_SERVER_PORT")
	})
	t.Run("provider error: duplicate dispatcher name", func(t *testing.T) {
		cfg := filepath.Join(t.TempDir(), "dup.yaml")
		yaml := "mmmq:\n  broker:\n    dispatchers:\n      - name: order-dispatcher\n        host: http://127.0.0.1:9\n        patterns: [\"x.*\"]\n"
		if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stderr := runBroker(t, bin, nil, "--config", cfg)
		oneLine(t, code, stderr, `duplicate dispatcher name "order-dispatcher"`, "config mmmq.broker.dispatchers[0]",
			"Go provider github.com/mmmq/mmmq/examples/custom-broker/orders.NewOrderDispatcher")
	})
	t.Run("bad plugin section value", func(t *testing.T) {
		code, stderr := runBroker(t, bin, []string{"MMMQ_ORDERS_ORDER_HOST=not a host"})
		oneLine(t, code, stderr, "mmmq.orders.order-host")
	})
	t.Run("dropped module's key", func(t *testing.T) {
		code, stderr := runBroker(t, bin, []string{"MMMQ_LINEPROTO_ADDR=127.0.0.1:0"})
		oneLine(t, code, stderr, "mmmq.lineproto.addr")
	})
	t.Run("missing --config file", func(t *testing.T) {
		code, stderr := runBroker(t, bin, nil, "--config", "nope.yaml")
		oneLine(t, code, stderr, "nope.yaml", "--config")
	})
	t.Run("bad usage exits 2", func(t *testing.T) {
		if code, _ := runBroker(t, bin, nil, "--no-such-flag"); code != 2 {
			t.Errorf("unknown flag: exit %d, want 2", code)
		}
		if code, _ := runBroker(t, bin, nil, "stray"); code != 2 {
			t.Errorf("stray argument: exit %d, want 2", code)
		}
	})
}

// TestCleanRun starts the binary in a directory without configs/, so on the
// built-in defaults: its log names no config file and the absolute data
// directory on one line, it answers /readyz, and SIGTERM stops it with exit 0.
func TestCleanRun(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	cmd := exec.Command(bin)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MMMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "MMMQ_BROKER_STORAGE_ROOT_DIR=data", "MMMQ_SERVER_HOST=127.0.0.1", "MMMQ_SERVER_PORT=0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	type record struct {
		Msg        string `json:"msg"`
		ConfigFile string `json:"config-file"`
		DataDir    string `json:"data-dir"`
		Addr       string `json:"addr"`
	}
	var cfgLine *record
	addr := ""
	sc := bufio.NewScanner(stderr)
	for addr == "" && sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("stderr line is not a JSON log record: %q", sc.Text())
		}
		switch r.Msg {
		case "configuration":
			cfgLine = &r
		case "http api listening":
			addr = r.Addr
		}
	}
	if addr == "" {
		t.Fatalf("the broker exited before listening (%v)", cmd.Wait())
	}
	drained := make(chan struct{})
	var after []string // the messages after the listener's line
	var stopReason string
	go func() { // keep draining, so the broker never blocks on its log
		for sc.Scan() {
			var r struct{ Msg, Reason string }
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				after = append(after, r.Msg)
				if r.Msg == "stopping" {
					stopReason = r.Reason
				}
			}
		}
		close(drained)
	}()
	if cfgLine == nil {
		t.Fatal("no \"configuration\" log line before the listener")
	}
	if want := filepath.Join(dir, "data"); cfgLine.ConfigFile != "none, built-in defaults" || cfgLine.DataDir != want {
		t.Errorf("configuration line: config-file %q data-dir %q, want %q and %q", cfgLine.ConfigFile, cfgLine.DataDir, "none, built-in defaults", want)
	}
	ready := false
	for i := 0; i < 200 && !ready; i++ {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			ready = resp.StatusCode == http.StatusOK
		}
		if !ready {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if !ready {
		t.Fatal("/readyz never answered 200")
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-drained
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0", err)
	}
	// The log says that the signal arrived and that the stop finished
	// (round-3 item 18: nothing said either).
	if stopReason != "signal terminated" || len(after) == 0 || after[len(after)-1] != "stopped" {
		t.Errorf("stop lines: reason %q, messages after the listener %q; want \"stopping\" (signal terminated) first and \"stopped\" last", stopReason, after)
	}
}
