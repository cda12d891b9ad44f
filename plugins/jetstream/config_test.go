package jetstream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
)

func load(t *testing.T, yaml string, env ...string) (Config, error) {
	t.Helper()
	cfg, err := configtest.Load(t, yaml, env, ConfigSection)
	if err != nil {
		return Config{}, err
	}
	return config.SectionValue(cfg, ConfigSection), nil
}

func TestConfigDefaultsAndValues(t *testing.T) {
	c, err := load(t, "")
	require.NoError(t, err)
	assert.Equal(t, ConfigSection.Default(), c)
	assert.Equal(t, "nats://127.0.0.1:4222", c.Servers)
	assert.EqualValues(t, 3, c.Replicas)
	assert.Equal(t, 10*time.Second, c.LeaseTimeout)

	c, err = load(t, `
mmmq:
  jetstream:
    servers: "nats://a:4222, tls://b:4222"
    replicas: 5
    stream-prefix: prod_eu-1
    tls: {ca-file: /ca.pem, cert-file: /c.pem, key-file: /k.pem}
    request-timeout: 250ms
`, "MMMQ_JETSTREAM_USER=u", "MMMQ_JETSTREAM_PASSWORD=p", "MMMQ_JETSTREAM_LEASE_TIMEOUT=1m", "MMMQ_JETSTREAM_TLS_CA_FILE=/env-ca.pem")
	require.NoError(t, err)
	assert.Equal(t, "nats://a:4222, tls://b:4222", c.Servers)
	assert.EqualValues(t, 5, c.Replicas)
	assert.Equal(t, "prod_eu-1", c.StreamPrefix)
	assert.Equal(t, TLSConfig{CAFile: "/env-ca.pem", CertFile: "/c.pem", KeyFile: "/k.pem"}, c.TLS)
	assert.Equal(t, 250*time.Millisecond, c.RequestTimeout)
	assert.Equal(t, "u", c.User)
	assert.Equal(t, time.Minute, c.LeaseTimeout)
}

// Every invalid value is refused naming its key.
func TestConfigInvalidNamesKey(t *testing.T) {
	for _, tc := range []struct{ name, yaml, key string }{
		{"no servers", "mmmq: {jetstream: {servers: ' '}}", "mmmq.jetstream.servers"},
		{"scheme", "mmmq: {jetstream: {servers: 'http://x:1'}}", "mmmq.jetstream.servers"},
		{"no host", "mmmq: {jetstream: {servers: 'nats://a:1,nats://'}}", "mmmq.jetstream.servers"},
		{"replicas 0", "mmmq: {jetstream: {replicas: 0}}", "mmmq.jetstream.replicas"},
		{"replicas 6", "mmmq: {jetstream: {replicas: 6}}", "mmmq.jetstream.replicas"},
		{"prefix dot", "mmmq: {jetstream: {stream-prefix: 'a.b'}}", "mmmq.jetstream.stream-prefix"},
		{"prefix empty", "mmmq: {jetstream: {stream-prefix: ''}}", "mmmq.jetstream.stream-prefix"},
		{"cert alone", "mmmq: {jetstream: {tls: {cert-file: /c.pem}}}", "mmmq.jetstream.tls.key-file"},
		{"key alone", "mmmq: {jetstream: {tls: {key-file: /k.pem}}}", "mmmq.jetstream.tls.cert-file"},
		{"password alone", "mmmq: {jetstream: {password: p}}", "mmmq.jetstream.password"},
		{"connect timeout", "mmmq: {jetstream: {connect-timeout: 1ms}}", "mmmq.jetstream.connect-timeout"},
		{"request timeout", "mmmq: {jetstream: {request-timeout: 6m}}", "mmmq.jetstream.request-timeout"},
		{"lease short", "mmmq: {jetstream: {lease-timeout: 500ms}}", "mmmq.jetstream.lease-timeout"},
		{"lease long", "mmmq: {jetstream: {lease-timeout: 6m}}", "mmmq.jetstream.lease-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml)
			require.Error(t, err)
			var ke *config.KeyError
			require.ErrorAs(t, err, &ke)
			assert.Equal(t, tc.key, ke.Key, err.Error())
		})
	}
}

func TestRedactedServers(t *testing.T) {
	c := Config{Servers: "nats://u:secret@a:4222,nats://b:4222"}
	assert.Equal(t, "nats://u:xxxxx@a:4222,nats://b:4222", c.redactedServers())
}
