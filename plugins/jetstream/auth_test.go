package jetstream

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
)

// connectObserved is Connect with c, its log captured; a Backend it
// returns is closed at the end of the test.
func connectObserved(t *testing.T, c Config) (*Backend, *observer.ObservedLogs, error) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	b, err := Connect(c, 1<<16, nil, zap.New(core))
	if err == nil {
		t.Cleanup(func() { _ = b.Close() })
	}
	return b, logs, err
}

// appendOne opens a topic on b and appends one message durably: the
// connection is not only open but authorized for JetStream.
func appendOne(t *testing.T, b *Backend) {
	t.Helper()
	l, err := b.Open("auth.t", true)
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	off, err := l.Append(context.Background(), msg(0), contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 0, off)
}

// assertNoSecret fails when secret shows in err or in any logged message
// or field.
func assertNoSecret(t *testing.T, secret string, err error, logs *observer.ObservedLogs) {
	t.Helper()
	if err != nil {
		assert.NotContains(t, err.Error(), secret, "the error shows a secret")
	}
	for _, e := range logs.All() {
		line := fmt.Sprint(e.Message, " ", e.ContextMap())
		assert.NotContains(t, line, secret, "the log shows a secret")
	}
}

// A user and password, or a token, configured on the server: the right
// ones connect and append; wrong or missing ones are refused at Connect
// with nats.go's "authorization violation", the error names the server,
// and neither the error nor the log shows the secret.
func TestAuthPasswordAndToken(t *testing.T) {
	const (
		user   = "mmmq"
		pass   = "s3cret-Pa55"
		token  = "t0ken-0f-th3-br0ker"
		badPwd = "wr0ng-Pa55"
		badTok = "wr0ng-t0ken"
	)
	withPassword := func(o *server.Options) { o.Username, o.Password = user, pass }
	withToken := func(o *server.Options) { o.Authorization = token }
	cases := []struct {
		name    string
		server  func(*server.Options)
		set     func(*Config)
		secrets []string // must not show in the error or the log
		ok      bool
	}{
		{"Password right", withPassword, func(c *Config) { c.User, c.Password = user, pass }, []string{pass}, true},
		{"Password wrong", withPassword, func(c *Config) { c.User, c.Password = user, badPwd }, []string{badPwd, pass}, false},
		{"Password wrong user", withPassword, func(c *Config) { c.User, c.Password = "other", pass }, []string{pass}, false},
		{"Password missing", withPassword, func(*Config) {}, nil, false},
		{"Token right", withToken, func(c *Config) { c.Token = token }, []string{token}, true},
		{"Token wrong", withToken, func(c *Config) { c.Token = badTok }, []string{badTok, token}, false},
		{"Token missing", withToken, func(*Config) {}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startServerWith(t, tc.server)
			c := testConfig(s)
			tc.set(&c)
			b, logs, err := connectObserved(t, c)
			for _, secret := range tc.secrets {
				assertNoSecret(t, secret, err, logs)
			}
			if tc.ok {
				require.NoError(t, err)
				appendOne(t, b)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), s.ClientURL(), "the error names the server")
			// nats.go passes the server's "-ERR 'Authorization Violation'"
			// through as the text of a plain error, not nats.ErrAuthorization.
			assert.Contains(t, err.Error(), "nats: Authorization Violation")
		})
	}
}

// A password in a server URL (nats://user:pass@host) authenticates too;
// when it is refused, the error shows the URL with the password
// redacted, and the log does not show it either.
func TestAuthPasswordInURLIsRedacted(t *testing.T) {
	const pass = "url-s3cret"
	s := startServerWith(t, func(o *server.Options) { o.Username, o.Password = "mmmq", pass })
	host := s.Addr().String()

	c := testConfig(s)
	c.Servers = "nats://mmmq:" + pass + "@" + host
	b, logs, err := connectObserved(t, c)
	require.NoError(t, err)
	assertNoSecret(t, pass, nil, logs)
	appendOne(t, b)

	const bad = "url-wr0ng"
	c.Servers = "nats://mmmq:" + bad + "@" + host
	_, logs, err = connectObserved(t, c)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nats://mmmq:xxxxx@"+host)
	assert.Contains(t, err.Error(), "nats: Authorization Violation")
	assertNoSecret(t, bad, err, logs)
}

// A server that requires TLS and verifies client certificates, with a
// CA made in the test: a tls:// URL with the CA file and a client
// certificate connects and appends; without the client certificate the
// server refuses the connection; without the CA file (the system roots)
// the client refuses the server's certificate.
func TestTLSClientCertificateAndCA(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "mmmq jetstream test CA")
	caFile := ca.WriteCA(t, dir, "ca.crt")
	srvCert, srvKey := ca.Server(t).Write(t, dir, "server")
	cliCert, cliKey := ca.Client(t, "mmmq-broker").Write(t, dir, "client")
	// A client certificate from another CA: the server must not take it.
	otherCert, otherKey := tlstest.NewCA(t, "other CA").Client(t, "intruder").Write(t, dir, "other")

	tlsConf, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: caFile, Verify: true})
	require.NoError(t, err)
	s := startServerWith(t, func(o *server.Options) {
		o.TLS, o.TLSVerify, o.TLSConfig = true, true, tlsConf
	})
	tlsURL := "tls://" + s.Addr().String()
	require.Equal(t, tlsURL, s.ClientURL(), "the server requires TLS")

	cases := []struct {
		name  string
		tls   TLSConfig
		check func(t *testing.T, err error) // nil: Connect must succeed
	}{
		{"TLS CA and client certificate", TLSConfig{CAFile: caFile, CertFile: cliCert, KeyFile: cliKey}, nil},
		{"TLS no client certificate", TLSConfig{CAFile: caFile}, refusedWithoutClientCert},
		// Go's TLS client sends no certificate that the server's list of
		// acceptable CAs does not cover, so the server sees none.
		{"TLS client certificate of another CA", TLSConfig{CAFile: caFile, CertFile: otherCert, KeyFile: otherKey}, refusedWithoutClientCert},
		{"TLS system roots", TLSConfig{CertFile: cliCert, KeyFile: cliKey}, func(t *testing.T, err error) {
			var unknown x509.UnknownAuthorityError
			assert.True(t, errors.As(err, &unknown), "want an unknown-authority error, got %v", err)
			assert.Contains(t, err.Error(), "certificate signed by unknown authority")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(s)
			c.Servers = tlsURL
			c.TLS = tc.tls
			require.NoError(t, validate(&c), "a valid section")
			b, _, err := connectObserved(t, c)
			if tc.check == nil {
				require.NoError(t, err)
				assert.True(t, b.Conn().TLSRequired(), "the connection is TLS")
				appendOne(t, b)
				return
			}
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), tlsURL, "the error names the server")
			tc.check(t, err)
		})
	}
}

// refusedWithoutClientCert: the server refused the TLS connection for
// want of a client certificate. With TLS 1.3 the client's handshake ends
// before the server checked the certificate, so the client sees either
// the server's alert or, when its first write loses the race with the
// server closing, nats.go's ErrTLS for a connection closed after the
// handshake.
func refusedWithoutClientCert(t *testing.T, err error) {
	t.Helper()
	alert := strings.Contains(err.Error(), "tls: certificate required")
	closed := errors.Is(err, nats.ErrTLS) && strings.Contains(err.Error(), "connection closed by remote after TLS handshake")
	assert.True(t, alert || closed, "want the server to refuse for want of a client certificate, got %v", err)
}
