package lineproto

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

func fxApp(t *testing.T, addr string, srv **Server) *fxtest.App {
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	config.SetSectionValue(cfg, ConfigSection, Config{Addr: addr, MaxLineBytes: DefaultMaxLineBytes, MaxPipeline: DefaultMaxPipeline})
	return fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module, groups.Module,
		Module,
		fx.Populate(srv),
	)
}

func TestFxDisabledByDefault(t *testing.T) {
	var srv *Server
	app := fxApp(t, "", &srv)
	app.RequireStart()
	defer app.RequireStop()
	if srv != nil {
		t.Fatal("a server was built with mmmq.lineproto.addr empty")
	}
}

// step is one request sent and the prefix its reply line must have ("":
// send nothing, read the next line of the previous reply).
type step struct{ send, want string }

// converse dials addr and runs steps in order.
func converse(t *testing.T, addr string, steps []step) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(nc)
	for _, st := range steps {
		if st.send != "" {
			if _, err := nc.Write([]byte(st.send + "\n")); err != nil {
				t.Fatal(err)
			}
		}
		l, err := r.ReadString('\n')
		if err != nil || !strings.HasPrefix(l, st.want) {
			t.Fatalf("%q: %q, %v; want %q", st.send, l, err, st.want)
		}
	}
}

func TestFxListens(t *testing.T) {
	var srv *Server
	app := fxApp(t, "127.0.0.1:0", &srv)
	app.RequireStart()
	defer app.RequireStop()
	converse(t, srv.Addr(), []step{
		{`PUB a.b DURABLE {"x":1}`, "OK 0 DURABLE"},
		{"FETCH a.b g 1 0", "MSG 0 "},
		{"", "END 1"},
		{"ACK a.b g 0", "ACKED 1"},
	})
}

// TestFxPubIDDeduplicates: with the default configuration (a 2m window)
// the plugin publishes through the registry that has the application's
// idempotent-publish window.
func TestFxPubIDDeduplicates(t *testing.T) {
	var srv *Server
	app := fxApp(t, "127.0.0.1:0", &srv)
	app.RequireStart()
	defer app.RequireStop()
	converse(t, srv.Addr(), []step{
		{`PUBID a.b DURABLE k1 {"x":1}`, "OK 0 DURABLE\n"},
		{`PUBID a.b DURABLE k1 {"x":1}`, "OK 0 DURABLE DUPLICATE\n"},
		{`PUB a.b DURABLE {"x":1}`, "OK 1 DURABLE\n"},
		{"STATUS a.b", "TOPIC a.b next=2 "},
	})
}

// TestFxAuth: an Authenticator and a Limiter in the graph (the auth
// module's) turn authentication on; refusals go to the logger named
// "audit".
func TestFxAuth(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	config.SetSectionValue(cfg, ConfigSection, Config{Addr: "127.0.0.1:0", MaxLineBytes: DefaultMaxLineBytes, MaxPipeline: DefaultMaxPipeline})
	fl := &fakeLimiter{conns: map[string]int{}, publish: 0, retry: time.Second}
	var srv *Server
	app := fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zap.New(core)),
		fx.Supply(fx.Annotate(newFakeAuth(), fx.As(new(contract.Authenticator)))),
		fx.Supply(fx.Annotate(fl, fx.As(new(contract.Limiter)))),
		storage.Module, topicqueue.Module, groups.Module,
		Module,
		fx.Populate(&srv),
	)
	app.RequireStart()
	defer app.RequireStop()
	converse(t, srv.Addr(), []step{{"STATUS", "ERR UNAUTHORIZED "}})
	converse(t, srv.Addr(), []step{
		{"AUTH " + tokAll, "OK AUTH all\n"},
		{`PUB t DURABLE 1`, "ERR RATE_LIMITED 1 "},
		{"STATUS t", "ERR NOT_FOUND "},
	})
	audit := logs.FilterLoggerName("audit")
	if audit.FilterField(zap.String("code", "UNAUTHORIZED")).Len() != 1 || audit.FilterField(zap.String("code", "RATE_LIMITED")).Len() != 1 {
		t.Fatalf("audit entries: %v", audit.All())
	}
}
