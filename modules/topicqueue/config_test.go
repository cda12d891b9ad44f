package topicqueue

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
)

// TestDedupSection: mmmq.broker.dedup defaults, an override from the
// environment, and invalid values refused naming the key (a negative
// window says that 0 turns deduplication off).
func TestDedupSection(t *testing.T) {
	load := func(body string, env ...string) (*config.Config, error) {
		p := filepath.Join(t.TempDir(), "mmmq.yaml")
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: append([]string{}, env...), Sections: []config.Section{DedupSection}})
	}
	cfg, err := load("", "MMMQ_BROKER_DEDUP_WINDOW=30s")
	if err != nil {
		t.Fatal(err)
	}
	if d := config.SectionValue(cfg, DedupSection); d != (DedupConfig{Window: 30 * time.Second, MaxIDs: 100000, MaxBytes: 64 << 20}) {
		t.Errorf("section = %+v", d)
	}
	_, err = load("mmmq:\n  broker:\n    dedup:\n      window: -1s\n      max-ids: 0\n      max-bytes: 1000\n")
	for _, want := range []string{`mmmq.broker.dedup.window: must be a duration >= 0 such as "168h" (0 = off)`, "mmmq.broker.dedup.max-ids", "mmmq.broker.dedup.max-bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want it to contain %s", err, want)
		}
	}
	if _, err := load("mmmq: {broker: {dedup: {windw: 1s}}}"); err == nil || !strings.Contains(err.Error(), `unknown key "mmmq.broker.dedup.windw"`) {
		t.Errorf("unknown key: %v", err)
	}
}
