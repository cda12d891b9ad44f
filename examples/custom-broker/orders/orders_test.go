package orders

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
)

func load(t *testing.T, body string, env ...string) (*config.Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return config.Load(config.LoadOptions{Path: p, PathExplicit: true, Environ: append([]string{}, env...),
		Sections: []config.Section{ConfigSection}})
}

func TestSection(t *testing.T) {
	cfg, err := load(t, "mmmq: {orders: {order-host: 'http://o:1'}}", "MMMQ_ORDERS_NOTIFICATION_HOST=https://n:2")
	require.NoError(t, err)
	c := config.SectionValue(cfg, ConfigSection)
	assert.Equal(t, Config{OrderHost: "http://o:1", NotificationHost: "https://n:2"}, c)
	d, err := NewOrderDispatcher(c)
	require.NoError(t, err)
	assert.Equal(t, "o", d.Host().Address)

	_, err = load(t, "mmmq: {orders: {order-host: 'localhost'}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: mmmq.orders.order-host: ")

	_, err = load(t, "mmmq: {orders: {order-hots: 'http://o:1'}}")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config: unknown key "mmmq.orders.order-hots"`)
}
