package app_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

// The README Quickstart runs `make run CONFIG=configs/example-dispatchers.yaml`:
// the shipped example declares the dispatcher and loads in the stock binary.
func TestExampleDispatchersYAML(t *testing.T) {
	cfg, err := config.Load(config.LoadOptions{Path: filepath.Join("..", "configs", "example-dispatchers.yaml"),
		PathExplicit: true, Environ: []string{}, Sections: stockSections()})
	require.NoError(t, err)
	ds := config.SectionValue(cfg, configdispatchers.Section)
	require.Len(t, ds, 1)
	d := ds[0]
	assert.Equal(t, "order-dispatcher", d.Name)
	assert.Equal(t, "http://localhost:8081", d.Host)
	assert.Equal(t, []string{"order.**", "payment.*"}, d.Patterns)
	assert.Equal(t, config.Default().Server, cfg.Server, "the example changes nothing but the dispatchers")
}

// make run passes CONFIG with --config, and without it passes no --config,
// so that the broker reads $MMMQ_CONFIG, else configs/mmmq.yaml.
func TestMakeRunConfig(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is required (it runs the test suite): %v", err)
	}
	serveLine := func(env []string, args ...string) string {
		cmd := exec.Command("make", append([]string{"-s", "-n", "run"}, args...)...)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		require.NoError(t, err)
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, " serve") {
				return l
			}
		}
		t.Fatalf("make -n run: no serve command in\n%s", out)
		return ""
	}
	line := serveLine(nil, "CONFIG=configs/example-dispatchers.yaml")
	assert.True(t, strings.HasSuffix(line, "serve --config configs/example-dispatchers.yaml"), line)
	line = serveLine([]string{"MMMQ_CONFIG=elsewhere.yaml"})
	assert.NotContains(t, line, "--config", "make run must leave the choice to MMMQ_CONFIG")
	assert.True(t, strings.HasSuffix(line, " serve"), line)
}
