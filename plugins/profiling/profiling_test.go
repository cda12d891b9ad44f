package profiling

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func fxApp(t *testing.T, addr string, srv **Server) *fxtest.App {
	cfg := config.Default()
	config.SetSectionValue(cfg, ConfigSection, Config{Addr: addr})
	return fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		Module,
		fx.Populate(srv),
	)
}

func TestOffByDefault(t *testing.T) {
	var srv *Server
	app := fxApp(t, "", &srv)
	app.RequireStart()
	defer app.RequireStop()
	if srv != nil {
		t.Fatal("a profiling server was built with mmmq.profiling.addr empty")
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServesPprofAndStops(t *testing.T) {
	var srv *Server
	app := fxApp(t, "127.0.0.1:0", &srv)
	app.RequireStart()
	base := "http://" + srv.Addr()
	code, body := get(t, base+"/debug/pprof/goroutine?debug=1")
	if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
		t.Fatalf("goroutine profile: HTTP %d %.200q", code, body)
	}
	code, body = get(t, base+"/debug/pprof/profile?seconds=1")
	if code != http.StatusOK || len(body) == 0 {
		t.Fatalf("CPU profile: HTTP %d, %d bytes", code, len(body))
	}
	if code, _ = get(t, base+"/messages"); code != http.StatusNotFound {
		t.Fatalf("/messages on the profiling port: HTTP %d, want 404 (only /debug/pprof/ is served)", code)
	}
	addr := srv.Addr()
	app.RequireStop()
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("profiling port still accepts connections after stop")
	}
}

func TestAddressInUseStopsStartup(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var srv *Server
	app := fxApp(t, ln.Addr().String(), &srv)
	err = app.Start(t.Context())
	if err == nil {
		app.RequireStop()
		t.Fatal("start on a taken port: want an error")
	}
	if !strings.Contains(err.Error(), "mmmq.profiling.addr") {
		t.Fatalf("error does not name the key: %v", err)
	}
}
