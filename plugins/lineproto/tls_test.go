package lineproto

import (
	"bufio"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
)

// startTLS runs a server over TLS with a new CA's server certificate and
// client-auth verify-if-given (client CA: the same CA).
func startTLS(t *testing.T, opts Options) (*testEnv, *tlstest.CA) {
	t.Helper()
	ca := tlstest.NewCA(t, "mmmq test ca")
	dir := t.TempDir()
	cert, key := ca.Server(t).Write(t, dir, "server")
	certs, err := servertls.New(config.ServerTLSConfig{CertFile: cert, KeyFile: key,
		ClientCAFile: ca.WriteCA(t, dir, "ca.pem"), ClientAuth: config.ClientAuthVerifyIfGiven}, "lineproto")
	if err != nil {
		t.Fatal(err)
	}
	opts.TLS = certs
	return start(t, opts, groups.Options{}), ca
}

// dialTLS connects over TLS trusting ca, with cert as client certificate
// when given.
func (e *testEnv) dialTLS(t *testing.T, ca *tlstest.CA, cert ...tls.Certificate) *client {
	t.Helper()
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", e.srv.Addr(),
		&tls.Config{RootCAs: ca.Pool(), Certificates: cert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &client{t: t, nc: nc, r: bufio.NewReader(nc)}
}

func TestTLSPub(t *testing.T) {
	e, ca := startTLS(t, Options{})
	c := e.dialTLS(t, ca, ca.Client(t, "billing").TLS(t))
	if got := c.do(`PUB order.created WRITTEN {"orderId":1}`); got != "OK 0 WRITTEN" {
		t.Fatalf("PUB over TLS: %q", got)
	}
	// The connection knows its client certificate's common name.
	e.srv.mu.Lock()
	var cns []string
	for sc := range e.srv.conns {
		cn, _ := sc.peerCommonName()
		cns = append(cns, cn)
	}
	e.srv.mu.Unlock()
	if len(cns) != 1 || cns[0] != "billing" {
		t.Fatalf("peer common names %q; want [billing]", cns)
	}
	anon := e.dialTLS(t, ca)
	if got := anon.do(`PUB order.created WRITTEN {"orderId":2}`); got != "OK 1 WRITTEN" {
		t.Fatalf("PUB over TLS without a client certificate: %q", got)
	}
}

// A plain-text client gets no answer and its connection is closed; nothing
// is published.
func TestTLSRefusesPlainText(t *testing.T) {
	e, _ := startTLS(t, Options{})
	c := e.dial(t)
	c.send(`PUB order.created WRITTEN {"orderId":1}`)
	_ = c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c.r)
	if err != nil && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("plain-text client: %v (read %q); want the connection closed", err, b)
	}
	// The server answers a TLS alert at most; never a protocol reply.
	if len(b) > 0 && (b[0] == 'O' || b[0] == 'E') {
		t.Fatalf("plain-text client got %q", b)
	}
	if _, ok := e.reg.Get("order.created"); ok {
		t.Fatal("a plain-text PUB was published")
	}
}

// A client that never finishes its handshake is closed after
// HandshakeTimeout and its connection slot is free again.
func TestTLSHandshakeDeadline(t *testing.T) {
	e, ca := startTLS(t, Options{HandshakeTimeout: 200 * time.Millisecond, MaxConns: 1})
	stalled, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	_ = stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	if _, err := stalled.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("stalled handshake: %v; want the server to close the connection", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("stalled handshake closed after %s", d)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.srv.mu.Lock()
		n := len(e.srv.conns)
		e.srv.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still held after the handshake deadline", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := e.dialTLS(t, ca).do(`PUB t WRITTEN 1`); got != "OK 0 WRITTEN" {
		t.Fatalf("PUB after the stalled client left: %q", got)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op)
}
