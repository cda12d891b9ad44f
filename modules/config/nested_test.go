package config

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gadgetConfig is a test module's section nested inside the core mapping
// mmmq.broker: mmmq.broker.gadget.
type gadgetConfig struct {
	Limit int           `koanf:"limit"`
	Every time.Duration `koanf:"every"`
	TLS   struct {
		CAFile string `koanf:"ca-file"`
	} `koanf:"tls"`
}

var gadgetSection = NewSection("broker.gadget", gadgetConfig{Limit: 5, Every: time.Second},
	func(g *gadgetConfig) error { return CheckIntRange("mmmq.broker.gadget.limit", int64(g.Limit), 1, 10) })

// Two sections of one plugin under a mapping no core field owns.
var (
	ordersIn = NewSection("orders.in", struct {
		Host string `koanf:"host"`
	}{Host: "a"}, nil)
	ordersOut = NewSection("orders.out", struct {
		Host string `koanf:"host"`
	}{Host: "b"}, nil)
)

func loadNested(t *testing.T, body string, env ...string) (*Config, error) {
	t.Helper()
	return Load(LoadOptions{Path: writeYAML(t, body), PathExplicit: true, Environ: append([]string{}, env...),
		Sections: []Section{dispatchSection, testDispatchers, gadgetSection, ordersIn, ordersOut}})
}

// A nested section: its key, defaults by full key, environment variables
// by the one rule, and its values beside the core keys of the same mapping.
func TestNestedSectionDefaultsAndEnv(t *testing.T) {
	assert.Equal(t, "broker.gadget", gadgetSection.Name())
	assert.Equal(t, "mmmq.broker.gadget", gadgetSection.Key())
	assert.Equal(t, map[string]any{"mmmq.broker.gadget.limit": 5, "mmmq.broker.gadget.every": time.Second, "mmmq.broker.gadget.tls.ca-file": ""},
		gadgetSection.Defaults())
	assert.Contains(t, Keys(gadgetSection), "mmmq.broker.gadget.tls.ca-file")

	cfg, err := loadNested(t, "", "MMMQ_BROKER_GADGET_LIMIT=7")
	require.NoError(t, err)
	assert.Equal(t, 7, SectionValue(cfg, gadgetSection).Limit)
	assert.Equal(t, time.Second, SectionValue(cfg, gadgetSection).Every)

	cfg, err = loadNested(t, `
mmmq:
  broker:
    dispatchers: [{name: d, host: "http://h:1", patterns: [a]}]
    gadget:
      every: 3s
      tls: {ca-file: /ca.pem}
  orders:
    in: {host: x}
`, "MMMQ_BROKER_GADGET_TLS_CA_FILE=/env.pem", "MMMQ_ORDERS_OUT_HOST=y")
	require.NoError(t, err)
	g := SectionValue(cfg, gadgetSection)
	assert.Equal(t, 3*time.Second, g.Every)
	assert.Equal(t, "/env.pem", g.TLS.CAFile, "the environment wins")
	assert.Equal(t, "d", SectionValue(cfg, testDispatchers)[0].Name, "a list section in the same mapping still decodes")
	assert.Equal(t, "x", SectionValue(cfg, ordersIn).Host)
	assert.Equal(t, "y", SectionValue(cfg, ordersOut).Host)
}

// Unknown keys and invalid values name the full key, from the file and
// the environment: under a nested section, under the core mapping that
// holds it, and under a mapping only sections own.
func TestNestedSectionErrorsNameFullKey(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, env string
		is              error
		key             string
	}{
		{"section key", "mmmq: {broker: {gadget: {limt: 1}}}", "", ErrUnknownKey, "mmmq.broker.gadget.limt"},
		{"section nested key", "mmmq: {broker: {gadget: {tls: {ca: x}}}}", "", ErrUnknownKey, "mmmq.broker.gadget.tls.ca"},
		{"beside the section", "mmmq: {broker: {gadgets: {limit: 1}}}", "", ErrUnknownKey, "mmmq.broker.gadgets.limit"},
		{"beside sections of a plugin", "mmmq: {orders: {inn: {host: x}}}", "", ErrUnknownKey, "mmmq.orders.inn.host"},
		{"section value", "mmmq: {broker: {gadget: {limit: 11}}}", "", ErrInvalidValue, "mmmq.broker.gadget.limit"},
		{"section type", "mmmq: {broker: {gadget: {every: 5}}}", "", ErrInvalidValue, "mmmq.broker.gadget.every"},
		{"section not a mapping", "mmmq: {broker: {gadget: 5}}", "", ErrInvalidValue, "mmmq.broker.gadget"},
		{"env value", "", "MMMQ_BROKER_GADGET_LIMIT=0", ErrInvalidValue, "mmmq.broker.gadget.limit"},
		{"env parse", "", "MMMQ_BROKER_GADGET_EVERY=soon", ErrInvalidValue, "mmmq.broker.gadget.every"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var env []string
			if tc.env != "" {
				env = []string{tc.env}
			}
			_, err := loadNested(t, tc.yaml, env...)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.is)
			var ke *KeyError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, tc.key, ke.Key)
			if tc.env != "" {
				assert.Contains(t, err.Error(), tc.env[:len("MMMQ_BROKER_GADGET_")])
			}
		})
	}
	for _, v := range []string{"MMMQ_BROKER_GADGET_LIMT=1", "MMMQ_BROKER_GADGETS_LIMIT=1", "MMMQ_ORDERS_INN_HOST=x"} {
		_, err := loadNested(t, "", v)
		require.Error(t, err, v)
		assert.ErrorIs(t, err, ErrUnknownKey, v)
		var ke *KeyError
		require.ErrorAs(t, err, &ke)
		assert.Equal(t, v[:len(v)-2], ke.Var)
	}
}

// Paths that would overlap the core keys or another section are refused.
func TestNestedSectionPathsRefused(t *testing.T) {
	type x struct {
		A int `koanf:"a"`
	}
	for _, path := range []string{"broker", "node-name", "node-name.x", "Broker.x", "broker..x", "broker.x."} {
		assert.Panics(t, func() { NewSection(path, x{}, nil) }, path)
	}
	outer := NewSection("orders", x{}, nil)
	_, err := Load(LoadOptions{Path: "-none-", Environ: []string{}, Sections: []Section{outer, ordersIn}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config: sections mmmq.orders and mmmq.orders.in overlap")
}
