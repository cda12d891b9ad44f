// Package servertls holds the broker's server certificates (server.tls):
// a *tls.Config for the HTTP API and the line protocol whose certificate
// and client CA pool are swapped atomically by Reload, so that a SIGHUP
// (modules/reload) serves renewed files to new handshakes without a
// restart, while connections already open keep theirs.
package servertls

import (
	"context"
	"crypto/tls"
	"crypto/x509"

	"fmt"
	"os"
	"sync/atomic"

	"github.com/mmmq/mmmq/modules/config"
)

// ReloaderName is the Name of every Certs, as the reload module logs it.
const ReloaderName = "tls certificates"

// Certs is the current certificate, key and client CA pool of server.tls.
// It implements contract.Reloader. Safe for concurrent use.
type Certs struct {
	files config.ServerTLSConfig
	name  string
	cur   atomic.Pointer[state]
}

// state is one loaded set of files: the per-handshake configuration.
type state struct {
	cert *tls.Certificate
	cfg  *tls.Config
}

// New reads the files of c. It returns nil, nil when TLS is off (no
// cert-file). An error names the key whose file could not be read or
// parsed. what says whose certificates these are in the reloader's name
// ("http", "lineproto"); "" leaves ReloaderName alone.
func New(c config.ServerTLSConfig, what string) (*Certs, error) {
	if !c.Enabled() {
		return nil, nil
	}
	name := ReloaderName
	if what != "" {
		name += " (" + what + ")"
	}
	cs := &Certs{files: c, name: name}
	st, err := load(c)
	if err != nil {
		return nil, err
	}
	cs.cur.Store(st)
	return cs, nil
}

// Name implements contract.Reloader.
func (c *Certs) Name() string { return c.name }

// Reload re-reads the files; new handshakes get them. On error the
// previous certificate and CA pool stay in force and the error names the
// key whose file failed.
func (c *Certs) Reload(context.Context) error {
	st, err := load(c.files)
	if err != nil {
		return err
	}
	c.cur.Store(st)
	return nil
}

// Certificate is the certificate served to new handshakes.
func (c *Certs) Certificate() *tls.Certificate { return c.cur.Load().cert }

// Config returns a server configuration over c: TLS 1.2 at least,
// HTTP/1.1 as the one ALPN protocol offered (nextProtos, may be nil), and
// every handshake served from the files loaded last (GetConfigForClient,
// GetCertificate).
func (c *Certs) Config(nextProtos ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return c.cur.Load().cert, nil
		},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := c.cur.Load().cfg.Clone()
			cfg.NextProtos = nextProtos
			return cfg, nil
		},
	}
}

// load reads and checks the files of c.
func load(c config.ServerTLSConfig) (*state, error) {
	if _, err := os.Stat(c.CertFile); err != nil {
		return nil, keyErr("server.tls.cert-file", err)
	}
	if _, err := os.Stat(c.KeyFile); err != nil {
		return nil, keyErr("server.tls.key-file", err)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("config: server.tls.cert-file %s and server.tls.key-file %s: %w", c.CertFile, c.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if c.ClientCAFile != "" {
		pool, err := LoadPool(c.ClientCAFile)
		if err != nil {
			return nil, keyErr("server.tls.client-ca-file", err)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = clientAuth(c.ClientAuth)
	}
	return &state{cert: &cert, cfg: cfg}, nil
}

func keyErr(key string, err error) error { return fmt.Errorf("config: %s: %w", key, err) }

// clientAuth maps server.tls.client-auth to crypto/tls.
func clientAuth(a config.ClientAuth) tls.ClientAuthType {
	switch a {
	case config.ClientAuthRequire:
		return tls.RequireAndVerifyClientCert
	case config.ClientAuthVerifyIfGiven:
		return tls.VerifyClientCertIfGiven
	}
	return tls.NoClientCert
}

// LoadPool reads a PEM file of CA certificates; a file without any is an
// error.
func LoadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

// PeerCommonName is the subject common name of the verified client
// certificate of a TLS connection state ("" when the client sent none, or
// for nil): the leaf of the first verified chain.
func PeerCommonName(cs *tls.ConnectionState) string {
	if cs == nil || len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.CommonName
}
