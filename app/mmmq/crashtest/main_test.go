package crashtest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"testing"
)

// binPath is the crash-test build of mmmq, built once by TestMain.
var binPath string

var roundsFlag = flag.Int("crash.rounds", 0, "kill -9 rounds of each TestCrashRandomKill* test in each index-sync mode (0: 3, or 100 with MMMQ_LONG=1) of TestCrashKeyOrdering, TestLazyFSPowerLossKeyOrdering and TestCrashSharedGroup (0: 10, 10 and 8, or 100 with MMMQ_LONG=1), of TestLazyFSPowerLossSharedGroup and TestLazyFSPowerLossScheduled (0: 4, or 16), and of TestCrashScheduled (0: 4, or 30); the run stops 2 minutes before go test -timeout")

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "mmmq-crashtest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binPath = filepath.Join(dir, "mmmq")
	if err := buildBinary(binPath, "crashpoints"); err != nil {
		fmt.Fprintln(os.Stderr, "crashtest:", err)
		return 1
	}
	return m.Run()
}

// buildBinary builds github.com/mmmq/mmmq/app/mmmq into out with the given
// build tags ("" for the release build), bounded to 5 minutes.
func buildBinary(out, tags string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// go test puts its own GOROOT/bin first in PATH, so this is the go
	// command that is running the tests.
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command: %w", err)
	}
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	args = append(args, "github.com/mmmq/mmmq/app/mmmq")
	cmd := exec.CommandContext(ctx, gobin, args...)
	// The broker is a separate, ordinary build: the -race of `make test`
	// instruments this harness, not the child process.
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %v\n%s", args, err, b)
	}
	return nil
}
