package dispatcher

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/servertls/tlstest"
)

// httpsConsumer is an HTTPS consumer with a certificate of ca that
// requires a client certificate of ca, and ACKs everything.
type httpsConsumer struct {
	srv *httptest.Server
	mu  sync.Mutex
	cns []string // client certificate common names, per request
}

func newHTTPSConsumer(t *testing.T, ca *tlstest.CA) *httpsConsumer {
	t.Helper()
	c := &httpsConsumer{}
	c.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.cns = append(c.cns, r.TLS.VerifiedChains[0][0].Subject.CommonName)
		c.mu.Unlock()
		answer(w, ACK)
	}))
	c.srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t).TLS(t)}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}
	c.srv.StartTLS()
	t.Cleanup(c.srv.Close)
	return c
}

func (c *httpsConsumer) seen() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.cns...)
}

// clientFiles writes ca's certificate and a client certificate of ca
// named cn, and returns TLS settings with them.
func clientFiles(t *testing.T, ca *tlstest.CA, cn string) TLSSettings {
	dir := t.TempDir()
	cert, key := ca.Client(t, cn).Write(t, dir, "client")
	return TLSSettings{CAFile: ca.WriteCA(t, dir, "ca.pem"), CertFile: cert, KeyFile: key}
}

func TestDeliversToHTTPSConsumerWithPrivateCAAndClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "consumer ca")
	c := newHTTPSConsumer(t, ca)
	h, err := ParseHost(c.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	d := New("orders", h, MustPattern("order.*")).WithTLS(clientFiles(t, ca, "mmmq-orders"))
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	_, m := deliverOne(t, "order.created", 3, testOptions(), d)
	waitCommitted(t, m, "orders", "order.created", 3)
	cns := c.seen()
	if len(cns) != 3 || cns[0] != "mmmq-orders" {
		t.Fatalf("consumer saw client certificates %q; want mmmq-orders three times", cns)
	}
}

// With a CA that did not sign the consumer's certificate, every attempt
// is abnormal: the worker backs off, commits nothing and skips nothing.
func TestWrongCABacksOff(t *testing.T) {
	ca := tlstest.NewCA(t, "consumer ca")
	c := newHTTPSConsumer(t, ca)
	h, _ := ParseHost(c.srv.URL)
	settings := clientFiles(t, ca, "mmmq-orders")
	settings.CAFile = tlstest.NewCA(t, "some other ca").WriteCA(t, t.TempDir(), "other.pem")
	_, m := deliverOne(t, "order.created", 2, testOptions(), New("orders", h, MustPattern("order.*")).WithTLS(settings))
	eventually(t, "abnormal attempts in backoff", func() bool {
		st := status(m, "orders", "order.created")
		return st.Backoff && st.Abnormal >= 3
	})
	st := status(m, "orders", "order.created")
	if st.Committed != 0 || st.Next != 0 || st.Exhausted != 0 || st.Skipped != 0 || st.Delivered != 0 {
		t.Fatalf("status %+v; want nothing committed, delivered or skipped", st)
	}
	if n := len(c.seen()); n != 0 {
		t.Fatalf("the consumer served %d requests", n)
	}
	// Without a client certificate the consumer refuses the handshake: abnormal too.
	_, m2 := deliverOne(t, "order.created", 1, testOptions(), New("orders", h, MustPattern("order.*")).WithTLS(TLSSettings{CAFile: settings.CAFile}))
	eventually(t, "backoff without a client certificate", func() bool { return status(m2, "orders", "order.created").Backoff })
}

func TestTLSSettingsErrorsNameTheField(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	good := clientFiles(t, ca, "x")
	https, _ := ParseHost("https://localhost:8443")
	plain, _ := ParseHost("http://localhost:8080")
	tests := []struct {
		name string
		host Host
		s    TLSSettings
		want string
	}{
		{"http host", plain, good, "tls: applies to an https host only; host is http://localhost:8080"},
		{"ca missing", https, TLSSettings{CAFile: "/nonexistent/ca.pem"}, "tls.ca-file: open /nonexistent/ca.pem"},
		{"ca garbage", https, TLSSettings{CAFile: good.KeyFile}, "tls.ca-file: " + good.KeyFile + " holds no PEM certificate"},
		{"cert without key", https, TLSSettings{CertFile: good.CertFile}, "tls.key-file: must be set with tls.cert-file"},
		{"key without cert", https, TLSSettings{KeyFile: good.KeyFile}, "tls.cert-file: must be set with tls.key-file"},
		{"cert missing", https, TLSSettings{CertFile: "/nonexistent/c.pem", KeyFile: good.KeyFile}, "tls.cert-file: open /nonexistent/c.pem"},
		{"key missing", https, TLSSettings{CertFile: good.CertFile, KeyFile: "/nonexistent/k.pem"}, "tls.key-file: open /nonexistent/k.pem"},
		{"pair mismatch", https, TLSSettings{CertFile: good.CertFile, KeyFile: clientFiles(t, ca, "y").KeyFile}, "tls.cert-file " + good.CertFile + " and tls.key-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := New("d", tc.host, MustPattern("a")).WithTLS(tc.s).Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tc.want)
			}
		})
	}
	// FromSettings prefixes the key of the entry.
	s := Settings{Name: "d", Host: "https://localhost:8443", Patterns: []string{"a"},
		TLS: TLSSettings{CAFile: "/nonexistent/ca.pem"}}
	if _, err := FromSettings(s, "mmmq.broker.dispatchers[0]", "config"); err == nil ||
		!strings.Contains(err.Error(), "mmmq.broker.dispatchers[0]: ") || !strings.Contains(err.Error(), "tls.ca-file: open /nonexistent/ca.pem") {
		t.Fatalf("FromSettings = %v", err)
	}
	if err := New("d", https, MustPattern("a")).WithTLS(good).Validate(); err != nil {
		t.Fatal(err)
	}
}

// A dispatcher with TLS settings has its own client, kept while its
// settings and files stay the same; other dispatchers share the default.
func TestSenderTransportPerDispatcher(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	s := NewHTTPSender(Options{})
	h, _ := ParseHost("https://localhost:8443")
	settings := clientFiles(t, ca, "x")
	a := New("a", h, MustPattern("a")).WithTLS(settings)
	if s.clientFor(New("plain", h, MustPattern("a"))) != s.client {
		t.Fatal("a dispatcher without TLS settings has its own client")
	}
	ca1 := s.clientFor(a)
	if ca1 == s.client || s.clientFor(a) != ca1 || s.clientFor(New("a", h, MustPattern("b")).WithTLS(settings)) != ca1 {
		t.Fatal("the client of a dispatcher with TLS settings is not its own, or not kept")
	}
	if tr := ca1.Transport.(*http.Transport); tr.TLSClientConfig.RootCAs == nil || len(tr.TLSClientConfig.Certificates) != 1 {
		t.Fatalf("TLS config %+v", tr.TLSClientConfig)
	}
	// The same paths with a renewed certificate: a new client.
	ca.Client(t, "x").Write(t, strings.TrimSuffix(settings.CertFile, "/client.crt"), "client")
	if s.clientFor(New("a", h, MustPattern("a")).WithTLS(settings)) == ca1 {
		t.Fatal("a dispatcher rebuilt with renewed files kept the old client")
	}
	s.CloseIdleConnections()
}

func TestInsecureSkipVerifyWarns(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	h, _ := ParseHost("https://localhost:8443")
	d := New("risky", h, MustPattern("a")).WithTLS(TLSSettings{InsecureSkipVerify: true})
	set, err := SetOf(d)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(set, newMemSource(), NewHTTPSender(Options{}), testOptions(), zap.New(core))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stopManager(t, m)
	if err := m.Add(New("risky2", h, MustPattern("b")).WithTLS(TLSSettings{InsecureSkipVerify: true})); err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, e := range logs.FilterMessageSnippet("insecure-skip-verify").All() {
		named = append(named, e.ContextMap()["dispatcher"].(string))
	}
	if strings.Join(named, ",") != "risky,risky2" {
		t.Fatalf("warnings for %q; want risky (at start) and risky2 (when added)", named)
	}
}
