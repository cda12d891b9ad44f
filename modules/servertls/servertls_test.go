package servertls

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
)

func TestOffIsNil(t *testing.T) {
	c, err := New(config.Default().Server.TLS, "http")
	if c != nil || err != nil {
		t.Fatalf("got %v, %v; want nil, nil with server.tls.cert-file empty", c, err)
	}
}

func TestFileErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test ca")
	cert, key := ca.Server(t).Write(t, dir, "server")
	other, otherKey := ca.Server(t).Write(t, dir, "other")
	caFile := ca.WriteCA(t, dir, "ca.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		c    config.ServerTLSConfig
		want string
	}{
		{"cert missing", config.ServerTLSConfig{CertFile: missing, KeyFile: key}, "server.tls.cert-file: "},
		{"key missing", config.ServerTLSConfig{CertFile: cert, KeyFile: missing}, "server.tls.key-file: "},
		{"key of another cert", config.ServerTLSConfig{CertFile: other, KeyFile: key}, "server.tls.cert-file " + other + " and server.tls.key-file " + key},
		{"cert garbage", config.ServerTLSConfig{CertFile: garbage, KeyFile: otherKey}, "server.tls.cert-file " + garbage},
		{"CA missing", config.ServerTLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: missing, ClientAuth: config.ClientAuthRequire}, "server.tls.client-ca-file: "},
		{"CA garbage", config.ServerTLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: garbage, ClientAuth: config.ClientAuthRequire}, "server.tls.client-ca-file: " + garbage + " holds no PEM certificate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.c, "")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want one containing %q", err, tc.want)
			}
		})
	}
	c, err := New(config.ServerTLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: caFile, ClientAuth: config.ClientAuthVerifyIfGiven}, "lineproto")
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "tls certificates (lineproto)" {
		t.Fatalf("name %q", c.Name())
	}
	cfg, _ := c.Config().GetConfigForClient(&tls.ClientHelloInfo{})
	if cfg.ClientAuth != tls.VerifyClientCertIfGiven || cfg.ClientCAs == nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("per-handshake config: client auth %v, CAs %v, min version %x", cfg.ClientAuth, cfg.ClientCAs, cfg.MinVersion)
	}
}

func TestFailedReloadKeepsTheOldCertificate(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "test ca")
	first := ca.Server(t)
	cert, key := first.Write(t, dir, "server")
	c, err := New(config.ServerTLSConfig{CertFile: cert, KeyFile: key, ClientAuth: config.ClientAuthNone}, "")
	if err != nil {
		t.Fatal(err)
	}
	// A renewal half done: the new certificate is written, its key not yet.
	second := ca.Server(t)
	if err := os.WriteFile(cert, second.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "server.tls.cert-file") {
		t.Fatalf("reload with a mismatched key: %v; want an error naming server.tls.cert-file", err)
	}
	if got := c.Certificate().Leaf.SerialNumber; got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %v after a failed reload; want the old %v", got, first.Cert.SerialNumber)
	}
	second.Write(t, dir, "server")
	if err := c.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := c.Certificate().Leaf.SerialNumber; got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %v after the reload; want the new %v", got, second.Cert.SerialNumber)
	}
}

func TestPeerCommonName(t *testing.T) {
	if PeerCommonName(nil) != "" || PeerCommonName(&tls.ConnectionState{}) != "" {
		t.Fatal("a connection without a verified chain has a common name")
	}
}
