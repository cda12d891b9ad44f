package lineproto

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/groups"
)

// testCA is a certificate authority made in the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mmmq test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue returns a certificate for cn signed by the CA: a server
// certificate for 127.0.0.1, or a client certificate.
func (ca *testCA) issue(t *testing.T, cn string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestAuthClientCertificate: on a TLS listener that verifies client
// certificates if given, a certificate whose common name is a principal
// authenticates the connection without AUTH; no certificate or an unknown
// common name needs AUTH; AUTH first is judged by its token.
func TestAuthClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	other := newTestCA(t)
	core, logs := observer.New(zapcore.DebugLevel)
	e := newEnv(t, Options{
		Authenticator: newFakeAuth(), AuditLogger: zap.New(core).Named("audit"),
		AuthFailureDelay: time.Millisecond,
	}, groups.Options{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.srv.serve(tls.NewListener(ln, &tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, "server", true)},
		ClientAuth:   tls.VerifyClientCertIfGiven,
		ClientCAs:    ca.pool,
		MinVersion:   tls.VersionTLS12,
	}))
	dial := func(cert *tls.Certificate) *client {
		t.Helper()
		cfg := &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		nc, err := tls.Dial("tcp", e.srv.Addr(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
	}
	billing := ca.issue(t, "billing", false)
	stranger := ca.issue(t, "stranger", false)

	c := dial(&billing)
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "OK 0 DURABLE")
	expectPrefix(t, c.do("FETCH t g 1 0"), "ERR FORBIDDEN consume t ")
	expectPrefix(t, c.do("AUTH "+tokAll), "ERR BAD_REQUEST already authenticated as billing")

	c = dial(nil)
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "ERR UNAUTHORIZED ")
	c.expectClosed()

	c = dial(&stranger)
	expectPrefix(t, c.do(`PUB t DURABLE 1`), "ERR UNAUTHORIZED ")
	c.expectClosed()

	c = dial(&billing)
	expectPrefix(t, c.do("AUTH "+tokBad), "ERR UNAUTHORIZED ")
	c.expectClosed()

	c = dial(&billing)
	if got := c.do("AUTH " + tokAll); got != "OK AUTH all" {
		t.Fatalf("AUTH with a certificate: %q", got)
	}
	expectPrefix(t, c.do("FETCH t g 1 0"), "MSG 0 ")

	// A certificate of another CA fails the handshake.
	cert := other.issue(t, "billing", false)
	nc, err := tls.Dial("tcp", e.srv.Addr(), &tls.Config{RootCAs: ca.pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err == nil {
		_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = nc.Write([]byte("PUB t DURABLE 1\n"))
		if l, err := bufio.NewReader(nc).ReadString('\n'); err == nil {
			t.Fatalf("a certificate of an unknown CA was answered %q", l)
		}
		nc.Close()
	}
	if n := logs.FilterField(zap.String("code", "UNAUTHORIZED")).Len(); n != 3 {
		t.Fatalf("%d UNAUTHORIZED audit entries, want 3", n)
	}
}
