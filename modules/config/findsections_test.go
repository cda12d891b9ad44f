package config

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
)

// FindSections sees a section through module nesting and runs nothing
// else of the modules: not their invokes, not their other constructors.
func TestFindSections(t *testing.T) {
	ran := false
	plugin := fx.Module("plugin",
		ProvideSection(widgetSection),
		fx.Provide(func() int { ran = true; return 1 }),
		fx.Invoke(func(int) { ran = true }),
	)
	secs, err := FindSections(fx.Options(fx.Invoke(func() { ran = true }), fx.Options(plugin)))
	require.NoError(t, err)
	assert.Equal(t, []Section{widgetSection}, secs)
	assert.False(t, ran, "FindSections ran an invoke or a constructor of the modules")

	secs, err = FindSections()
	require.NoError(t, err)
	assert.Empty(t, secs)

	_, err = FindSections(plugin, fx.Error(errors.New("boom")))
	require.ErrorContains(t, err, "boom")
}

// A key or variable under a section the loader was not given names the
// key or variable and says how a plugin's section is loaded.
func TestUnknownSectionHint(t *testing.T) {
	_, err := Load(LoadOptions{Path: writeYAML(t, "mmmq: {orders: {order-host: 'http://o:1'}}"), PathExplicit: true, Environ: []string{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.orders.order-host": no section mmmq.orders is loaded`)
	assert.Contains(t, err.Error(), "app.WithModules")

	_, err = Load(LoadOptions{Environ: []string{"MMMQ_ORDERS_ORDER_HOST=http://o:1"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: unknown environment variable MMMQ_ORDERS_ORDER_HOST: matches no key")
	assert.Contains(t, err.Error(), "no section mmmq.orders is loaded")

	// A misspelled key of a known section gets no such hint.
	_, err = Load(LoadOptions{Environ: []string{"MMMQ_BROKER_SEGMNT_MAX_BYTES=1"}})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "no section")
	_, err = Load(LoadOptions{Path: writeYAML(t, "mmmq: {broker: {segmnt: {max-bytes: 1}}}"), PathExplicit: true, Environ: []string{}})
	require.Error(t, err)
	assert.Equal(t, `config: unknown key "mmmq.broker.segmnt.max-bytes"`, err.Error())
}
