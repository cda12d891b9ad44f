package app_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

// nextOffset is the next offset of topic on the broker at base (-1 when
// the topic does not exist).
func nextOffset(t *testing.T, base, topic string) float64 {
	t.Helper()
	_, body := call(t, "GET", base+"/topics", "")
	for _, x := range body["topics"].([]any) {
		if tp := x.(map[string]any); tp["name"] == topic {
			return tp["nextOffset"].(float64)
		}
	}
	return -1
}

// TestAdminRefusesADispatcherToTheBrokerItself: POST and PUT
// /mmmq/dispatchers with a host that is the broker's own listen address
// (its bound port on a loopback name or address) are 400 naming the field
// host and the rule, and store nothing; a consumer on another port of
// localhost is accepted.
func TestAdminRefusesADispatcherToTheBrokerItself(t *testing.T) {
	root := t.TempDir()
	a, base := startBroker(t, testConfig(t, root))
	defer a.RequireStop()
	port := base[strings.LastIndex(base, ":")+1:]
	for _, host := range []string{"http://localhost:" + port, "http://127.0.0.1:" + port, "https://[::1]:" + port} {
		st, body := call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"self","host":%q,"patterns":["**"]}`, host))
		assert.Equal(t, 400, st, "%s: %v", host, body)
		assert.Equal(t, "NACK", body["acknowledgement"])
		assert.Equal(t, "BAD_REQUEST", body["code"])
		assert.Contains(t, body["error"], "host: ")
		assert.Contains(t, body["error"], "this broker's own listen address")
	}
	_, err := os.Stat(filepath.Join(root, "dispatchers.json"))
	assert.True(t, os.IsNotExist(err), "dispatchers.json written for a refused dispatcher: %v", err)

	c := newConsumer(t) // another port on the same machine
	st, body := call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"ok","host":%q,"patterns":["**"]}`, c.srv.URL))
	require.Equal(t, 201, st, "%v", body)
	st, body = call(t, "PUT", base+"/mmmq/dispatchers/ok", fmt.Sprintf(`{"host":"http://localhost:%s","patterns":["**"]}`, port))
	assert.Equal(t, 400, st, "%v", body)
	assert.Contains(t, body["error"], "host: ")
	assert.Contains(t, body["error"], "own listen address")
	_, body = call(t, "GET", base+"/mmmq/dispatchers/ok", "")
	assert.Equal(t, c.srv.URL, body["host"], "the refused PUT changed the dispatcher")
}

// TestStartupRefusesADispatcherToTheBrokerItself: a dispatcher from the
// configuration file or from Go code pushing to server.port on localhost
// stops startup, the error naming the key (or the dispatcher); one on
// another port starts.
func TestStartupRefusesADispatcherToTheBrokerItself(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	self := fmt.Sprintf("http://localhost:%d", port)

	cfg := testConfig(t, t.TempDir())
	cfg.Server.Port = port
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "fwd", Host: self, Patterns: []string{"**"}}})
	err = app.New(config.Supply(cfg)).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.broker.dispatchers[0].host")
	assert.Contains(t, err.Error(), "own listen address")

	cfg = testConfig(t, t.TempDir())
	cfg.Server.Port = port
	h, err := dispatcher.ParseHost(self)
	require.NoError(t, err)
	err = app.New(config.Supply(cfg), provideDispatcher(dispatcher.New("in-code", h, dispatcher.MustPattern("**")))).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `dispatcher "in-code"`)
	assert.Contains(t, err.Error(), "own listen address")

	cfg = testConfig(t, t.TempDir())
	cfg.Server.Port = port
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "beside", Host: fmt.Sprintf("http://localhost:%d", port+1), Patterns: []string{"**"}}})
	assert.NoError(t, app.New(config.Supply(cfg)).Err(), "a consumer on another port of localhost")
}

// TestPushLoopRefusedOnTheWire: a dispatcher that reaches its own broker
// by a way the host check cannot see (here a proxy on another port), with
// dedup off, gets 508 LOOP for its push and backs off: the one publish
// stays one message, where it used to loop for ever. A dispatcher of
// broker A pushing to broker B's /mmmq/messages is accepted by B (another
// instance id): forwarding between brokers still works.
func TestPushLoopRefusedOnTheWire(t *testing.T) {
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, topicqueue.DedupSection, func(d *topicqueue.DedupConfig) { d.Window = 0 })
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	b, baseB := startBroker(t, testConfig(t, t.TempDir()))
	defer b.RequireStop()

	target, err := url.Parse(base)
	require.NoError(t, err)
	var loops atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(r *http.Response) error {
		if r.StatusCode == http.StatusLoopDetected {
			loops.Add(1)
		}
		return nil
	}
	px := httptest.NewServer(proxy)
	t.Cleanup(px.Close)

	st, body := call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"via-proxy","host":%q,"patterns":["loop.*"]}`, px.URL))
	require.Equal(t, 201, st, "%v", body)
	st, body = call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"to-b","host":%q,"patterns":["fwd.*"]}`, baseB))
	require.Equal(t, 201, st, "%v", body)

	publish(t, base, "loop.t", map[string]any{"n": 1})
	publish(t, base, "fwd.t", map[string]any{"n": 2})
	require.Eventually(t, func() bool { return loops.Load() >= 3 }, 10*time.Second, 5*time.Millisecond, "no 508 answers through the proxy")
	assert.EqualValues(t, 1, nextOffset(t, base, "loop.t"), "the refused pushes stored messages")
	var ts map[string]any
	require.Eventually(t, func() bool {
		_, body := call(t, "GET", base+"/mmmq/dispatchers/via-proxy", "")
		ts = body["topics"].([]any)[0].(map[string]any)
		return ts["state"] == "backoff"
	}, 10*time.Second, time.Millisecond, "the dispatcher does not back off")
	assert.Contains(t, ts["lastError"], "508")
	assert.Contains(t, ts["lastError"], "loop: pushed by a dispatcher of this broker")
	assert.EqualValues(t, 0, ts["committed"])

	require.Eventually(t, func() bool { return nextOffset(t, baseB, "fwd.t") == 1 }, 10*time.Second, 5*time.Millisecond, "broker B did not store the forwarded message")
	st, body = call(t, "GET", baseB+"/topics/fwd.t/messages?offset=0&limit=10", "")
	require.Equal(t, 200, st, "%v", body)
	assert.Contains(t, fmt.Sprint(body["messages"]), "n:2")
}
