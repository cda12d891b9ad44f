package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/recovery"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// adminApp is the part of the application the admin module sits in.
func adminApp(t *testing.T, root string, out ...any) *fx.App {
	var opts []fx.Option
	var pop []any
	for _, o := range out {
		if fo, ok := o.(fx.Option); ok {
			opts = append(opts, fo)
		} else {
			pop = append(pop, o)
		}
	}
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = root })
	return fx.New(fx.NopLogger,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module, recovery.Module,
		dispatcher.Module, Module,
		fx.Options(opts...),
		fx.Populate(pop...),
	)
}

// TestFxModule: Module keeps the api dispatchers in
// <root-dir>/dispatchers.json (the local backend has no store of its own),
// contributes the admin API's route and the webhook keys' route, and loads the file when the
// application starts: a dispatcher created through the Admin runs again
// after a restart.
func TestFxModule(t *testing.T) {
	root := t.TempDir()
	var (
		a      *Admin
		file   *Store
		store  SpecStore
		routes struct {
			fx.In
			Routes []contract.Route `group:"routes"`
		}
	)
	app := adminApp(t, root, &a, &file, &store, &routes)
	require.NoError(t, app.Err())
	assert.Equal(t, filepath.Join(root, "dispatchers.json"), file.Path())
	assert.Same(t, file, store, "the local backend keeps api dispatchers in dispatchers.json")
	assert.Len(t, routes.Routes, 2, "the admin API and the public webhook keys")
	require.NoError(t, app.Start(context.Background()))
	var s Spec
	require.NoError(t, json.Unmarshal([]byte(`{"name":"orders","host":"http://127.0.0.1:9","patterns":["order.**"]}`), &s))
	_, err := a.Create(s)
	require.NoError(t, err)
	require.NoError(t, app.Stop(context.Background()))

	app = adminApp(t, root, &a)
	require.NoError(t, app.Start(context.Background()))
	defer app.Stop(context.Background())
	var names []string
	for _, l := range a.List() {
		names = append(names, l.Name)
	}
	assert.Contains(t, names, "orders", "dispatchers.json loaded on start")
}

// TestFxModuleRestoresPausesBeforeTheManagerStarts: a dispatcher declared
// in Go, paused through the Admin, is paused again in the next
// application as soon as the graph is built (before any start), with its
// reason and time from paused.json; it pushes nothing until resumed.
func TestFxModuleRestoresPausesBeforeTheManagerStarts(t *testing.T) {
	var pushes atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pushes.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(srv.Close)
	host, err := dispatcher.ParseHost(srv.URL)
	require.NoError(t, err)
	goD := dispatcher.Provide(func() *dispatcher.Dispatcher { return dispatcher.New("go-d", host, dispatcher.MustPattern("p.*")) })
	root := t.TempDir()
	var (
		a   *Admin
		m   *dispatcher.Manager
		reg *topicqueue.Registry
	)
	app := adminApp(t, root, goD, &a, &m)
	require.NoError(t, app.Err())
	require.NoError(t, app.Start(context.Background()))
	_, err = a.SetPaused("go-d", true)
	require.NoError(t, err)
	was, _ := m.PauseInfo("go-d")
	require.NoError(t, app.Stop(context.Background()))

	app = adminApp(t, root, goD, &a, &m, &reg)
	require.NoError(t, app.Err())
	info, paused := m.PauseInfo("go-d")
	require.True(t, paused, "paused when the graph is built, before the manager starts")
	assert.Equal(t, dispatcher.PauseAdmin, info.Reason)
	assert.True(t, info.At.Equal(was.At), "pausedAt %v, was %v", info.At, was.At)
	require.NoError(t, app.Start(context.Background()))
	defer app.Stop(context.Background())
	_, _, err = reg.Publish(context.Background(), "p.a", [][]byte{[]byte(`{"topic":{"name":"p.a"},"content":1}`)}, contract.Durable)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, pushes.Load(), "pushed while paused")
	_, err = a.SetPaused("go-d", false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pushes.Load() == 1 }, 10*time.Second, 5*time.Millisecond)
}
