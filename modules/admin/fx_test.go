package admin

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

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
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = root })
	return fx.New(fx.NopLogger,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module, recovery.Module,
		dispatcher.Module, Module,
		fx.Populate(out...),
	)
}

// TestFxModule: Module keeps the api dispatchers in
// <root-dir>/dispatchers.json (the local backend has no store of its own),
// contributes the admin API's route, and loads the file when the
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
	assert.Len(t, routes.Routes, 1)
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
