package config

import (
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
