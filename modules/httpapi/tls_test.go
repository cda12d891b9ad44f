package httpapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptrace"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/reload"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// tlsBroker is a server over TLS with a test CA, on a free port.
type tlsBroker struct {
	ca         *tlstest.CA
	dir        string
	cert, key  string
	caFile     string
	s          *Server
	serial     *big.Int // of the server certificate written first
	slowStart  chan struct{}
	slowFinish chan struct{}
}

// startTLS starts a server with a new CA's server certificate and auth as
// server.tls.client-auth (a client CA file from the same CA unless none).
// Its routes are GET /whoami (the verified client certificate's common
// name) and GET /slow (answers once slowFinish is closed).
func startTLS(t *testing.T, auth config.ClientAuth) *tlsBroker {
	t.Helper()
	b := &tlsBroker{ca: tlstest.NewCA(t, "mmmq test ca"), dir: t.TempDir(), slowStart: make(chan struct{}, 1), slowFinish: make(chan struct{})}
	leaf := b.ca.Server(t)
	b.serial = leaf.Cert.SerialNumber
	b.cert, b.key = leaf.Write(t, b.dir, "server")
	c := config.ServerTLSConfig{CertFile: b.cert, KeyFile: b.key, ClientAuth: auth}
	if auth != config.ClientAuthNone {
		b.caFile = b.ca.WriteCA(t, b.dir, "clients.pem")
		c.ClientCAFile = b.caFile
	}
	certs, err := servertls.New(c, "http")
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir()})
	t.Cleanup(func() { _ = reg.Close() })
	b.s = New(Options{Addr: "127.0.0.1:0", TLS: certs}, reg, nil, log, routeFunc(func(r *mux.Router) {
		r.HandleFunc("/whoami", func(w http.ResponseWriter, r *http.Request) {
			contract.WriteJSON(w, http.StatusOK, map[string]string{"cn": servertls.PeerCommonName(r.TLS)})
		}).Methods(http.MethodGet)
		r.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
			b.slowStart <- struct{}{}
			<-b.slowFinish
			contract.WriteJSON(w, http.StatusOK, map[string]string{"slow": "done"})
		}).Methods(http.MethodGet)
	}))
	if err := b.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.s.Stop(context.Background()) })
	return b
}

type routeFunc func(*mux.Router)

func (f routeFunc) Register(r *mux.Router) { f(r) }

// client is an HTTPS client trusting roots (nil: the system's), sending
// cert (when given) as its client certificate whatever CAs the server
// names, with TLS versions up to maxVersion (0: any).
func client(roots *x509.CertPool, maxVersion uint16, cert ...tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS10, MaxVersion: maxVersion}
	if len(cert) > 0 {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert[0], nil }
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

func (b *tlsBroker) url(path string) string { return "https://" + b.s.Addr() + path }

// get GETs path and returns the response with its body read.
func get(t *testing.T, c *http.Client, url string) (*http.Response, string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

func TestTLSPublishAndRefusals(t *testing.T) {
	b := startTLS(t, config.ClientAuthNone)
	c := client(b.ca.Pool(), 0)
	resp, err := c.Post(b.url("/messages"), "application/json", strings.NewReader(`{"topic":"t","content":{"n":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"acknowledgement":"ACK"`) {
		t.Fatalf("publish over TLS: HTTP %d %s", resp.StatusCode, body)
	}
	if resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
		t.Fatalf("connection state %+v; want TLS 1.2 or later", resp.TLS)
	}

	// A client that does not trust the test CA refuses the server.
	_, _, err = get(t, client(nil, 0), b.url("/healthz"))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("client without the CA: %v; want an unknown authority error", err)
	}
	// TLS 1.1 is refused by the server.
	_, _, err = get(t, client(b.ca.Pool(), tls.VersionTLS11), b.url("/healthz"))
	if err == nil || !strings.Contains(err.Error(), "protocol version") {
		t.Fatalf("TLS 1.1 client: %v; want a protocol version alert", err)
	}
	// Plain HTTP to the TLS port gets no API answer.
	if resp, _, err := get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+b.s.Addr()+"/healthz"); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("plain HTTP was served on the TLS port")
	}
}

func TestTLSClientCertificates(t *testing.T) {
	for _, auth := range []config.ClientAuth{config.ClientAuthRequire, config.ClientAuthVerifyIfGiven} {
		t.Run(string(auth), func(t *testing.T) {
			b := startTLS(t, auth)
			_, body, err := get(t, client(b.ca.Pool(), 0), b.url("/whoami"))
			if auth == config.ClientAuthRequire && (err == nil || !strings.Contains(err.Error(), "certificate required")) {
				t.Fatalf("no client certificate under require: %v %s; want the handshake refused", err, body)
			}
			if auth == config.ClientAuthVerifyIfGiven && (err != nil || !strings.Contains(body, `"cn":""`)) {
				t.Fatalf("no client certificate under verify-if-given: %v %s; want served without a principal", err, body)
			}
			// A certificate from another CA is refused under both.
			stranger := tlstest.NewCA(t, "other ca").Client(t, "billing")
			if _, body, err := get(t, client(b.ca.Pool(), 0, stranger.TLS(t)), b.url("/whoami")); err == nil {
				t.Fatalf("client certificate of another CA accepted: %s", body)
			}
			resp, body, err := get(t, client(b.ca.Pool(), 0, b.ca.Client(t, "billing").TLS(t)), b.url("/whoami"))
			if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(body, `"cn":"billing"`) {
				t.Fatalf("client certificate of the CA: %v %s; want the common name billing in r.TLS.VerifiedChains", err, body)
			}
		})
	}
}

// A certificate renewed on disk is served to new connections after a
// reload (direct, then through SIGHUP and the reload module), while a
// keep-alive connection opened before keeps working, a request in flight
// during the reload included.
func TestTLSRotation(t *testing.T) {
	b := startTLS(t, config.ClientAuthNone)
	old := client(b.ca.Pool(), 0)
	resp, _, err := get(t, old, b.url("/healthz"))
	if err != nil || !sameSerial(resp, b.serial) {
		t.Fatalf("first connection: %v", err)
	}
	type result struct {
		resp *http.Response
		body string
		err  error
	}
	inFlight := make(chan result, 1)
	go func() {
		resp, body, err := get(t, old, b.url("/slow"))
		inFlight <- result{resp, body, err}
	}()
	<-b.slowStart

	renewed := b.ca.Server(t)
	renewed.Write(t, b.dir, "server")
	if err := b.s.Reloaders()[0].Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	resp, _, err = get(t, client(b.ca.Pool(), 0), b.url("/healthz"))
	if err != nil || !sameSerial(resp, renewed.Cert.SerialNumber) {
		t.Fatalf("new connection after the reload: %v, serial %v; want the renewed %v", err, serialOf(resp), renewed.Cert.SerialNumber)
	}

	close(b.slowFinish)
	r := <-inFlight
	if r.err != nil || r.resp.StatusCode != http.StatusOK || !sameSerial(r.resp, b.serial) {
		t.Fatalf("request in flight during the reload: %v %s", r.err, r.body)
	}
	reused := false
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, b.url("/healthz"), nil)
	resp, err = old.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !reused || !sameSerial(resp, b.serial) {
		t.Fatalf("keep-alive connection after the reload: reused %v, serial %v; want the open connection, old certificate", reused, serialOf(resp))
	}

	// Through SIGHUP and the reload module, as app.New runs it.
	rl := reload.New(b.s.Reloaders(), zaptest.NewLogger(t))
	if err := rl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer rl.Stop(context.Background())
	third := b.ca.Server(t)
	third.Write(t, b.dir, "server")
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, _, err = get(t, client(b.ca.Pool(), 0), b.url("/healthz"))
		if err == nil && sameSerial(resp, third.Cert.SerialNumber) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGHUP: %v, serial %v; want %v", err, serialOf(resp), third.Cert.SerialNumber)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func serialOf(resp *http.Response) *big.Int {
	if resp == nil || resp.TLS == nil || len(resp.TLS.PeerCertificates) == 0 {
		return nil
	}
	return resp.TLS.PeerCertificates[0].SerialNumber
}

func sameSerial(resp *http.Response, want *big.Int) bool {
	got := serialOf(resp)
	return got != nil && got.Cmp(want) == 0
}
