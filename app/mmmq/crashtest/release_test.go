package crashtest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReleaseBuildHasNoCrashpoints builds mmmq without the crashpoints tag
// (the release build) and shows the injection points are not in it: the
// binary does not contain the variable name, and started with
// MMMQ_CRASHPOINT set it refuses to start, because its config rejects the
// unknown MMMQ_ variable instead of a crash build consuming it.
func TestReleaseBuildHasNoCrashpoints(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "mmmq-release")
	if err := buildBinary(bin, ""); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("MMMQ_CRASHPOINT")) || bytes.Contains(data, []byte("after-ack-before-checkpoint")) {
		t.Fatal("the release binary contains the crash points")
	}
	if crash, _ := os.ReadFile(binPath); !bytes.Contains(crash, []byte("MMMQ_CRASHPOINT")) {
		t.Fatal("the crash-test binary lacks the crash points: this test would prove nothing")
	}
	cfg := filepath.Join(dir, "mmmq.yaml")
	if err := os.WriteFile(cfg, []byte("server:\n  host: 127.0.0.1\n  port: 0\nmmmq:\n  broker:\n    storage:\n      root-dir: "+filepath.Join(dir, "data")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--config", cfg)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MMMQ_") { // e.g. MMMQ_LONG of make crash
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "MMMQ_CRASHPOINT=after-segment-write")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "unknown environment variable MMMQ_CRASHPOINT") {
		t.Fatalf("release binary with MMMQ_CRASHPOINT: err=%v, output:\n%s", err, out)
	}
}
