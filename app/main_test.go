package app_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/fx"

	"github.com/mmmq/mmmq/app"
)

// runMain runs app.Main in a new empty working directory (no configs/) and
// returns its exit code, stdout and stderr.
func runMain(t *testing.T, opts ...app.MainOption) (int, string, string) {
	t.Helper()
	t.Chdir(t.TempDir())
	t.Setenv("MMMQ_SERVER_HOST", "127.0.0.1")
	t.Setenv("MMMQ_SERVER_PORT", "0")
	t.Setenv("MMMQ_BROKER_STORAGE_ROOT_DIR", "data")
	var stdout, stderr strings.Builder
	code := app.Main(append([]app.MainOption{app.WithArgs(nil), app.WithName("mmmq"), app.WithOutput(&stdout, &stderr)}, opts...)...)
	return code, stdout.String(), stderr.String()
}

func oneFailureLine(t *testing.T, stderr string, want ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "mmmq: startup failed: ") {
		t.Fatalf("stderr %q: want one \"mmmq: startup failed:\" line", stderr)
	}
	for _, w := range want {
		if !strings.Contains(lines[0], w) {
			t.Errorf("stderr line %q does not mention %q", lines[0], w)
		}
	}
}

// A path the program names must exist: the binary author's, $MMMQ_CONFIG,
// --config. Only the built-in default may be missing (TestMainStops).
func TestMainNamedConfigMustExist(t *testing.T) {
	t.Run("author's path", func(t *testing.T) {
		code, _, stderr := runMain(t, app.WithConfigPath("configs/mmmq.yaml"))
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		oneFailureLine(t, stderr, "configs/mmmq.yaml", "built-in config path")
	})
	t.Run("MMMQ_CONFIG", func(t *testing.T) {
		t.Setenv("MMMQ_CONFIG", "elsewhere.yaml")
		code, _, stderr := runMain(t, app.WithConfigPath("configs/mmmq.yaml"))
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		oneFailureLine(t, stderr, "elsewhere.yaml", "$MMMQ_CONFIG")
	})
	t.Run("--config", func(t *testing.T) {
		code, _, stderr := runMain(t, app.WithArgs([]string{"--config", filepath.Join("no", "such.yaml")}))
		if code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		oneFailureLine(t, stderr, "no/such.yaml", "--config")
	})
}

func TestMainUsage(t *testing.T) {
	code, stdout, stderr := runMain(t, app.WithArgs([]string{"-h"}))
	if code != 0 || !strings.Contains(stdout, "mmmq [serve] [--config FILE]") || !strings.Contains(stdout, "mmmq verify") || stderr != "" {
		t.Errorf("-h: exit %d, stdout %q, stderr %q; want 0, the command list on stdout, nothing on stderr", code, stdout, stderr)
	}
	code, stdout, stderr = runMain(t, app.WithArgs([]string{"serve", "-h"}))
	if code != 0 || !strings.Contains(stdout, "usage: mmmq [serve] [--config FILE]") || stderr != "" {
		t.Errorf("serve -h: exit %d, stdout %q, stderr %q; want 0, serve's usage on stdout, nothing on stderr", code, stdout, stderr)
	}
	code, stdout, stderr = runMain(t, app.WithArgs([]string{"--bogus"}))
	if code != 2 || stdout != "" || !strings.Contains(stderr, "bogus") {
		t.Errorf("--bogus: exit %d, stdout %q, stderr %q; want 2 and the error on stderr", code, stdout, stderr)
	}
	code, _, stderr = runMain(t, app.WithArgs([]string{"serve", "stray"}))
	if code != 2 || !strings.Contains(stderr, `unexpected argument "stray"`) {
		t.Errorf("stray argument: exit %d, stderr %q; want 2", code, stderr)
	}
	code, _, stderr = runMain(t, app.WithArgs([]string{"stray"}))
	if code != 2 || !strings.Contains(stderr, `mmmq: unknown command "stray"`) {
		t.Errorf("unknown command: exit %d, stderr %q; want 2", code, stderr)
	}
}

// Without WithName, the commands print the base name of os.Args[0] (here
// the test binary's); WithVersion sets what version prints after it.
func TestMainNameAndVersion(t *testing.T) {
	var stdout, stderr strings.Builder
	code := app.Main(app.WithArgs([]string{"version"}), app.WithVersion("v9.8.7"), app.WithOutput(&stdout, &stderr))
	if want := filepath.Base(os.Args[0]) + " v9.8.7\n"; code != 0 || stdout.String() != want || stderr.Len() != 0 {
		t.Errorf("version: exit %d, stdout %q, stderr %q; want 0 and %q", code, stdout.String(), stderr.String(), want)
	}
	stdout.Reset()
	code = app.Main(app.WithArgs([]string{"nope"}), app.WithName("orders-broker"), app.WithOutput(&stdout, &stderr))
	if code != 2 || !strings.HasPrefix(stderr.String(), `orders-broker: unknown command "nope"`) || strings.Contains(stderr.String(), "mmmq ") {
		t.Errorf("unknown command: exit %d, stderr %q; want 2, the program's own name and no \"mmmq \"", code, stderr.String())
	}
}

// TestMainStops runs the broker on the built-in defaults (no configs/ in the
// working directory) and stops it through WithContext as soon as it started:
// exit 0, nothing from Main on stderr.
func TestMainStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	code, _, stderr := runMain(t, app.WithContext(ctx), app.WithModules(fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.StartHook(cancel))
	})))
	if code != 0 || stderr != "" {
		t.Errorf("exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
}

// A SIGTERM that arrives while the application starts (here from a start
// hook, as a supervisor may send one as soon as /readyz is true) stops it
// cleanly once Start returns: exit 0, nothing on stderr — not the signal's
// default action, which would kill the process (and this test binary).
func TestMainSIGTERMDuringStartStopsCleanly(t *testing.T) {
	stopped := false
	code, _, stderr := runMain(t, app.WithModules(fx.Invoke(func(lc fx.Lifecycle) {
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { return syscall.Kill(os.Getpid(), syscall.SIGTERM) },
			OnStop:  func(context.Context) error { stopped = true; return nil },
		})
	})))
	if code != 0 || stderr != "" || !stopped {
		t.Errorf("exit %d, stderr %q, stopped %v; want 0, nothing, and the stop hooks run", code, stderr, stopped)
	}
}
