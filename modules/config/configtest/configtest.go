// Package configtest loads a configuration file written by a test: the
// one helper the section tests of every module share.
package configtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mmmq/mmmq/modules/config"
)

// Load writes body (YAML) to a file in t.TempDir() and loads it with
// config.Load as an explicit file, with exactly the environment env
// (KEY=value; none is read from the process) and the given sections.
func Load(t testing.TB, body string, env []string, sections ...config.Section) (*config.Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: append([]string{}, env...), Sections: sections})
}
