package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPluginBinaryFromTheDocs builds testdata/mybroker — a plugin with its
// own configuration section and a main that is only
// os.Exit(app.Main(app.WithModules(orders.Module))), the snippet of the
// docs — in a module of its own (go mod init in a temporary directory, a
// replace directive to this repository, build.sh's steps), and runs the
// binary: it has the stock command set under its own name, and its
// commands read the plugin's section.
func TestPluginBinaryFromTheDocs(t *testing.T) {
	bin := buildSnippet(t)
	t.Run("version prints the binary's name", func(t *testing.T) {
		code, out, errOut := runCmd(t, bin, nil, "version")
		if code != 0 || !strings.HasPrefix(out, "mybroker ") || errOut != "" {
			t.Fatalf("version: exit %d, stdout %q, stderr %q; want 0 and \"mybroker <version>\"", code, out, errOut)
		}
	})
	t.Run("--help lists the commands under the binary's name", func(t *testing.T) {
		code, out, _ := runCmd(t, bin, nil, "--help")
		if code != 0 {
			t.Fatalf("--help: exit %d", code)
		}
		for _, cmd := range []string{"[serve] [--config FILE]", "verify", "dump", "config check", "token new",
			"dispatchers list", "topics list", "version"} {
			if !strings.Contains(out, "  mybroker "+cmd) {
				t.Errorf("--help does not list %q:\n%s", "mybroker "+cmd, out)
			}
		}
		if strings.Contains(out, "  mmmq ") || strings.Contains(out, "(mmmq ") {
			t.Errorf("--help names the stock binary:\n%s", out)
		}
	})
	t.Run("config check reads the plugin's section", func(t *testing.T) {
		cfg := writeFile(t, "mmmq.yaml", "mmmq:\n  orders:\n    order-host: http://orders.example:9001\n")
		code, out, errOut := runCmd(t, bin, nil, "config", "check", "--config", cfg)
		if code != 0 || !hasRow(out, "mmmq.orders.order-host", `"http://orders.example:9001"`, cfg) {
			t.Fatalf("config check (file): exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		code, out, errOut = runCmd(t, bin, []string{"MMMQ_ORDERS_ORDER_HOST=http://env.example:9002"}, "config", "check")
		if code != 0 || !hasRow(out, "mmmq.orders.order-host", `"http://env.example:9002"`, "MMMQ_ORDERS_ORDER_HOST") {
			t.Fatalf("config check (env): exit %d, stderr %q, stdout:\n%s", code, errOut, out)
		}
		bad := writeFile(t, "bad.yaml", "mmmq:\n  orders:\n    order-hots: http://orders.example:9001\n")
		code, _, errOut = runCmd(t, bin, nil, "config", "check", "--config", bad)
		if code != 1 || !strings.HasPrefix(errOut, "mybroker config check: "+bad+": ") || !strings.Contains(errOut, `"mmmq.orders.order-hots"`) {
			t.Fatalf("config check (unknown key): exit %d, stderr %q; want 1 and the key named", code, errOut)
		}
		code, _, errOut = runCmd(t, bin, []string{"MMMQ_ORDERS_ORDER_HOST=not a host"}, "config", "check")
		if code != 1 || !strings.Contains(errOut, "mmmq.orders.order-host") || !strings.Contains(errOut, "MMMQ_ORDERS_ORDER_HOST") {
			t.Fatalf("config check (bad env value): exit %d, stderr %q; want 1 and the key and variable named", code, errOut)
		}
	})
	t.Run("verify runs", func(t *testing.T) {
		code, out, errOut := runCmd(t, bin, nil, "verify", t.TempDir())
		if code != 0 || out != "" || !strings.Contains(errOut, "verified 0 topics: 0 corrupt") {
			t.Fatalf("verify <empty dir>: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
}

// buildSnippet copies testdata/mybroker into a temporary directory and
// runs its build.sh there against this repository: go mod init, a require
// and a replace directive, go mod tidy, go build. The repository's go.sum
// goes in first, so tidy checks the shared modules against it; the rest
// comes through $GOPROXY (GOFLAGS=-mod=mod).
func buildSnippet(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join("testdata", "mybroker")
	for _, f := range []string{"main.go", "build.sh", filepath.Join("orders", "orders.go")} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), "sh", "build.sh")
	cmd.Dir = dir
	// go test puts the go command it runs under first in PATH: build.sh's
	// go is the same toolchain.
	cmd.Env = append(os.Environ(), "MMMQ_REPO="+repo, "GOWORK=off", "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build.sh: %v\n%s", err, out)
	}
	return filepath.Join(dir, "mybroker")
}

// runCmd runs bin with args in an empty directory (no configs/), with the
// test process's MMMQ_ variables replaced by env, and returns its exit
// code, stdout and stderr.
func runCmd(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MMMQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stdout.String(), stderr.String()
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// hasRow says whether config check's table has the row key value source.
func hasRow(out, key, value, source string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == key && f[1] == value && strings.Contains(line, source) {
			return true
		}
	}
	return false
}

// TestReadmeSnippetIsTheBuiltOne: the plugin and main shown in README.md
// are testdata/mybroker's files byte for byte, so the snippet the docs
// show is the one TestPluginBinaryFromTheDocs builds and runs.
func TestReadmeSnippetIsTheBuiltOne(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]bool{}
	for _, part := range strings.Split(string(readme), "```go\n")[1:] {
		if end := strings.Index(part, "```\n"); end >= 0 {
			blocks[part[:end]] = true
		}
	}
	for _, f := range []string{"testdata/mybroker/orders/orders.go", "testdata/mybroker/main.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !blocks[string(b)] {
			t.Errorf("README.md has no ```go block equal to %s (the snippet the docs show must be the one the test builds)", f)
		}
	}
}
