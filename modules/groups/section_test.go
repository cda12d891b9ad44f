package groups

import (
	"os"
	"path/filepath"
	"reflect"
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
	cfg, err := load("mmmq: {broker: {groups: {lease-timeout: 5s, shared: [\"work-*\"], dead-letter-topics: [{group: \"a..b\", topic: dl.ab}]}}}", "MMMQ_BROKER_GROUPS_MAX_FETCH=7")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{LeaseTimeout: 5 * time.Second, MaxFetch: 7, MaxDeliveries: 4, MaxUnacked: 1_000_000, Expired: ExpiredSkip,
		Shared: []string{"work-*"}, DeadLetterTopics: []DeadLetterTopic{{Group: "a..b", Topic: "dl.ab"}}}
	if g := config.SectionValue(cfg, ConfigSection); !reflect.DeepEqual(g, want) {
		t.Errorf("section = %+v, want %+v", g, want)
	}
	for _, tc := range []struct{ yaml, env, want string }{
		{"mmmq: {broker: {groups: {lease-timeout: 0s}}}", "", "config: mmmq.broker.groups.lease-timeout: must be a duration > 0"},
		{"mmmq: {broker: {groups: {max-fetch: 0}}}", "", "config: mmmq.broker.groups.max-fetch: must be between 1 and"},
		{"", "MMMQ_BROKER_GROUPS_MAX_FETCH=0", "MMMQ_BROKER_GROUPS_MAX_FETCH"},
		{"mmmq: {broker: {groups: {max-fetchs: 1}}}", "", `config: unknown key "mmmq.broker.groups.max-fetchs"`},
		{"mmmq: {broker: {groups: {max-deliveries: -1}}}", "", "mmmq.broker.groups.max-deliveries: must be between 0 and"},
		{"mmmq: {broker: {groups: {max-unacked: 0}}}", "", "mmmq.broker.groups.max-unacked: must be between 1 and 100000000"},
		{"mmmq: {broker: {groups: {expired: drop}}}", "", `mmmq.broker.groups.expired: must be "skip" or "dead-letter", got "drop"`},
		{"mmmq: {broker: {groups: {shared: [\"\"]}}}", "", "mmmq.broker.groups.shared[0]: a group glob of 1-200 characters"},
		{"mmmq: {broker: {groups: {dead-letter-topics: [{group: g, topic: \"a..b\"}]}}}", "", "mmmq.broker.groups.dead-letter-topics[0].topic"},
		{"mmmq: {broker: {groups: {dead-letter-topics: [{group: \".g\", topic: t}]}}}", "", "mmmq.broker.groups.dead-letter-topics[0].group"},
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
