package app_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/mux"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// hookOrder builds the default application with opts, starts and stops it,
// and returns the packages that registered each start hook and each stop
// hook, in the order Fx ran them (from Fx's own events, logged at debug).
func hookOrder(t *testing.T, cfg *config.Config, opts ...fx.Option) (start, stop []string) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	opts = append([]fx.Option{
		config.Supply(cfg),
		fx.Decorate(func(*zap.Logger) *zap.Logger { return zap.New(core) }),
	}, opts...)
	a := fxtest.New(t, app.Options(opts...))
	a.RequireStart()
	a.RequireStop()
	pkg := func(e observer.LoggedEntry) string {
		caller := e.ContextMap()["caller"].(string)
		caller = strings.TrimPrefix(caller, "github.com/mmmq/mmmq/")
		return caller[:strings.LastIndex(caller, ".")]
	}
	for _, e := range logs.FilterMessage("OnStart hook executing").All() {
		start = append(start, pkg(e))
	}
	for _, e := range logs.FilterMessage("OnStop hook executing").All() {
		stop = append(stop, pkg(e))
	}
	return start, stop
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// The stop order is what keeps acknowledged data safe on shutdown: the
// broker says it is not ready, HTTP and the line protocol stop accepting
// (HTTP drains the groups' long polls and waits for in-flight requests),
// the consumer groups and the dispatchers drain, then the logs close and
// the data root's lock is released, and the logger is flushed last.
func TestStartAndStopOrder(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	lpAddr := freeAddr(t)
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: lpAddr, MaxLineBytes: lineproto.ConfigSection.Default().MaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	start, stop := hookOrder(t, cfg)
	wantStop := []string{
		"modules/recovery",   // ready = false
		"modules/reload",     // SIGHUP ends the process again
		"plugins/lineproto",  // stop accepting TCP, close connections
		"modules/httpapi",    // stop accepting HTTP, drain long polls, finish requests
		"plugins/ui",         // status page sampler
		"modules/auth",       // token-file polling
		"modules/schedule",   // scheduled-message mover (a move in progress finishes)
		"modules/retention",  // retention loop (a pass in progress finishes)
		"modules/admin",      // the watch of a dispatcher store shared by several nodes
		"modules/groups",     // lease janitor
		"modules/dispatcher", // dispatch workers drain
		"modules/dispatcher", // then their idle connections close
		"modules/topicqueue", // logs close, lock released
		"modules/logging",    // logger flushed
	}
	require.Equal(t, wantStop, stop, "stop hooks by registering package")
	wantStart := []string{
		"modules/topicqueue", // lock the data root
		"modules/recovery",   // open every topic
		"modules/dispatcher",
		"modules/groups",
		"modules/admin", // dispatchers.json loaded after recovery, into the running manager
		"modules/retention",
		"modules/schedule", // scheduled-message recovery, then the mover
		"modules/auth",     // token-file polling
		"plugins/ui",       // status page sampler
		"modules/httpapi",
		"plugins/lineproto",
		"modules/reload",   // SIGHUP reloads from here on
		"modules/recovery", // ready = true
	}
	require.Equal(t, wantStart, start, "start hooks by registering package")
}

// Without and Replace edit the default set by name and keep the order of
// the rest; an unknown name fails with the valid names.
func TestWithoutAndReplace(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	lpAddr := freeAddr(t)
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: lpAddr, MaxLineBytes: lineproto.ConfigSection.Default().MaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	_, stop := hookOrder(t, cfg, app.Without(app.LineProto))
	require.NotContains(t, stop, "plugins/lineproto")
	require.Equal(t, "modules/httpapi", stop[2])

	var replaced bool
	_, stop = hookOrder(t, cfg, app.Replace(app.LineProto, fx.Invoke(func() { replaced = true })))
	require.True(t, replaced, "replacement module ran")
	require.NotContains(t, stop, "plugins/lineproto")

	err := app.New(config.Supply(cfg), app.Without("nope")).Err()
	require.ErrorContains(t, err, `no default module "nope"`)
	require.ErrorContains(t, err, "lineproto")
}

// A custom binary built with app.New gets the line protocol: with
// mmmq.lineproto.addr set it listens on TCP and stores a PUB.
func TestNewListensOnLineProtocol(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	addr := freeAddr(t)
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: addr, MaxLineBytes: lineproto.ConfigSection.Default().MaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	a := app.New(fx.NopLogger, config.Supply(cfg))
	require.NoError(t, a.Start(context.Background()))
	defer func() { require.NoError(t, a.Stop(context.Background())) }()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("PUB t DURABLE {\"a\":1}\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "OK 0 DURABLE\n", line)
}

// A configuration loaded with the default sections (app.Sections) but used
// by an application that dropped the line protocol: a non-default
// mmmq.lineproto value is refused naming the key instead of being ignored,
// and a section the application reads but the loader was not given (here
// lineproto's, when only metrics' was passed) is refused too.
func TestLoadedSectionsMustMatchTheApp(t *testing.T) {
	root := t.TempDir()
	env := []string{"MMMQ_BROKER_STORAGE_ROOT_DIR=" + root, "MMMQ_SERVER_PORT=0", "MMMQ_LINEPROTO_ADDR=127.0.0.1:0"}
	cfg, err := config.Load(config.LoadOptions{Path: "-none-", Environ: env, Sections: app.Sections()})
	require.NoError(t, err)
	err = app.New(fx.NopLogger, config.Supply(cfg), app.Without(app.LineProto)).Err()
	require.ErrorContains(t, err, "config: mmmq.lineproto.addr: is set, but no module of this application reads mmmq.lineproto")
	require.ErrorIs(t, err, config.ErrPluginMissing)
	require.NoError(t, app.New(fx.NopLogger, config.Supply(cfg)).Err(), "the same config with the line protocol")

	cfg, err = config.Load(config.LoadOptions{Path: "-none-", Environ: env[:2], Sections: app.Sections(app.Without(app.LineProto))})
	require.NoError(t, err)
	err = app.New(fx.NopLogger, config.Supply(cfg)).Err()
	require.ErrorContains(t, err, "config: mmmq.lineproto is read by a module of this application, but the configuration was loaded without that section: add it to config.LoadOptions.Sections")
}

type dupRoute struct{}

func (dupRoute) Register(r *mux.Router) {
	r.HandleFunc("/topics", func(http.ResponseWriter, *http.Request) {}).Methods(http.MethodGet)
	r.HandleFunc("/hello", func(http.ResponseWriter, *http.Request) {})
}

// A plugin route that takes a path and method the server already serves is
// refused at build time, naming them, instead of never being called.
func TestOverlappingRoutesRefused(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	err := app.New(fx.NopLogger, config.Supply(cfg), contract.ProvideRoute(func() contract.Route { return dupRoute{} })).Err()
	require.ErrorContains(t, err, "httpapi: routes registered more than once: GET /topics")
	require.NotContains(t, err.Error(), "/hello")
	require.NoError(t, app.New(fx.NopLogger, config.Supply(testConfig(t, t.TempDir()))).Err(), "the default routes do not overlap")
}

// The in-flight memory budget is visible in /metrics: its cap, and its use
// back at 0 once the replies holding it are written.
func TestMetricsShowTheInflightBudget(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, topicqueue.MemorySection, func(m *topicqueue.MemoryConfig) { m.MaxInflightBytes = 8 << 20 })
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	st, _ := publish(t, base, "b.t", 1)
	require.Equal(t, 200, st)
	resp, err := http.Post(base+"/topics/b.t/groups/g/fetch", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), "mmmq_memory_inflight_max_bytes 8.388608e+06")
	require.Contains(t, string(b), "mmmq_memory_inflight_bytes 0")
}

// The segment cache is visible in /metrics: its cap (max-open-segments),
// the segments it holds open, and the opens a miss caused — after three
// topics each took a publish and a read with a cap of 2, the cache is full
// and has evicted.
func TestMetricsShowTheSegmentCache(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.MaxOpenSegments = 2 })
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	for _, topic := range []string{"c.a", "c.b", "c.c"} {
		st, _ := publish(t, base, topic, 1)
		require.Equal(t, 200, st)
	}
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Contains(t, string(b), "mmmq_segment_cache_capacity 2")
	require.Contains(t, string(b), "mmmq_segment_cache_open_segments 2")
	require.Regexp(t, `mmmq_segment_cache_evictions_total [1-9]`, string(b))
}
