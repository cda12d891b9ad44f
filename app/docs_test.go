package app_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The repository's docs stand alone: no source file, README or
// configuration comment points at documents that are not in the repository
// (the design contract, the two source documents, the issue tracker), and
// every quote is in English (no untranslated Korean or Chinese).
func TestDocsAreSelfContained(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go", "*.md", "*.yaml", "*.sh", "Makefile").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	outside := regexp.MustCompile(`DESIGN\.md|DESIGN[ ]§|(?i:\bseed[ ]00[0-9])|\bissues? [0-9]+\b`)
	foreign := regexp.MustCompile(`[\x{AC00}-\x{D7A3}\x{3040}-\x{30FF}\x{4E00}-\x{9FFF}]`)
	files := strings.Fields(string(out))
	if len(files) < 50 {
		t.Fatalf("only %d files listed; is this the repository?", len(files))
	}
	for _, f := range files {
		if f == "app/docs_test.go" {
			continue // this file names what it looks for
		}
		b, err := os.ReadFile("../" + f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := outside.FindString(line); m != "" {
				t.Errorf("%s:%d points outside the repository (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
			if m := foreign.FindString(line); m != "" {
				t.Errorf("%s:%d has an untranslated quote (%q): %s", f, i+1, m, strings.TrimSpace(line))
			}
		}
	}
}
