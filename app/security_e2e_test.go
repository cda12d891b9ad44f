package app_test

// End to end: the real auth, TLS, HTTP and line-protocol modules of the
// default application together, as a deployment would run them.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// secureBroker is a broker with server.tls (client-auth verify-if-given),
// tokens, and the line protocol on a free port (TLS too).
type secureBroker struct {
	*authBroker
	ca      *tlstest.CA
	ts      tokenSet
	lpAddr  string
	billing tls.Certificate // client certificate, common name "billing"
}

// startSecureBroker: entries "all" (every action, a token), "reader" (read,
// a token) and "billing" (publish on order.**, the client-cn "billing").
func startSecureBroker(t *testing.T) *secureBroker {
	t.Helper()
	ca := tlstest.NewCA(t, "e2e ca")
	dir := t.TempDir()
	cfg := testConfig(t, t.TempDir())
	cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile = ca.Server(t).Write(t, dir, "server")
	cfg.Server.TLS.ClientCAFile = ca.WriteCA(t, dir, "clients.pem")
	cfg.Server.TLS.ClientAuth = config.ClientAuthVerifyIfGiven
	ts := tokenSet{}
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{
			ts.entry("all", allow(contract.Actions, nil, nil)),
			ts.entry("reader", allow([]contract.Action{contract.ActionRead}, nil, nil)),
			{Name: "billing", ClientCN: "billing", Permissions: []auth.PermissionConfig{
				allow([]contract.Action{contract.ActionPublish}, []string{"order.**"}, nil),
			}},
		}
	})
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: "127.0.0.1:0", MaxLineBytes: lineproto.DefaultMaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	var lp *lineproto.Server
	b := startAuthBroker(t, cfg, fx.Populate(&lp))
	b.base = "https://" + b.srv.Addr()
	require.NotEmpty(t, lp.Addr(), "the line protocol did not start")
	e := &secureBroker{authBroker: b, ca: ca, ts: ts, lpAddr: lp.Addr(), billing: ca.Client(t, "billing").TLS(t)}
	b.client = e.client() // no certificate
	return e
}

// client is an HTTPS client trusting the test CA, presenting certs.
func (e *secureBroker) client(certs ...tls.Certificate) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(), Certificates: certs}}
	e.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestE2EClientCertificatePrincipal: over HTTPS with client-auth
// verify-if-given, the "billing" client certificate is a principal with its
// entry's permissions and no token; without certificate or token the
// request is 401; with a certificate and a bearer token the token decides.
func TestE2EClientCertificatePrincipal(t *testing.T) {
	e := startSecureBroker(t)
	billing := e.client(e.billing)
	anon := e.client()
	wrong, _ := auth.NewToken()

	st, _, out := e.doWith(billing, "POST", "/messages", "", `{"topic":"order.eu.new","content":1}`)
	require.Equal(t, 200, st, "the billing certificate publishes on order.**: %s", out)

	st, _, out = e.doWith(billing, "POST", "/messages", "", `{"topic":"pay.x","content":1}`)
	require.Equal(t, 403, st, out)
	assertErrorBody(t, out, contract.CodeForbidden, "pay.x with the billing certificate")
	assert.Contains(t, out, `\"billing\" may not publish on topic \"pay.x\"`)

	st, h, out := e.doWith(anon, "POST", "/messages", "", `{"topic":"order.eu.new","content":2}`)
	require.Equal(t, 401, st, "no certificate, no token: %s", out)
	assert.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
	assertErrorBody(t, out, contract.CodeUnauthorized, "no credentials")

	// A certificate and a bearer token: the token decides, either way.
	st, h, out = e.doWith(billing, "POST", "/messages", wrong, `{"topic":"order.eu.new","content":3}`)
	require.Equal(t, 401, st, "certificate plus an invalid token: %s", out)
	assert.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
	st, _, out = e.doWith(billing, "POST", "/messages", e.ts["reader"], `{"topic":"order.eu.new","content":4}`)
	require.Equal(t, 403, st, "certificate plus a token without publish: %s", out)
	assert.Contains(t, out, `\"reader\" may not publish`)
	st, _, out = e.doWith(billing, "POST", "/messages", e.ts["all"], `{"topic":"pay.x","content":5}`)
	require.Equal(t, 200, st, "certificate plus a token allowed pay.x: %s", out)

	// A verified certificate whose common name is no entry is no principal.
	st, _, out = e.doWith(e.client(e.ca.Client(t, "mallory").TLS(t)), "GET", "/topics", "", "")
	require.Equal(t, 401, st, out)
	// A certificate of another CA, sent anyway (a Go client would not send
	// it: the server names its acceptable CAs), fails the handshake:
	// verify-if-given verifies any certificate given.
	other := tlstest.NewCA(t, "other ca").Client(t, "billing").TLS(t)
	forced := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.ca.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &other, nil }}}
	defer forced.CloseIdleConnections()
	req, err := http.NewRequest("GET", e.base+"/topics", nil)
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: forced}).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "a certificate of an unknown CA is refused in the handshake")
	st, _, out = e.doWith(e.client(other), "GET", "/topics", "", "")
	require.Equal(t, 401, st, "not sent by a Go client, so no credentials: %s", out)

	// Only the two allowed publishes were stored.
	for topic, want := range map[string]string{"order.eu.new": `"highWatermark":1`, "pay.x": `"highWatermark":1`} {
		st, _, out = e.doWith(anon, "GET", "/topics/"+topic+"/messages", e.ts["all"], "")
		require.Equal(t, 200, st, out)
		assert.Contains(t, out, want, topic)
	}
	e.assertNoToken(e.ts)
}

// lineClient is one line-protocol connection.
type lineClient struct {
	t  *testing.T
	nc net.Conn
	r  *bufio.Reader
}

func dialLine(t *testing.T, addr string, tc *tls.Config) *lineClient {
	t.Helper()
	var (
		nc  net.Conn
		err error
	)
	d := &net.Dialer{Timeout: 10 * time.Second}
	if tc != nil {
		nc, err = tls.DialWithDialer(d, "tcp", addr, tc)
	} else {
		nc, err = d.Dial("tcp", addr)
	}
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(15*time.Second)))
	return &lineClient{t: t, nc: nc, r: bufio.NewReader(nc)}
}

// do sends line and returns the reply line without its newline.
func (c *lineClient) do(line string) string {
	c.t.Helper()
	_, err := io.WriteString(c.nc, line+"\n")
	require.NoError(c.t, err)
	l, err := c.r.ReadString('\n')
	require.NoError(c.t, err, "reply to %q", line)
	return strings.TrimRight(l, "\r\n")
}

// closed requires the server to close the connection with no further reply.
func (c *lineClient) closed() {
	c.t.Helper()
	l, err := c.r.ReadString('\n')
	require.True(c.t, errors.Is(err, io.EOF), "want the connection closed, got %q, %v", l, err)
}

// TestE2ELineProtocolRealAuth: the line protocol with the real auth
// module: AUTH <token> names the entry, a PUB outside its permissions is
// FORBIDDEN naming the action and topic, a first line that is not AUTH is
// UNAUTHORIZED and closes; over TLS the billing client certificate
// publishes without AUTH, within its permissions only.
func TestE2ELineProtocolRealAuth(t *testing.T) {
	ts := tokenSet{}
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{
			ts.entry("orders", allow([]contract.Action{contract.ActionPublish}, []string{"order.**"}, nil)),
		}
	})
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: "127.0.0.1:0", MaxLineBytes: lineproto.DefaultMaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	var lp *lineproto.Server
	b := startAuthBroker(t, cfg, fx.Populate(&lp))
	require.NotEmpty(t, lp.Addr(), "the line protocol did not start")

	c := dialLine(t, lp.Addr(), nil)
	require.Equal(t, "OK AUTH orders", c.do("AUTH "+ts["orders"]))
	require.Equal(t, "OK 0 DURABLE", c.do(`PUB order.new DURABLE {"n":1}`))
	got := c.do(`PUB pay.x DURABLE {"n":2}`)
	require.True(t, strings.HasPrefix(got, "ERR FORBIDDEN publish pay.x "), got)
	assert.Contains(t, got, `"orders" may not publish on topic "pay.x"`)
	require.Equal(t, "OK 1 DURABLE", c.do(`PUB order.new DURABLE {"n":3}`), "the connection stays open after FORBIDDEN")

	c = dialLine(t, lp.Addr(), nil)
	got = c.do(`PUB order.new DURABLE {"n":4}`)
	require.True(t, strings.HasPrefix(got, "ERR UNAUTHORIZED "), got)
	c.closed()
	wrong, _ := auth.NewToken()
	c = dialLine(t, lp.Addr(), nil)
	got = c.do("AUTH " + wrong)
	require.True(t, strings.HasPrefix(got, "ERR UNAUTHORIZED "), got)
	c.closed()

	st, _, out := b.do("GET", "/topics/pay.x/messages", "", "")
	require.Equal(t, 401, st, out)
	b.assertNoToken(ts)

	// Over TLS, the client certificate authenticates the connection.
	e := startSecureBroker(t)
	c = dialLine(t, e.lpAddr, &tls.Config{RootCAs: e.ca.Pool(), Certificates: []tls.Certificate{e.billing}})
	require.Equal(t, "OK 0 DURABLE", c.do(`PUB order.tls DURABLE {"n":1}`), "the billing certificate publishes without AUTH")
	got = c.do(`PUB pay.x DURABLE {"n":2}`)
	require.True(t, strings.HasPrefix(got, "ERR FORBIDDEN publish pay.x "), got)
	assert.Contains(t, got, `"billing" may not publish`)
	c = dialLine(t, e.lpAddr, &tls.Config{RootCAs: e.ca.Pool()})
	got = c.do(`PUB order.tls DURABLE {"n":3}`)
	require.True(t, strings.HasPrefix(got, "ERR UNAUTHORIZED "), "TLS without a certificate and without AUTH: %s", got)
	c.closed()
	c = dialLine(t, e.lpAddr, &tls.Config{RootCAs: e.ca.Pool()})
	require.Equal(t, "OK AUTH all", c.do("AUTH "+e.ts["all"]), "AUTH over TLS without a certificate")
	require.Equal(t, "OK 0 DURABLE", c.do(`PUB pay.x DURABLE {"n":4}`))
	e.assertNoToken(e.ts)
}

// TestE2ETokenFileRotationKeepsConnections: a token file rewritten on disk
// is picked up by the auth module's poll (auth.Store.Poll, what its ticker
// runs) with no restart; an HTTP keep-alive connection opened with the old
// token stays open and serves the new token on the same connection, and
// the old token is refused, on that connection (which a refused request
// without a body keeps open, and one with a body closes) and on a new one.
func TestE2ETokenFileRotationKeepsConnections(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "billing.token")
	old, _ := auth.NewToken()
	fresh, _ := auth.NewToken()
	require.NoError(t, os.WriteFile(tokFile, []byte(old+"\n"), 0o600))
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{{Name: "billing", TokenFile: tokFile, Permissions: []auth.PermissionConfig{
			allow([]contract.Action{contract.ActionPublish, contract.ActionRead}, []string{"order.**"}, nil),
		}}}
	})
	var store *auth.Store
	b := startAuthBroker(t, cfg, fx.Populate(&store))

	// One connection: MaxConnsPerHost 1, and every request's connection
	// is recorded.
	tr := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	keep := &http.Client{Transport: tr}
	var conns []string
	var reused []bool
	// send publishes body, or reads order.rot when body is "".
	send := func(token, body string) (int, string) {
		t.Helper()
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
			conns = append(conns, i.Conn.LocalAddr().String())
			reused = append(reused, i.Reused)
		}}
		ctx := httptrace.WithClientTrace(context.Background(), trace)
		req, err := http.NewRequestWithContext(ctx, "POST", b.base+"/messages", strings.NewReader(body))
		if body == "" {
			req, err = http.NewRequestWithContext(ctx, "GET", b.base+"/topics/order.rot/messages", nil)
		}
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := keep.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(out)
	}
	st, out := send(old, `{"topic":"order.rot","content":1}`)
	require.Equal(t, 200, st, out)

	// Rotate: a new token in the file (another size, so the poll's size and
	// modification-time check sees the change whatever the clock's grain).
	require.NoError(t, os.WriteFile(tokFile, []byte("  "+fresh+"  \n"), 0o600))
	st, out = send(old, `{"topic":"order.rot","content":2}`)
	require.Equal(t, 200, st, "before the poll the old token is still in force: %s", out)
	store.Poll()

	st, out = send(fresh, `{"topic":"order.rot","content":3}`)
	require.Equal(t, 200, st, "the new token on the open connection: %s", out)
	st, out = send(old, "")
	require.Equal(t, 401, st, "the old token after the rotation: %s", out)
	st, out = send(fresh, "")
	require.Equal(t, 200, st, "the connection survives a 401 to a request without a body: %s", out)
	require.Len(t, conns, 5)
	for i := 1; i < len(conns); i++ {
		assert.Equal(t, conns[0], conns[i], "request %d on the first connection", i+1)
		assert.True(t, reused[i], "request %d reused the connection", i+1)
	}
	// A refused request with a body is answered without reading it, and
	// its connection closed; the client carries on over a new one.
	st, out = send(old, `{"topic":"order.rot","content":4}`)
	require.Equal(t, 401, st, "the old token after the rotation: %s", out)
	st, out = send(fresh, `{"topic":"order.rot","content":5}`)
	require.Equal(t, 200, st, out)
	require.Len(t, conns, 7)
	assert.False(t, reused[6], "a new connection after the refused publish")

	st, _, out = b.do("POST", "/messages", old, `{"topic":"order.rot","content":6}`)
	require.Equal(t, 401, st, "the old token on a new connection: %s", out)
	st, _, out = b.do("GET", "/topics/order.rot/messages", fresh, "")
	require.Equal(t, 200, st, out)
	assert.Contains(t, out, `"highWatermark":4`, "the four accepted publishes, nothing of the refused ones")
	b.assertNoToken(tokenSet{"old": old, "fresh": fresh})
}
