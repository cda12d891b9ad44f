package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// memRegistryAndConsumer is a registry on a fresh MemFS at /data and a
// consumer answering every push {"acknowledgement": answer}, with its
// host; both closed when the test ends.
func memRegistryAndConsumer(t *testing.T, answer string) (*topicqueue.Registry, dispatcher.Host) {
	t.Helper()
	return memRegistryWith(t, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"acknowledgement":"` + answer + `"}`))
	})
}

// memRegistryAndStatus is memRegistryAndConsumer with a consumer that
// answers every push with an empty status (503: down, 429: busy).
func memRegistryAndStatus(t *testing.T, status int) (*topicqueue.Registry, dispatcher.Host) {
	t.Helper()
	return memRegistryWith(t, func(w http.ResponseWriter) { w.WriteHeader(status) })
}

func memRegistryWith(t *testing.T, respond func(w http.ResponseWriter)) (*topicqueue.Registry, dispatcher.Host) {
	t.Helper()
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: vfs.NewMem(), Logger: zaptest.NewLogger(t)}})
	t.Cleanup(func() { _ = reg.Close() })
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { respond(w) }))
	t.Cleanup(consumer.Close)
	host, err := dispatcher.ParseHost(consumer.URL)
	if err != nil {
		t.Fatal(err)
	}
	return reg, host
}

// watchedManager starts a dispatch Manager of ds over reg with opts
// (stopped when the test ends) and Metrics watching it; scrape returns
// what GET /metrics answers.
func watchedManager(t *testing.T, reg *topicqueue.Registry, opts dispatcher.Options, ds ...*dispatcher.Dispatcher) (mgr *dispatcher.Manager, scrape func() string) {
	t.Helper()
	set, err := dispatcher.SetOf(ds...)
	if err != nil {
		t.Fatal(err)
	}
	sender := dispatcher.NewHTTPSender(opts)
	t.Cleanup(sender.CloseIdleConnections)
	mgr = dispatcher.NewManager(set, dispatcher.RegistrySource(reg), sender, opts, zaptest.NewLogger(t))
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Stop(context.Background()) })
	m := New()
	m.WatchDispatchers(mgr, reg)
	return mgr, func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Body.String()
	}
}

// scrapedWith polls scrape until its answer holds every line of want
// (for up to 10 s) and returns it.
func scrapedWith(t *testing.T, scrape func() string, want ...string) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s := scrape()
		missing := ""
		for _, w := range want {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in:\n%s", missing, s)
		}
	}
}
