package ui_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// BenchmarkStatusPage10kTopics: a full broker on the local backend with
// 10,000 topics (every hundredth with 1 to 5 messages; the files in
// memory, vfs.NewMem), a dispatcher on
// every topic and one on a hundred, and a consumer group; GET /ui/ and
// GET /ui/topics?page=50&sort=bytes (sub-benchmarks main and
// topics-page50-bytes) through the server's handler (no network).
func BenchmarkStatusPage10kTopics(b *testing.B) {
	release := make(chan struct{})
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Write([]byte(`{"acknowledgement":"ACK"}`))
	}))
	defer consumer.Close()
	cfg := config.Default()
	cfg.Server.Port = 0
	cfg.Server.Host = "127.0.0.1"
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = b.TempDir() })
	var srv *httpapi.Server
	var reg *topicqueue.Registry
	var adm *admin.Admin
	var coord *groups.Coordinator
	ta := fxtest.New(b, app.Options(config.Supply(cfg), fx.Populate(&srv, &reg, &adm, &coord),
		fx.Decorate(func() *zap.Logger { return zap.NewNop() }),
		// The local backend's code over an in-memory filesystem: creating
		// 10,000 topic directories on a disk with fsyncs takes minutes.
		fx.Decorate(func(vfs.FS) vfs.FS { return vfs.NewMem() })))
	ta.RequireStart()
	defer ta.RequireStop()
	defer close(release) // before the broker stops
	start := time.Now()
	for i := range 10_000 {
		name := fmt.Sprintf("bench.t%05d", i)
		q, err := reg.GetOrCreate(name)
		if err != nil {
			b.Fatal(err)
		}
		if i%100 == 0 {
			for range 1 + i%5 {
				if _, err := q.Log().Append(b.Context(), []byte(`{"topic":{"name":"`+name+`"},"content":1}`), contract.Durable); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	for _, s := range []admin.Spec{{Settings: dispatcher.Settings{Name: "all", Host: consumer.URL, Patterns: []string{"bench.**"}}},
		{Settings: dispatcher.Settings{Name: "some", Host: consumer.URL, Patterns: []string{"bench.t00000", "bench.t00100", "bench.t00200", "bench.t09999"}}}} {
		if _, err := adm.Create(s); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := coord.Acquire("bench.t00100", "g1"); err != nil {
		b.Fatal(err)
	}
	b.Logf("setup: 10,000 topics in %s", time.Since(start).Round(time.Millisecond))
	h := srv.Handler()
	for _, bc := range []struct{ name, path string }{{"main", "/ui/"}, {"topics-page50-bytes", "/ui/topics?page=50&sort=bytes"}} {
		path := bc.path
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != 200 {
					b.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
				}
			}
		})
	}
}
