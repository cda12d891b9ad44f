package groups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// The section mmmq.broker.groups: file, environment, and errors naming
// the full key.
func TestConfigSection(t *testing.T) {
	load := func(body string, env ...string) (*config.Config, error) {
		p := filepath.Join(t.TempDir(), "mmmq.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: append([]string{}, env...), Sections: []config.Section{ConfigSection}})
	}
	cfg, err := load("mmmq: {broker: {groups: {lease-timeout: 5s}}}", "MMMQ_BROKER_GROUPS_MAX_FETCH=7")
	if err != nil {
		t.Fatal(err)
	}
	if g := config.SectionValue(cfg, ConfigSection); g != (Config{LeaseTimeout: 5 * time.Second, MaxFetch: 7}) {
		t.Errorf("section = %+v", g)
	}
	for _, tc := range []struct{ yaml, env, want string }{
		{"mmmq: {broker: {groups: {lease-timeout: 0s}}}", "", "config: mmmq.broker.groups.lease-timeout: must be a duration > 0"},
		{"mmmq: {broker: {groups: {max-fetch: 0}}}", "", "config: mmmq.broker.groups.max-fetch: must be between 1 and"},
		{"", "MMMQ_BROKER_GROUPS_MAX_FETCH=0", "MMMQ_BROKER_GROUPS_MAX_FETCH"},
		{"mmmq: {broker: {groups: {max-fetchs: 1}}}", "", `config: unknown key "mmmq.broker.groups.max-fetchs"`},
	} {
		var env []string
		if tc.env != "" {
			env = []string{tc.env}
		}
		if _, err := load(tc.yaml, env...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: error %v, want %s", tc.yaml, tc.env, err, tc.want)
		}
	}
}
