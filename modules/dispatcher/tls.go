package dispatcher

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"

	"go.uber.org/zap"
)

// TLSSettings is how a dispatcher's HTTPS connections are made (its tls
// key): a private CA, a client certificate for mutual TLS, the server name
// to verify. The zero value is the default: the system roots, no client
// certificate, the host's address as server name. TLS settings need an
// https host.
type TLSSettings struct {
	// CAFile holds the PEM certificates of the CAs the consumer's
	// certificate is verified against, instead of the system roots.
	CAFile string `koanf:"ca-file" json:"ca-file,omitempty"`
	// CertFile and KeyFile are the client certificate chain and its key,
	// PEM; both or neither.
	CertFile string `koanf:"cert-file" json:"cert-file,omitempty"`
	KeyFile  string `koanf:"key-file" json:"key-file,omitempty"`
	// ServerName is the name the consumer's certificate must carry (SNI
	// too), when it is not the host's address.
	ServerName string `koanf:"server-name" json:"server-name,omitempty"`
	// InsecureSkipVerify accepts any consumer certificate: no verification
	// at all. Only as this explicit option; the Manager logs a warning
	// naming the dispatcher when it starts one with it.
	InsecureSkipVerify bool `koanf:"insecure-skip-verify" json:"insecure-skip-verify,omitempty"`
}

// IsZero reports whether no setting is given.
func (t TLSSettings) IsZero() bool { return t == TLSSettings{} }

// clientTLS is a dispatcher's TLS client, read from its files by WithTLS.
type clientTLS struct {
	settings TLSSettings
	config   *tls.Config // nil: the sender's shared transport
	// key tells transports apart: the settings and the files' contents,
	// so a dispatcher rebuilt after its files changed gets a new one.
	key string
	err error // reading the files failed; Validate reports it
}

// WithTLS returns a copy of d whose pushes use t (the zero t: the sender's
// shared transport). The files are read now; a file that cannot be read
// or parsed is reported by Validate, naming its field (tls.ca-file,
// tls.cert-file, tls.key-file). The sender gives the dispatcher a
// transport of its own.
func (d *Dispatcher) WithTLS(t TLSSettings) *Dispatcher {
	c := *d
	c.dl.tls = loadClientTLS(t)
	return &c
}

// TLS is the setting given to WithTLS.
func (d *Dispatcher) TLS() TLSSettings { return d.dl.tls.settings }

// loadClientTLS reads the files of t.
func loadClientTLS(t TLSSettings) clientTLS {
	ct := clientTLS{settings: t}
	if t.IsZero() {
		return ct
	}
	h := sha256.New()
	fmt.Fprintf(h, "%#v\x00", t)
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			ct.err = fmt.Errorf("tls.ca-file: %w", err)
			return ct
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(b) {
			ct.err = fmt.Errorf("tls.ca-file: %s holds no PEM certificate", t.CAFile)
			return ct
		}
		h.Write(b)
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cb, err := os.ReadFile(t.CertFile)
		if err != nil {
			ct.err = fmt.Errorf("tls.cert-file: %w", err)
			return ct
		}
		kb, err := os.ReadFile(t.KeyFile)
		if err != nil {
			ct.err = fmt.Errorf("tls.key-file: %w", err)
			return ct
		}
		cert, err := tls.X509KeyPair(cb, kb)
		if err != nil {
			ct.err = fmt.Errorf("tls.cert-file %s and tls.key-file %s: %w", t.CertFile, t.KeyFile, err)
			return ct
		}
		cfg.Certificates = []tls.Certificate{cert}
		h.Write(cb)
		h.Write(kb)
	case t.CertFile != "":
		ct.err = errors.New("tls.key-file: must be set with tls.cert-file")
		return ct
	case t.KeyFile != "":
		ct.err = errors.New("tls.cert-file: must be set with tls.key-file")
		return ct
	}
	ct.config, ct.key = cfg, hex.EncodeToString(h.Sum(nil))
	return ct
}

// validateTLS reports the problems of the TLS settings.
func (d *Dispatcher) validateTLS() []error {
	t := d.dl.tls
	if t.settings.IsZero() {
		return nil
	}
	var errs []error
	if d.host.Protocol != HTTPS {
		errs = append(errs, fmt.Errorf("tls: applies to an https host only; host is %s", d.host))
	}
	if t.err != nil {
		errs = append(errs, t.err)
	}
	return errs
}

// tlsClient is a dispatcher's own client (see HTTPSender.clientFor).
type tlsClient struct {
	key    string
	client *http.Client
}

// clientFor returns the client d's pushes use: the shared one, or, for a
// dispatcher with TLS settings, its own (a transport cloned from the
// shared one with d's TLS configuration), made on first use and kept per
// dispatcher name while its settings and files stay the same. A
// dispatcher rebuilt with other settings or files gets a new one; the old
// one's idle connections are closed.
func (s *HTTPSender) clientFor(d *Dispatcher) *http.Client {
	t := d.dl.tls
	if t.config == nil {
		return s.client
	}
	s.tlsMu.Lock()
	defer s.tlsMu.Unlock()
	if c, ok := s.tlsClients[d.name]; ok {
		if c.key == t.key {
			return c.client
		}
		c.client.CloseIdleConnections()
	}
	tr := s.transport.Clone()
	tr.TLSClientConfig = t.config.Clone()
	c := &http.Client{Transport: tr, CheckRedirect: s.client.CheckRedirect}
	if s.tlsClients == nil {
		s.tlsClients = map[string]tlsClient{}
	}
	s.tlsClients[d.name] = tlsClient{key: t.key, client: c}
	return c
}

// warnInsecure logs a warning naming d when it does not verify its
// consumer's certificate. The Manager calls it for every dispatcher when
// it starts, and for each one added or replaced once started.
func (m *Manager) warnInsecure(d *Dispatcher) {
	if d.dl.tls.settings.InsecureSkipVerify {
		m.log.Warn("dispatcher does not verify its consumer's TLS certificate (tls.insecure-skip-verify): anyone between the broker and the consumer can read and change its pushes",
			zap.String("dispatcher", d.name))
	}
}

// warnInsecureIfStarted is warnInsecure once the Manager has started
// (before, Start warns for the whole set).
func (m *Manager) warnInsecureIfStarted(d *Dispatcher) {
	m.mu.Lock()
	started := m.state != stateNew
	m.mu.Unlock()
	if started {
		m.warnInsecure(d)
	}
}
