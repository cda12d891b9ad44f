package client

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// firstDifference returns "" when got equals want, else the first line
// that differs, numbered from 1, as "line N: committed %q, generated %q".
func firstDifference(committed, generated []byte) string {
	if bytes.Equal(committed, generated) {
		return ""
	}
	c, g := strings.Split(string(committed), "\n"), strings.Split(string(generated), "\n")
	for i := 0; i < len(c) || i < len(g); i++ {
		var cl, gl string
		if i < len(c) {
			cl = c[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if cl != gl || i >= len(c) || i >= len(g) {
			return fmt.Sprintf("line %d: committed %q, generated %q", i+1, cl, gl)
		}
	}
	return "the files differ" // not reached: equal lines make equal files
}

// TestGeneratedClientIsCurrent regenerates the client from
// modules/httpapi/openapi.yaml with the oapi-codegen pinned in go.mod
// (the command of the go:generate line in doc.go) into a temporary
// directory and fails when the committed client.gen.go differs: the
// document changed and the client was not regenerated.
func TestGeneratedClientIsCurrent(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to run oapi-codegen (go tool): %v", err)
	}
	out := filepath.Join(t.TempDir(), "client.gen.go")
	cmd := exec.Command(goBin, "tool", "oapi-codegen", "-config", "oapi-codegen.yaml", "-o", out, "../openapi.yaml")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go tool oapi-codegen: %v\n%s", err, b)
	}
	generated, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile("client.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if d := firstDifference(committed, generated); d != "" {
		t.Errorf("client.gen.go is stale (%s): run go generate ./modules/httpapi/client/ and commit it", d)
	}
}

// TestFirstDifference: the comparison finds a changed, an added and a
// removed line, and nothing in equal files.
func TestFirstDifference(t *testing.T) {
	for _, tc := range []struct{ committed, generated, want string }{
		{"a\nb\n", "a\nb\n", ""},
		{"a\nb\n", "a\nc\n", `line 2: committed "b", generated "c"`},
		{"a\n", "a\nb\n", `line 2: committed "", generated "b"`},
		{"a\nb\n", "a\n", `line 2: committed "b", generated ""`},
		{"a", "a\n", `line 2: committed "", generated ""`},
	} {
		if got := firstDifference([]byte(tc.committed), []byte(tc.generated)); got != tc.want {
			t.Errorf("firstDifference(%q, %q) = %q, want %q", tc.committed, tc.generated, got, tc.want)
		}
	}
}
