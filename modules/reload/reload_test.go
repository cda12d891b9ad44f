package reload

import (
	"context"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type counter struct {
	name string
	n    atomic.Int32
	err  error
}

func (c *counter) Name() string { return c.name }
func (c *counter) Reload(context.Context) error {
	c.n.Add(1)
	return c.err
}

func TestSIGHUPReloadsEveryMember(t *testing.T) {
	a, b := &counter{name: "a"}, &counter{name: "b", err: errors.New("bad file")}
	var r *Reloader
	app := fxtest.New(t, Module,
		fx.Supply(zap.NewNop()),
		contract.ProvideReloader(func() *counter { return a }),
		fx.Provide(fx.Annotate(func() *counter { return b }, fx.As(new(contract.Reloader)), fx.ResultTags(contract.ReloaderTag))),
		fx.Populate(&r))
	app.RequireStart()
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for (a.n.Load() < 1 || b.n.Load() < 1) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if a.n.Load() != 1 || b.n.Load() != 1 {
		t.Fatalf("after SIGHUP: a reloaded %d times, b %d, want 1 each (a failing member does not stop the others)", a.n.Load(), b.n.Load())
	}
	if failed := r.All(context.Background()); failed != 1 {
		t.Errorf("All: %d failed, want 1", failed)
	}
	app.RequireStop()
}
