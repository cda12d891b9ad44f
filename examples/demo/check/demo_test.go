package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDemoStopsWhenItsBrokerDoesNotStart runs demo.sh with its broker port
// held by another server that answers every request like a ready broker:
// the demo must stop with the bind error and publish nothing there.
func TestDemoStopsWhenItsBrokerDoesNotStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var posts atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
		}
		w.Write([]byte(`{"acknowledgement":"ACK"}`))
	})}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "../demo.sh")
	cmd.Env = append(cmd.Environ(), "DEMO_BROKER_PORT="+strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("demo.sh succeeded against a foreign server on its port:\n%s", out)
	}
	if ctx.Err() != nil {
		t.Fatalf("demo.sh did not stop at once:\n%s", out)
	}
	for _, want := range []string{"broker (pid", "exited at startup", "address already in use"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("demo.sh output does not mention %q:\n%s", want, out)
		}
	}
	if n := posts.Load(); n != 0 {
		t.Errorf("demo.sh sent %d POST requests to the foreign server", n)
	}
}

// TestHoldsPort runs holds_port from ports.sh, which the scripts that start
// servers (demo.sh, .bench/run.sh) source: true only for the process that
// listens.
func TestHoldsPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	self := strconv.Itoa(os.Getpid())
	for _, script := range []string{"../ports.sh"} {
		prog := `source "$1"; holds_port "$2" "$3"`
		check := func(pid, port string) bool {
			out, err := exec.Command("bash", "-c", prog, "bash", script, pid, port).CombinedOutput()
			if len(out) > 0 {
				t.Errorf("%s: holds_port %s %s printed %q", script, pid, port, out)
			}
			return err == nil
		}
		if !check(self, port) {
			t.Errorf("%s: holds_port says this test process does not hold its port %s", script, port)
		}
		if check("1", port) {
			t.Errorf("%s: holds_port says pid 1 holds this test's port %s", script, port)
		}
		if check(self, "1") {
			t.Errorf("%s: holds_port says this process listens on port 1", script)
		}
	}
}
