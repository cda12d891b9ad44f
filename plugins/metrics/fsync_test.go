package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestFsyncsByFile: mmmq_fsyncs_total counts segment and index fsyncs
// apart, so one can tell commit mode (one of each per group commit) from
// lazy mode (segment fsyncs only, until the index's interval, rotation or
// close).
func TestFsyncsByFile(t *testing.T) {
	for _, tc := range []struct {
		mode           storage.IndexSync
		segment, index string
	}{
		{storage.IndexSyncCommit, "5", "5"},
		{storage.IndexSyncLazy, "5", "0"},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			m := New()
			l, err := storage.Open("/data/t", storage.Options{FS: vfs.NewMem(), Logger: zaptest.NewLogger(t), Observer: m,
				IndexSync: tc.mode, IndexSyncInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for range 5 {
				if _, err := l.Append(context.Background(), []byte(`{"x":1}`), contract.Durable); err != nil {
					t.Fatal(err)
				}
			}
			rec := httptest.NewRecorder()
			m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
			s := rec.Body.String()
			for _, want := range []string{
				`mmmq_fsyncs_total{file="segment"} ` + tc.segment + "\n",
				`mmmq_fsyncs_total{file="index"} ` + tc.index + "\n",
				"mmmq_group_commit_entries_count 5\n",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("scrape lacks %q:\n%s", want, grepLines(s, "mmmq_fsyncs_total", "mmmq_group_commit_entries_count"))
				}
			}
		})
	}
}

// grepLines is the lines of s that start with one of the prefixes.
func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	return strings.Join(out, "\n")
}
