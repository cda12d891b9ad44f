package groups

import (
	"errors"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

func TestFxModule(t *testing.T) {
	cfg := config.Default()
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	set, err := dispatcher.SetOf(dispatcher.New("order-dispatcher",
		dispatcher.Host{Protocol: dispatcher.HTTP, Address: "localhost", Port: 8081}, dispatcher.MustPattern("**")))
	if err != nil {
		t.Fatal(err)
	}
	var c *Coordinator
	var routes struct {
		fx.In
		Routes []contract.Route `group:"routes"`
	}
	var reg *topicqueue.Registry
	var budget *contract.Budget
	app := fxtest.New(t,
		config.Module, config.Supply(cfg),
		fx.Supply(zaptest.NewLogger(t)),
		storage.Module, topicqueue.Module,
		fx.Supply(set),
		Module,
		fx.Populate(&c, &routes, &reg, &budget),
	)
	app.RequireStart()
	defer app.RequireStop()
	if c.opts.Budget == nil || c.opts.Budget != budget || budget.Max() != config.SectionValue(cfg, topicqueue.MemorySection).MaxInflightBytes {
		t.Fatalf("coordinator budget %p (max %d), want the graph's %p", c.opts.Budget, c.opts.Budget.Max(), budget)
	}
	if len(routes.Routes) != 1 {
		t.Fatalf("routes contributed: %d, want 1", len(routes.Routes))
	}
	if _, ok := routes.Routes[0].(*Route); !ok {
		t.Fatalf("route is %T", routes.Routes[0])
	}
	if g := config.SectionValue(cfg, ConfigSection); c.LeaseTimeout() != g.LeaseTimeout || c.MaxFetch() != g.MaxFetch {
		t.Fatalf("options not from config: %s %d", c.LeaseTimeout(), c.MaxFetch())
	}
	if _, err := reg.GetOrCreate("t"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire("t", "order-dispatcher"); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("dispatcher name: %v, want ErrNameTaken", err)
	}
	if _, err := c.Acquire("t", "g"); err != nil {
		t.Fatal(err)
	}
}
