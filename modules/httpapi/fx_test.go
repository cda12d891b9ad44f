package httpapi

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// pingRoute is a route a plugin would contribute (contract.ProvideRoute).
type pingRoute struct{}

func (pingRoute) Register(r *mux.Router) {
	r.HandleFunc("/ping", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "pong") }).Methods(http.MethodGet)
}

// TestFxModule: Module builds the server from the configuration (server
// section, max-record-bytes), registers the routes of the value group,
// listens when the application starts and stops listening when it stops.
func TestFxModule(t *testing.T) {
	cfg := config.Default()
	cfg.Server.Host, cfg.Server.Port = "127.0.0.1", 0
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	config.EditSection(cfg, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) { seg.MaxRecordBytes = 4096 })
	var srv *Server
	app := fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module, recovery.Module,
		contract.ProvideRoute(func() pingRoute { return pingRoute{} }),
		Module,
		fx.Populate(&srv),
	)
	app.RequireStart()
	base := "http://" + srv.Addr()
	if got := getBody(t, base+"/ping"); got != "pong" {
		t.Fatalf("GET /ping (the contributed route): %q", got)
	}
	if got := getBody(t, base+"/healthz"); got == "" {
		t.Fatal("GET /healthz answered nothing")
	}
	if srv.opts.MaxRecordBytes != 4096 || srv.opts.ShutdownTimeout != cfg.Server.ShutdownTimeout {
		t.Fatalf("options not from config: max-record-bytes %d, shutdown-timeout %s", srv.opts.MaxRecordBytes, srv.opts.ShutdownTimeout)
	}
	big := strings.Repeat("x", 5000)
	resp, err := http.Post(base+"/messages", "application/json", strings.NewReader(`{"topic":"t","content":"`+big+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("a 5000-byte record with max-record-bytes 4096: %d, want 413", resp.StatusCode)
	}
	if len(srv.Reloaders()) != 0 {
		t.Fatalf("reloaders without server.tls: %d, want 0", len(srv.Reloaders()))
	}
	app.RequireStop()
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the server still answers after the application stopped")
	}
}

// TestFxModuleRouteOverlap: a contributed route that takes a path the
// server serves itself fails the application, naming the path.
func TestFxModuleRouteOverlap(t *testing.T) {
	cfg := config.Default()
	cfg.Server.Host, cfg.Server.Port = "127.0.0.1", 0
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	app := fx.New(fx.NopLogger,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module, recovery.Module,
		contract.ProvideRoute(func() overlapRoute { return overlapRoute{} }),
		Module,
		fx.Invoke(func(*Server) {}),
	)
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "/healthz") {
		t.Fatalf("overlapping route: %v, want an error naming /healthz", err)
	}
}

type overlapRoute struct{}

func (overlapRoute) Register(r *mux.Router) {
	r.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {}).Methods(http.MethodGet)
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}
