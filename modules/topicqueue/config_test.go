package topicqueue

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
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

// loadSections loads body with this module's sections (and the
// environment env only).
func loadSections(t *testing.T, body string, env ...string) (*config.Config, error) {
	t.Helper()
	return configtest.Load(t, body, env, StorageSection, SegmentSection, MemorySection, DedupSection)
}

// TestStorageSegmentMemorySections: the file and the environment set
// mmmq.broker.storage, .segment and .memory, and every invalid value
// names its key, the checks across sections included (the budget
// against max-record-bytes).
func TestStorageSegmentMemorySections(t *testing.T) {
	cfg, err := loadSections(t, `
mmmq:
  broker:
    storage:
      root-dir: /var/lib/mmmq
      on-corruption: quarantine
    segment:
      max-bytes: 2048
      max-record-bytes: 1024
`, "MMMQ_BROKER_STORAGE_ROOT_DIR=/from/env", "MMMQ_BROKER_MEMORY_MAX_INFLIGHT_BYTES=4096")
	if err != nil {
		t.Fatal(err)
	}
	st := StorageSection.Default()
	st.RootDir, st.OnCorruption = "/from/env", OnCorruptionQuarantine
	if got := config.SectionValue(cfg, StorageSection); got != st {
		t.Errorf("storage = %+v, want %+v", got, st)
	}
	if got := config.SectionValue(cfg, SegmentSection); got != (SegmentConfig{MaxBytes: 2048, MaxRecordBytes: 1024}) {
		t.Errorf("segment = %+v", got)
	}
	if got := config.SectionValue(cfg, MemorySection).MaxInflightBytes; got != 4096 {
		t.Errorf("memory = %d", got)
	}

	tests := []struct{ name, yaml, key string }{
		{"root empty", "mmmq: {broker: {storage: {root-dir: ''}}}", "mmmq.broker.storage.root-dir"},
		{"on-corruption", "mmmq: {broker: {storage: {on-corruption: ignore}}}", "mmmq.broker.storage.on-corruption"},
		{"max-topics", "mmmq: {broker: {storage: {max-topics: 0}}}", "mmmq.broker.storage.max-topics"},
		{"max-topics fraction", "mmmq: {broker: {storage: {max-topics: 10.25}}}", "mmmq.broker.storage.max-topics"},
		{"max-open-segments", "mmmq: {broker: {storage: {max-open-segments: -1}}}", "mmmq.broker.storage.max-open-segments"},
		{"min-free-bytes", "mmmq: {broker: {storage: {min-free-bytes: -1}}}", "mmmq.broker.storage.min-free-bytes"},
		{"index-sync", "mmmq: {broker: {storage: {index-sync: always}}}", "mmmq.broker.storage.index-sync"},
		{"backend", "mmmq: {broker: {storage: {backend: s3}}}", "mmmq.broker.storage.backend"},
		{"index-sync with jetstream", "mmmq: {broker: {storage: {backend: jetstream, index-sync: lazy}}}", "mmmq.broker.storage.index-sync"},
		{"index-sync-interval with jetstream", "mmmq: {broker: {storage: {backend: jetstream, index-sync-interval: 5s}}}", "mmmq.broker.storage.index-sync-interval"},
		{"index-sync-interval zero", "mmmq: {broker: {storage: {index-sync-interval: 0s}}}", "mmmq.broker.storage.index-sync-interval"},
		{"index-sync-interval long", "mmmq: {broker: {storage: {index-sync-interval: 2h}}}", "mmmq.broker.storage.index-sync-interval"},
		{"preallocate negative", "mmmq: {broker: {storage: {preallocate: -1}}}", "mmmq.broker.storage.preallocate"},
		{"preallocate small", "mmmq: {broker: {storage: {preallocate: 100}}}", "mmmq.broker.storage.preallocate"},
		{"preallocate large", "mmmq: {broker: {storage: {preallocate: 2147483648}}}", "mmmq.broker.storage.preallocate"},
		{"preallocate with jetstream", "mmmq: {broker: {storage: {backend: jetstream, preallocate: 8192}}}", "mmmq.broker.storage.preallocate"},
		{"preallocate-max-bytes under preallocate", "mmmq: {broker: {storage: {preallocate: 8388608, preallocate-max-bytes: 4194304}}}", "mmmq.broker.storage.preallocate-max-bytes"},
		{"segment small", "mmmq: {broker: {segment: {max-bytes: 1023}}}", "mmmq.broker.segment.max-bytes"},
		{"record small", "mmmq: {broker: {segment: {max-record-bytes: 63}}}", "mmmq.broker.segment.max-record-bytes"},
		{"record over segment", "mmmq: {broker: {segment: {max-bytes: 2048, max-record-bytes: 4096}}}", "mmmq.broker.segment.max-record-bytes"},
		{"inflight negative", "mmmq: {broker: {memory: {max-inflight-bytes: -1}}}", "mmmq.broker.memory.max-inflight-bytes"},
		{"inflight under a record", "mmmq: {broker: {memory: {max-inflight-bytes: 1048575}}}", "mmmq.broker.memory.max-inflight-bytes"},
		{"inflight under a smaller record", "mmmq: {broker: {segment: {max-record-bytes: 4096}, memory: {max-inflight-bytes: 4095}}}", "mmmq.broker.memory.max-inflight-bytes"},
		{"unknown key", "mmmq: {broker: {storage: {rootdir: x}}}", `unknown key "mmmq.broker.storage.rootdir"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadSections(t, tt.yaml)
			if err == nil || !strings.Contains(err.Error(), tt.key) || !errors.Is(err, config.ErrInvalidValue) && !errors.Is(err, config.ErrUnknownKey) {
				t.Errorf("error %v, want one naming %s", err, tt.key)
			}
		})
	}
	if _, err := loadSections(t, "mmmq: {broker: {segment: {max-record-bytes: 4096}, memory: {max-inflight-bytes: 4096}}}"); err != nil {
		t.Errorf("a budget of exactly one record: %v", err)
	}
	if _, err := loadSections(t, "", "MMMQ_BROKER_STORAGE_MAX_TOPICS=many"); err == nil || !strings.Contains(err.Error(), "MMMQ_BROKER_STORAGE_MAX_TOPICS") {
		t.Errorf("a variable that does not parse: %v", err)
	}
}

// TestSegmentAndMemoryReportFirstCauseOnly: a key whose bound comes from
// an invalid key is not reported again (max-record-bytes against
// max-bytes; the budget against max-record-bytes, across sections;
// preallocate-max-bytes against preallocate), but a
// key wrong on its own still is.
func TestSegmentAndMemoryReportFirstCauseOnly(t *testing.T) {
	count := func(err error) int {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			return len(j.Unwrap())
		}
		return 1
	}
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"max-bytes", "mmmq: {broker: {segment: {max-bytes: 12}}}", []string{"config: mmmq.broker.segment.max-bytes:"}},
		{"max-record-bytes", "mmmq: {broker: {segment: {max-record-bytes: 104857600}, memory: {max-inflight-bytes: 83886080}}}", []string{"config: mmmq.broker.segment.max-record-bytes:"}},
		{"both wrong on their own", "mmmq: {broker: {segment: {max-bytes: 12, max-record-bytes: 10}}}",
			[]string{"config: mmmq.broker.segment.max-bytes:", "config: mmmq.broker.segment.max-record-bytes: must be between 64 and "}},
		{"preallocate too large", "mmmq: {broker: {storage: {preallocate: 2000000000}}}", []string{"config: mmmq.broker.storage.preallocate:"}},
		{"preallocate-max-bytes under a valid preallocate", "mmmq: {broker: {storage: {preallocate: 8388608, preallocate-max-bytes: 4194304}}}", []string{"config: mmmq.broker.storage.preallocate-max-bytes:"}},
		{"budget under 64 with a bad record size", "mmmq: {broker: {segment: {max-record-bytes: 10}, memory: {max-inflight-bytes: 50}}}",
			[]string{"config: mmmq.broker.segment.max-record-bytes:", "config: mmmq.broker.memory.max-inflight-bytes: must be 0 (unlimited) or at least mmmq.broker.segment.max-record-bytes (64); got 50"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadSections(t, tt.yaml)
			if err == nil || count(err) != len(tt.want) {
				t.Fatalf("error %v, want %d problems", err, len(tt.want))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

// A max-record-bytes the user did not set follows a smaller segment size
// (round-3 item 16: "max-bytes: 4096" alone was refused over
// max-record-bytes, a key never set); one that is set and does not fit is
// refused naming both keys; the memory budget sees the fitted value.
func TestRecordLimitFollowsSegmentSize(t *testing.T) {
	cfg, err := loadSections(t, "mmmq: {broker: {segment: {max-bytes: 4096}}}")
	if err != nil {
		t.Fatalf("only max-bytes set: %v", err)
	}
	if got := config.SectionValue(cfg, SegmentSection).MaxRecordBytes; got != 4096 {
		t.Errorf("max-record-bytes = %d, want 4096 (the segment size)", got)
	}
	if cfg, err := loadSections(t, "", "MMMQ_BROKER_SEGMENT_MAX_BYTES=8192"); err != nil || config.SectionValue(cfg, SegmentSection).MaxRecordBytes != 8192 {
		t.Errorf("max-bytes from the environment: %v", err)
	}
	if cfg, err := loadSections(t, "mmmq: {broker: {segment: {max-bytes: 134217728}}}"); err != nil || config.SectionValue(cfg, SegmentSection).MaxRecordBytes != 1<<20 {
		t.Errorf("a larger segment keeps the 1 MiB default: %v", err)
	}
	_, err = loadSections(t, "mmmq: {broker: {segment: {max-bytes: 4096, max-record-bytes: 1048576}}}")
	if err == nil || !strings.Contains(err.Error(), "config: mmmq.broker.segment.max-record-bytes: must be between 64 and mmmq.broker.segment.max-bytes (4096)") {
		t.Errorf("an explicit record limit over the segment: %v, want both keys named", err)
	}
}
