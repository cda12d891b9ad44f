package app_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// provideDispatcher returns the option that adds d to the broker's
// dispatchers.
func provideDispatcher(d *dispatcher.Dispatcher) fx.Option {
	return dispatcher.Provide(func() *dispatcher.Dispatcher { return d })
}

// startDispatching starts a broker on a fresh data root with the
// dispatchers ds and returns it, its base URL and its dispatch manager.
func startDispatching(t *testing.T, ds ...*dispatcher.Dispatcher) (*fxtest.App, string, *dispatcher.Manager) {
	var mgr *dispatcher.Manager
	opts := []fx.Option{fx.Populate(&mgr)}
	for _, d := range ds {
		opts = append(opts, provideDispatcher(d))
	}
	a, base := startBroker(t, testConfig(t, t.TempDir()), opts...)
	return a, base, mgr
}

// publishN publishes {"n": i} to topic for i from 0 to n-1 and requires
// each to be acknowledged (200).
func publishN(t *testing.T, base, topic string, n int) {
	t.Helper()
	for i := range n {
		st, out := publishAt(t, base, topic, map[string]any{"n": i}, "")
		require.Equal(t, 200, st, out)
	}
}
