package app_test

import (
	"context"
	"crypto/tls"
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/reload"
	"github.com/mmmq/mmmq/modules/servertls/tlstest"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// serialAt handshakes with addr trusting ca and returns the serial number
// of the certificate served.
func serialAt(t *testing.T, addr string, ca *tlstest.CA) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool()})
	require.NoError(t, err)
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// With server.tls set, the HTTP API and the line protocol serve the same
// certificate, and the reload module (SIGHUP's) renews both.
func TestServerTLSThroughTheApplication(t *testing.T) {
	ca := tlstest.NewCA(t, "test ca")
	dir := t.TempDir()
	first := ca.Server(t)
	cfg := testConfig(t, t.TempDir())
	cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile = first.Write(t, dir, "server")
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: "127.0.0.1:0", MaxLineBytes: lineproto.DefaultMaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	var (
		srv *httpapi.Server
		lp  *lineproto.Server
		rl  *reload.Reloader
	)
	a := fxtest.New(t, app.Options(config.Supply(cfg), fx.Populate(&srv, &lp, &rl)))
	a.RequireStart()
	defer a.RequireStop()
	require.Equal(t, 0, serialAt(t, srv.Addr(), ca).Cmp(first.Cert.SerialNumber))
	require.Equal(t, 0, serialAt(t, lp.Addr(), ca).Cmp(first.Cert.SerialNumber))

	second := ca.Server(t)
	second.Write(t, dir, "server")
	require.Equal(t, 0, rl.All(context.Background()), "failed reloads")
	require.Equal(t, 0, serialAt(t, srv.Addr(), ca).Cmp(second.Cert.SerialNumber), "http after the reload")
	require.Equal(t, 0, serialAt(t, lp.Addr(), ca).Cmp(second.Cert.SerialNumber), "lineproto after the reload")
}

// A server.tls file that cannot be read stops startup, naming the key.
func TestServerTLSUnreadableFileNamesTheKey(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	cfg.Server.TLS.CertFile, cfg.Server.TLS.KeyFile = "/nonexistent/server.crt", "/nonexistent/server.key"
	err := app.New(fx.NopLogger, config.Supply(cfg)).Err()
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "server.tls.cert-file: "), err.Error())
}
