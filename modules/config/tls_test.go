package config

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerTLSKeys(t *testing.T) {
	cfg, err := load(t, "server: {tls: {cert-file: /c.pem, key-file: /k.pem}}",
		"MMMQ_SERVER_TLS_CLIENT_CA_FILE=/ca.pem", "MMMQ_SERVER_TLS_CLIENT_AUTH=require")
	require.NoError(t, err)
	assert.Equal(t, ServerTLSConfig{CertFile: "/c.pem", KeyFile: "/k.pem", ClientCAFile: "/ca.pem", ClientAuth: ClientAuthRequire}, cfg.Server.TLS)
	assert.True(t, cfg.Server.TLS.Enabled())
	assert.False(t, Default().Server.TLS.Enabled())
	assert.Contains(t, Keys(), "server.tls.client-ca-file")
	assert.Equal(t, "MMMQ_SERVER_TLS_CERT_FILE", EnvVar("server.tls.cert-file"))
}

func TestServerTLSInvalidNamesKey(t *testing.T) {
	tests := []struct{ name, yaml, key, problem string }{
		{"cert without key", "server: {tls: {cert-file: /c}}", "server.tls.key-file", "must be set when server.tls.cert-file is set"},
		{"key without cert", "server: {tls: {key-file: /k}}", "server.tls.cert-file", "must be set when server.tls.key-file is set"},
		{"require without CA", "server: {tls: {cert-file: /c, key-file: /k, client-auth: require}}", "server.tls.client-ca-file", "must be set"},
		{"verify without CA", "server: {tls: {cert-file: /c, key-file: /k, client-auth: verify-if-given}}", "server.tls.client-ca-file", "must be set"},
		{"CA with none", "server: {tls: {cert-file: /c, key-file: /k, client-ca-file: /ca}}", "server.tls.client-auth", `is "none" but server.tls.client-ca-file is set`},
		{"client auth without TLS", "server: {tls: {client-ca-file: /ca, client-auth: require}}", "server.tls.client-auth", `is "require" but TLS is off`},
		{"client auth unknown", "server: {tls: {client-auth: optional}}", "server.tls.client-auth", `must be "none", "verify-if-given" or "require"; got "optional"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.yaml)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidValue)
			assert.Contains(t, err.Error(), "config: "+tc.key+": "+tc.problem)
		})
	}
}

func TestDispatcherTLSKeys(t *testing.T) {
	const entry = "mmmq: {broker: {dispatchers: [{name: d, host: %s, patterns: [a], tls: %s}]}}"
	cfg, err := load(t, fmt.Sprintf(entry, "https://h:1", "{ca-file: /ca, cert-file: /c, key-file: /k, server-name: b, insecure-skip-verify: true}"))
	require.NoError(t, err)
	assert.Equal(t, DispatcherTLSConfig{CAFile: "/ca", CertFile: "/c", KeyFile: "/k", ServerName: "b", InsecureSkipVerify: true}, cfg.MMMQ.Broker.Dispatchers[0].TLS)
	for _, tc := range []struct{ host, tls, key, problem string }{
		{"http://h:1", "{ca-file: /ca}", "mmmq.broker.dispatchers[0].tls", `applies to an https host only; host is "http://h:1"`},
		{"https://h:1", "{cert-file: /c}", "mmmq.broker.dispatchers[0].tls.key-file", "must be set when tls.cert-file is set"},
		{"https://h:1", "{key-file: /k}", "mmmq.broker.dispatchers[0].tls.cert-file", "must be set when tls.key-file is set"},
		{"https://h:1", "{ca: /ca}", "", `unknown key "mmmq.broker.dispatchers[0].tls.ca"`},
	} {
		_, err := load(t, fmt.Sprintf(entry, tc.host, tc.tls))
		require.Error(t, err, tc.tls)
		want := "config: " + tc.key + ": " + tc.problem
		if tc.key == "" {
			want = tc.problem
		}
		assert.Contains(t, err.Error(), want)
	}
}
