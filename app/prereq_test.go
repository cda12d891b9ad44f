package app_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// make test's first step (.ci/prereq.sh) stops at once, naming what to
// install, when a prerequisite is missing (round-3 item 12: a newcomer's
// first run failed after 8 minutes for want of Chromium); a missing LazyFS
// is one line and no failure.
func TestPrereqCheckNamesWhatIsMissing(t *testing.T) {
	run := func(env ...string) (int, string, time.Duration) {
		cmd := exec.Command("bash", "../.ci/prereq.sh")
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "CHROMIUM=") && !strings.HasPrefix(kv, "MMMQ_LAZYFS=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, env...)
		began := time.Now()
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out), time.Since(began)
	}
	code, out, _ := run("CHROMIUM=/nonexistent/chromium")
	if code != 1 || !strings.Contains(out, "make test: Chromium is missing at /nonexistent/chromium") || !strings.Contains(out, "apt-get install chromium") {
		t.Errorf("without Chromium: exit %d, output %q; want 1 naming it and how to install it", code, out)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	code, out, _ = run("CHROMIUM="+self, "MMMQ_LAZYFS=/nonexistent/lazyfs")
	if code != 1 || !strings.Contains(out, "MMMQ_LAZYFS=/nonexistent/lazyfs is not an executable") {
		t.Errorf("a bad MMMQ_LAZYFS: exit %d, output %q", code, out)
	}
	code, out, _ = run("CHROMIUM=" + self)
	if !strings.Contains(out, "MMMQ_LAZYFS is not set: the power-loss rounds on LazyFS will not run") {
		t.Errorf("without LazyFS: output %q, want one line saying so", out)
	}
	_, pathErr := exec.LookPath("initdb")
	debian, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	switch hasPG := pathErr == nil || len(debian) > 0; {
	case hasPG && code != 0:
		t.Errorf("without LazyFS only: exit %d, output %q; want 0 (LazyFS is optional)", code, out)
	case !hasPG && (code != 1 || !strings.Contains(out, "apt-get install postgresql")):
		t.Errorf("without PostgreSQL: exit %d, output %q; want 1 naming it", code, out)
	}
}
