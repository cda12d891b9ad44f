package dispatcher

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/config"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
)

func fxBase(t *testing.T, src Source) fx.Option {
	return fx.Options(
		Module,
		fx.Provide(func() Source { return src }),
		config.Module, config.Supply(config.Default()),
		fx.Supply(zaptest.NewLogger(t)),
		fx.Decorate(func(Options) Options { return testOptions() }),
	)
}

func TestFxPluginProvide(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t, nil)
	tp := newMemTopic(t, root, "order.created")
	tp.publish(3)
	h := c.host(t)
	var set *Set
	var m *Manager
	app := fxtest.New(t,
		fxBase(t, newMemSource(tp)),
		// Plugin-style contributions, from any package; nil contributes nothing.
		Provide(func() *Dispatcher { return New("z-dispatcher", h, MustPattern("order.*")) }),
		Provide(func(l *zap.Logger) (*Dispatcher, error) { return New("a-dispatcher", h, MustPattern("**")), nil }),
		Provide(func() *Dispatcher { return nil }),
		fx.Populate(&set, &m),
	)
	app.RequireStart()
	var names []string
	for _, d := range set.All() {
		names = append(names, d.Name())
	}
	if strings.Join(names, ",") != "a-dispatcher,z-dispatcher" {
		t.Errorf("set = %v", names)
	}
	eventually(t, "both dispatchers delivered", func() bool {
		return status(m, "a-dispatcher", "order.created").Committed == 3 && status(m, "z-dispatcher", "order.created").Committed == 3
	})
	app.RequireStop()
	if st := status(m, "a-dispatcher", "order.created"); st.Running {
		t.Error("worker still running after app stop")
	}
}

func TestFxDuplicateNamesFail(t *testing.T) {
	h := Host{HTTP, "localhost", 8081}
	app := fx.New(
		fx.NopLogger,
		fxBase(t, newMemSource()),
		Provide(func() *Dispatcher { return New("dup", h, MustPattern("a")) }),
		Provide(func() *Dispatcher { return New("dup", h, MustPattern("b")) }),
	)
	err := app.Err()
	if err == nil {
		err = app.Start(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), `duplicate dispatcher name "dup"`) {
		t.Fatalf("app error = %v, want the duplicate name", err)
	}
}

// fakeSender ACKs everything and records what it saw.
type fakeSender struct {
	mu   sync.Mutex
	seen []Delivery
}

func (f *fakeSender) Send(_ context.Context, d Delivery) (Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, d)
	return ACK, nil
}

func TestFxDecorateSender(t *testing.T) {
	root := t.TempDir()
	tp := newMemTopic(t, root, "t")
	tp.publish(2)
	fake := &fakeSender{}
	var m *Manager
	app := fxtest.New(t,
		fxBase(t, newMemSource(tp)),
		Provide(func() *Dispatcher { return New("d", Host{HTTP, "unreachable.invalid", 1}, MustPattern("t")) }),
		fx.Decorate(func(Sender) Sender { return fake }),
		fx.Populate(&m),
	)
	app.RequireStart()
	defer app.RequireStop()
	eventually(t, "delivered through the decorated sender", func() bool { return status(m, "d", "t").Committed == 2 })
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if len(fake.seen) != 2 || fake.seen[1].Offset != 1 || fake.seen[1].MessageID != "m-1" {
		t.Errorf("seen = %+v", fake.seen)
	}
}

func newDupA() *Dispatcher { return New("dup", Host{HTTP, "localhost", 8081}, MustPattern("a")) }

// A duplicate name says where each copy came from: Provide labels its
// dispatchers with the constructor's name, unless the constructor set a
// source itself.
func TestFxDuplicateNamesNameTheirSources(t *testing.T) {
	app := fx.New(
		fx.NopLogger,
		fxBase(t, newMemSource()),
		Provide(newDupA),
		Provide(func() (*Dispatcher, error) { return newDupA().WithSource("config mmmq.broker.dispatchers[3]"), nil }),
	)
	err := app.Err()
	if err == nil {
		err = app.Start(context.Background())
	}
	want := `duplicate dispatcher name "dup" (provided 2 times: Go provider github.com/mmmq/mmmq/modules/dispatcher.newDupA; config mmmq.broker.dispatchers[3])`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("app error = %v\nwant it to contain %s", err, want)
	}
}
