package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/reload"
)

// authBroker is a broker with authentication on, every response body and
// log line it produced kept for the scan for tokens.
type authBroker struct {
	t      *testing.T
	app    *fxtest.App
	base   string
	srv    *httpapi.Server
	client *http.Client // for do; nil: http.DefaultClient
	logs   *observer.ObservedLogs
	mu     sync.Mutex
	bodies []string
}

// tokenSet makes one token per entry name; the config gets their digests.
type tokenSet map[string]string

func (ts tokenSet) entry(name string, perms ...auth.PermissionConfig) auth.TokenConfig {
	tok, digest := auth.NewToken()
	ts[name] = tok
	return auth.TokenConfig{Name: name, TokenSHA256: digest, Permissions: perms}
}

func allow(actions []contract.Action, topics, groups []string) auth.PermissionConfig {
	p := auth.PermissionConfig{Topics: topics, Groups: groups}
	for _, a := range actions {
		p.Actions = append(p.Actions, string(a))
	}
	return p
}

func startAuthBroker(t *testing.T, cfg *config.Config, opts ...fx.Option) *authBroker {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	b := &authBroker{t: t, logs: logs}
	opts = append([]fx.Option{
		config.Supply(cfg), fx.Populate(&b.srv),
		fx.Decorate(func(l *zap.Logger) *zap.Logger { return zap.New(zapcore.NewTee(l.Core(), core)) }),
	}, opts...)
	b.app = fxtest.New(t, app.Options(opts...))
	b.app.RequireStart()
	t.Cleanup(b.app.RequireStop)
	b.base = "http://" + b.srv.Addr()
	return b
}

// do sends a request with token ("" for none) and returns the status, the
// headers and the body.
func (b *authBroker) do(method, path, token, body string, hdr ...string) (int, http.Header, string) {
	b.t.Helper()
	c := b.client
	if c == nil {
		c = http.DefaultClient
	}
	return b.doWith(c, method, path, token, body, hdr...)
}

// doWith is do through the client c (a TLS client, a keep-alive one).
func (b *authBroker) doWith(c *http.Client, method, path, token, body string, hdr ...string) (int, http.Header, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	require.NoError(b.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	b.mu.Lock()
	b.bodies = append(b.bodies, string(out))
	b.mu.Unlock()
	return resp.StatusCode, resp.Header, string(out)
}

// listedTopics is the names GET /topics shows token, sorted.
func (b *authBroker) listedTopics(token string) []string {
	b.t.Helper()
	st, _, out := b.do("GET", "/topics", token, "")
	require.Equal(b.t, 200, st, out)
	var listing struct{ Topics []httpapi.TopicInfo }
	require.NoError(b.t, json.Unmarshal([]byte(out), &listing))
	var names []string
	for _, ti := range listing.Topics {
		names = append(names, ti.Name)
	}
	slices.Sort(names)
	return names
}

// routeCase is one route of the table: how to call it, the action it
// needs ("" for an open route) and the status with that action.
type routeCase struct {
	method, template string
	path             string
	body             func() string
	hdr              func() []string
	action           contract.Action
	want             int
}

// authRoutes is every route of the default application, in an order in
// which each one succeeds with its permission (a session fetched before
// it is acknowledged, a dispatcher created before it is changed).
func authRoutes(session *string) []routeCase {
	s := func(v string) func() string { return func() string { return v } }
	sess := func() []string { return []string{"mmmq-session", *session} }
	spec := `{"name":"d1","host":"http://127.0.0.1:9","patterns":["order.**"]}`
	g := "/topics/order.new/groups/billing-1"
	return []routeCase{
		{"POST", "/messages", "/messages", s(`{"topic":"order.new","content":1}`), nil, contract.ActionPublish, 200},
		{"POST", "/mmmq/messages", "/mmmq/messages", s(`{"topic":"order.new","content":2}`), nil, contract.ActionPublish, 200},
		{"POST", "/messages/batch", "/messages/batch", s(`[{"topic":"order.new","content":3}]`), nil, contract.ActionPublish, 200},
		{"GET", "/topics", "/topics", nil, nil, contract.ActionRead, 200},
		{"GET", "/topics/{topic}/messages", "/topics/order.new/messages", nil, nil, contract.ActionRead, 200},
		{"GET", "/topics/{topic}/groups", "/topics/order.new/groups", nil, nil, contract.ActionConsume, 200},
		{"POST", "/topics/{topic}/groups/{group}/fetch", g + "/fetch?max=1", nil, nil, contract.ActionConsume, 200},
		{"POST", "/topics/{topic}/groups/{group}/ack", g + "/ack", s(`{"offset":0}`), sess, contract.ActionConsume, 200},
		{"POST", "/topics/{topic}/groups/{group}/nack", g + "/nack", s(`{"offsets":[0]}`), sess, contract.ActionConsume, 409}, // an exclusive group: GROUP_MODE once allowed
		{"POST", "/topics/{topic}/groups/{group}/redrive", g + "/redrive", nil, nil, contract.ActionAdmin, 200},
		{"DELETE", "/topics/{topic}/groups/{group}/session", g + "/session", nil, sess, contract.ActionConsume, 200},
		{"POST", "/topics/{topic}/groups/{group}/seek", g + "/seek", s(`{"to":"earliest"}`), nil, contract.ActionConsume, 200},
		{"GET", "/mmmq/dispatchers", "/mmmq/dispatchers", nil, nil, contract.ActionAdmin, 200},
		{"POST", "/mmmq/dispatchers", "/mmmq/dispatchers", s(spec), nil, contract.ActionAdmin, 201},
		{"GET", "/mmmq/dispatchers/{name}", "/mmmq/dispatchers/d1", nil, nil, contract.ActionAdmin, 200},
		{"PUT", "/mmmq/dispatchers/{name}", "/mmmq/dispatchers/d1", s(spec), nil, contract.ActionAdmin, 200},
		{"POST", "/mmmq/dispatchers/{name}/pause", "/mmmq/dispatchers/d1/pause", nil, nil, contract.ActionAdmin, 200},
		{"POST", "/mmmq/dispatchers/{name}/seek", "/mmmq/dispatchers/d1/seek", s(`{"topic":"order.new","to":"earliest"}`), nil, contract.ActionAdmin, 200},
		{"POST", "/mmmq/dispatchers/{name}/resume", "/mmmq/dispatchers/d1/resume", nil, nil, contract.ActionAdmin, 200},
		{"POST", "/mmmq/dispatchers/{name}/redrive", "/mmmq/dispatchers/d1/redrive", nil, nil, contract.ActionAdmin, 200},
		{"DELETE", "/mmmq/dispatchers/{name}", "/mmmq/dispatchers/d1", nil, nil, contract.ActionAdmin, 200},
		// The listing of pending scheduled messages: the read action.
		{"GET", "/topics/{topic}/scheduled", "/topics/order.new/scheduled", nil, nil, contract.ActionRead, 200},
		// No such scheduled message: 404, past authorization.
		{"DELETE", "/topics/{topic}/scheduled/{scheduleId}", "/topics/order.new/scheduled/1-0000000000000000", nil, nil, contract.ActionPublish, 404},
		// A topic that has not failed: 409 TOPIC_NOT_FAILED, past authorization.
		{"POST", "/topics/{topic}/reopen", "/topics/order.new/reopen", nil, nil, contract.ActionAdmin, 409},
		{"DELETE", "/topics/{topic}", "/topics/order.gone", nil, nil, contract.ActionAdmin, 200},
		{"GET", "/metrics", "/metrics", nil, nil, contract.ActionMetrics, 200},
		{"GET", "/healthz", "/healthz", nil, nil, "", 200},
		{"GET", "/readyz", "/readyz", nil, nil, "", 200},
		{"GET", "/openapi.yaml", "/openapi.yaml", nil, nil, "", 200},
		{"GET", "/.well-known/mmmq/webhook-keys", "/.well-known/mmmq/webhook-keys", nil, nil, anyToken, 200},
	}
}

// anyToken is the action of a route that any valid token may call,
// whatever its permissions (401 without one).
const anyToken contract.Action = "(any valid token)"

// authConfig has an "all" entry, and for each action an "only-<action>"
// and a "no-<action>" entry (every other action).
func authConfig(t *testing.T, ts tokenSet) *config.Config {
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) { a.Tokens = append(a.Tokens, ts.entry("all", allow(contract.Actions, nil, nil))) })
	for _, a := range contract.Actions {
		var others []contract.Action
		for _, o := range contract.Actions {
			if o != a {
				others = append(others, o)
			}
		}
		config.EditSection(cfg, auth.ConfigSection, func(c *auth.Config) {
			c.Tokens = append(c.Tokens,
				ts.entry("only-"+string(a), allow([]contract.Action{a}, nil, nil)),
				ts.entry("no-"+string(a), allow(others, nil, nil)))
		})
	}
	return cfg
}

// TestEveryRouteNeedsItsPermission: every route × {no token, wrong token,
// a token without the route's action, a token with only it} →
// 401/401/403/success; the open routes answer all four. The table must
// list every route the application registers.
func TestEveryRouteNeedsItsPermission(t *testing.T) {
	ts := tokenSet{}
	b := startAuthBroker(t, authConfig(t, ts))
	st, _, body := b.do("POST", "/messages", ts["all"], `{"topic":"order.gone","content":0}`)
	require.Equal(t, 200, st, body)

	var session string
	routes := authRoutes(&session)
	var registered, listed []string
	require.NoError(t, b.srv.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tpl, err1 := r.GetPathTemplate()
		ms, err2 := r.GetMethods()
		// The status page (plugins/ui) authenticates /ui/ itself
		// (contract.AuthExempt): TestStatusPageAuthenticatesItself.
		if err1 == nil && err2 == nil && tpl != "/ui" && !strings.HasPrefix(tpl, "/ui/") { // the HEAD-for-GET matchers have neither
			for _, m := range ms {
				registered = append(registered, m+" "+tpl)
			}
		}
		return nil
	}))
	for _, rc := range routes {
		listed = append(listed, rc.method+" "+rc.template)
	}
	sort.Strings(registered)
	sort.Strings(listed)
	require.Equal(t, registered, listed, "every registered route has an entry in authRoutes (and no other)")

	wrong, _ := auth.NewToken()
	for _, rc := range routes {
		name := rc.method + " " + rc.template
		body := func() string {
			if rc.body == nil {
				return ""
			}
			return rc.body()
		}
		hdr := func() []string {
			if rc.hdr == nil {
				return nil
			}
			return rc.hdr()
		}
		if rc.action == "" {
			for _, tok := range []string{"", wrong, ts["no-read"], ts["all"]} {
				st, _, out := b.do(rc.method, rc.path, tok, "")
				assert.Equal(t, rc.want, st, "%s with token %v: %s", name, tok != "", out)
			}
			continue
		}
		if rc.action == anyToken {
			for tok, want := range map[string]int{"": 401, wrong: 401, ts["no-read"]: rc.want, ts["only-publish"]: rc.want} {
				st, _, out := b.do(rc.method, rc.path, tok, "")
				assert.Equal(t, want, st, "%s with token %v: %s", name, tok != "", out)
			}
			continue
		}
		for _, tok := range []string{"", wrong} {
			st, h, out := b.do(rc.method, rc.path, tok, body(), hdr()...)
			if assert.Equal(t, 401, st, "%s: %s", name, out) {
				assert.Contains(t, h.Get("WWW-Authenticate"), "Bearer", name)
				assertErrorBody(t, out, contract.CodeUnauthorized, name)
			}
		}
		st, _, out := b.do(rc.method, rc.path, ts["no-"+string(rc.action)], body(), hdr()...)
		if assert.Equal(t, 403, st, "%s without %s: %s", name, rc.action, out) {
			assertErrorBody(t, out, contract.CodeForbidden, name)
			assert.Regexp(t, `may not [a-z ]*`+string(rc.action), out, name) // "administer", "read metrics"
		}
		st, h, out := b.do(rc.method, rc.path, ts["only-"+string(rc.action)], body(), hdr()...)
		assert.Equal(t, rc.want, st, "%s with only %s: %s", name, rc.action, out)
		if strings.HasSuffix(rc.template, "/fetch") {
			session = h.Get("mmmq-session")
			require.NotEmpty(t, session, out)
		}
	}

	// Nothing the refused requests sent was stored: order.new holds the
	// three messages published with the permission.
	st, _, out := b.do("GET", "/topics/order.new/messages", ts["all"], "")
	require.Equal(t, 200, st)
	assert.Contains(t, out, `"highWatermark":3`, out)
	b.assertNoToken(ts)
}

func assertErrorBody(t *testing.T, body, code, name string) {
	t.Helper()
	var e contract.ErrorBody
	if assert.NoError(t, json.Unmarshal([]byte(body), &e), name) {
		assert.Equal(t, code, e.Code, name)
		assert.Equal(t, "NACK", e.Acknowledgement, name)
		assert.NotEmpty(t, e.Error, name)
	}
}

// assertNoToken scans every response body, every log line and the metrics
// output for the tokens.
func (b *authBroker) assertNoToken(ts tokenSet) {
	t := b.t
	t.Helper()
	metrics := ""
	if ts["all"] != "" {
		_, _, metrics = b.do("GET", "/metrics", ts["all"], "")
		require.Contains(t, metrics, "mmmq_")
	}
	var lines []string
	for _, e := range b.logs.All() {
		enc, err := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()).EncodeEntry(e.Entry, e.Context)
		require.NoError(t, err)
		lines = append(lines, enc.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	all := strings.Join(append(append(lines, b.bodies...), metrics), "\n")
	for name, tok := range ts {
		assert.NotContains(t, all, tok, "token of %s", name)
		assert.NotContains(t, all, strings.TrimPrefix(tok, auth.TokenPrefix), "token of %s", name)
	}
	assert.NotEmpty(t, b.logs.FilterLoggerName("audit").All(), "the audit log wrote nothing")
}

// TestPermissionsPatternsGlobsBatchListing: topic patterns and group globs
// in permissions, a batch refused whole, a listing filtered, the audit log.
func TestPermissionsPatternsGlobsBatchListing(t *testing.T) {
	ts := tokenSet{}
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{
			ts.entry("all", allow(contract.Actions, nil, nil)),
			ts.entry("billing",
				allow([]contract.Action{contract.ActionPublish, contract.ActionRead}, []string{"order.**", "payment.*"}, nil),
				allow([]contract.Action{contract.ActionConsume}, []string{"order.**"}, []string{"billing-*"})),
		}
	})
	b := startAuthBroker(t, cfg)
	for _, topic := range []string{"order.a", "payment.card", "other.x"} {
		st, _, out := b.do("POST", "/messages", ts["all"], fmt.Sprintf(`{"topic":%q,"content":0}`, topic))
		require.Equal(t, 200, st, out)
	}
	bill := ts["billing"]
	for _, tt := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/messages", `{"topic":"order.eu.new","content":1}`, 200},
		{"POST", "/messages", `{"topic":"payment.card","content":1}`, 200},
		{"POST", "/messages", `{"topic":"payment.card.visa","content":1}`, 403},
		{"POST", "/messages", `{"topic":"other.x","content":1}`, 403},
		{"GET", "/topics/order.a/messages", "", 200},
		{"GET", "/topics/other.x/messages", "", 403},
		{"POST", "/topics/order.a/groups/billing-eu/fetch?max=1", "", 200},
		{"POST", "/topics/order.a/groups/ops/fetch?max=1", "", 403},
		{"POST", "/topics/payment.card/groups/billing-eu/fetch?max=1", "", 403},
		{"GET", "/topics/order.a/groups", "", 200},
		{"DELETE", "/topics/order.a", "", 403},
		{"GET", "/mmmq/dispatchers", "", 403},
		{"GET", "/metrics", "", 403},
	} {
		st, _, out := b.do(tt.method, tt.path, bill, tt.body)
		assert.Equal(t, tt.want, st, "%s %s %s: %s", tt.method, tt.path, tt.body, out)
		if tt.want == 403 {
			assert.Contains(t, out, `\"billing\" may not`)
		}
	}

	// A batch with one topic outside the permission is refused whole.
	st, _, out := b.do("POST", "/messages/batch", bill, `[{"topic":"order.batch","content":1},{"topic":"other.x","content":2}]`)
	require.Equal(t, 403, st, out)
	assertErrorBody(t, out, contract.CodeForbidden, "batch")
	assert.Contains(t, out, `publish on topic \"other.x\"`)
	st, _, _ = b.do("GET", "/topics/order.batch/messages", ts["all"], "")
	assert.Equal(t, 404, st, "nothing of the refused batch was stored")
	st, _, out = b.do("GET", "/topics/other.x/messages", ts["all"], "")
	require.Equal(t, 200, st)
	assert.Contains(t, out, `"highWatermark":1`, "nothing of the refused batch was stored")

	// The listing shows only the readable topics.
	assert.Equal(t, []string{"order.a", "order.eu.new", "payment.card"}, b.listedTopics(bill))

	// The audit log: refusals with principal, action, topic and remote
	// address; admin actions with their outcome.
	st, _, _ = b.do("DELETE", "/topics/other.x", ts["all"], "")
	require.Equal(t, 200, st)
	audit := b.logs.FilterLoggerName("audit")
	refusal := audit.FilterMessage("request refused").FilterField(zap.String("topic", "payment.card.visa")).All()
	require.Len(t, refusal, 1)
	m := refusal[0].ContextMap()
	assert.Equal(t, "billing", m["principal"])
	assert.Equal(t, "publish", m["action"])
	assert.EqualValues(t, 403, m["status"])
	assert.Contains(t, m["remote"], "127.0.0.1:")
	admin := audit.FilterMessage("admin action").All()
	require.Len(t, admin, 1)
	am := admin[0].ContextMap()
	assert.Equal(t, "all", am["principal"])
	assert.Equal(t, "DELETE /topics/other.x", am["target"])
	assert.Equal(t, "ok", am["outcome"])
	st, _, _ = b.do("GET", "/topics", "", "")
	require.Equal(t, 401, st)
	unauth := b.logs.FilterLoggerName("audit").FilterMessage("request refused").FilterField(zap.Int("status", 401)).All()
	require.Len(t, unauth, 1)
	assert.Equal(t, "/topics", unauth[0].ContextMap()["path"])
	b.assertNoToken(ts)
}

// TestLimitsAnswer429: max-concurrent-requests and publish-rate refuse
// with 429 RATE_LIMITED and Retry-After; the refusal is audited.
func TestLimitsAnswer429(t *testing.T) {
	ts := tokenSet{}
	cfg := testConfig(t, t.TempDir())
	one := ts.entry("one", allow(contract.Actions, nil, nil))
	one.MaxConcurrentRequests = 1
	slow := ts.entry("slow", allow(contract.Actions, nil, nil))
	slow.PublishRate, slow.PublishBurst = 0.5, 2
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) { a.Tokens = []auth.TokenConfig{one, slow} })
	b := startAuthBroker(t, cfg)

	// A long poll holds "one"'s only slot.
	st, _, out := b.do("POST", "/messages", ts["one"], `{"topic":"lim.t","content":0}`)
	require.Equal(t, 200, st, out)
	st, h, out := b.do("POST", "/topics/lim.t/groups/g/fetch?max=10", ts["one"], "")
	require.Equal(t, 200, st, out)
	polling := make(chan int)
	go func() { // nothing more to fetch: waits 3 s
		st, _, _ := b.do("POST", "/topics/lim.t/groups/g/fetch?max=10&wait=3000", ts["one"], "", "mmmq-session", h.Get("mmmq-session"))
		polling <- st
	}()
	require.Eventually(t, func() bool {
		st, h, out := b.do("GET", "/topics", ts["one"], "")
		if st != 429 {
			return false
		}
		assert.Equal(t, "1", h.Get("Retry-After"))
		assertErrorBody(t, out, contract.CodeRateLimited, "concurrent")
		assert.Contains(t, out, "concurrent requests")
		return true
	}, 5*time.Second, 10*time.Millisecond)
	st, _, _ = b.do("POST", "/messages", ts["slow"], `{"topic":"lim.t","content":1}`) // another principal is not limited
	require.Equal(t, 200, st)
	require.Equal(t, 200, <-polling)
	st, _, _ = b.do("GET", "/topics", ts["one"], "")
	assert.Equal(t, 200, st, "the slot is free once the poll ended")

	// "slow": burst 2 (one used above), then 0.5/s.
	st, _, _ = b.do("POST", "/messages", ts["slow"], `{"topic":"lim.t","content":2}`)
	require.Equal(t, 200, st)
	st, h, out = b.do("POST", "/messages", ts["slow"], `{"topic":"lim.t","content":3}`)
	require.Equal(t, 429, st, out)
	assertErrorBody(t, out, contract.CodeRateLimited, "rate")
	assert.Contains(t, out, "publish rate")
	assert.Contains(t, []string{"1", "2"}, h.Get("Retry-After"), "0.5 messages/s: one message fits within 2 s")
	st, _, out = b.do("POST", "/messages/batch", ts["slow"], `[{"topic":"lim.t","content":4}]`)
	require.Equal(t, 429, st, out)
	st, _, out = b.do("GET", "/topics/lim.t/messages", ts["one"], "")
	require.Equal(t, 200, st)
	assert.Contains(t, out, `"highWatermark":3`, "the refused publishes stored nothing")
	rate := 0
	for _, e := range b.logs.FilterLoggerName("audit").FilterField(zap.Int("status", 429)).All() {
		if strings.Contains(fmt.Sprint(e.ContextMap()["reason"]), "publish rate") {
			rate++
		}
	}
	assert.Equal(t, 2, rate, "each publish-rate refusal is audited")
}

// TestTokensReloadWithoutRestart: SIGHUP's path (reload.Reloader.All)
// re-reads a changed token file and the token list of the configuration
// file; the running broker then refuses the old token and accepts the
// new ones. Auth turned on by a reload applies at once too.
func TestTokensReloadWithoutRestart(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "billing.token")
	first, _ := auth.NewToken()
	second, _ := auth.NewToken()
	added, addedDigest := auth.NewToken()
	require.NoError(t, os.WriteFile(tokFile, []byte(first+"\n"), 0o600))
	cfgFile := filepath.Join(dir, "mmmq.yaml")
	write := func(extra string) {
		body := fmt.Sprintf(`server: {host: 127.0.0.1, port: 0}
mmmq:
  broker: {storage: {root-dir: %q}}
  auth:
    tokens:
      - name: billing
        token-file: %q
        permissions: [{actions: [read]}]
%s`, filepath.Join(dir, "data"), tokFile, extra)
		require.NoError(t, os.WriteFile(cfgFile, []byte(body), 0o600))
	}
	write("")
	cfg, err := config.Load(config.LoadOptions{Path: cfgFile, PathExplicit: true, Environ: []string{}, Sections: app.Sections()})
	require.NoError(t, err)
	var r *reload.Reloader
	b := startAuthBroker(t, cfg, fx.Populate(&r))
	ts := tokenSet{"first": first, "second": second, "added": added}

	st, _, _ := b.do("GET", "/topics", first, "")
	require.Equal(t, 200, st)
	require.NoError(t, os.WriteFile(tokFile, []byte("  "+second+"  \n"), 0o600))
	require.Zero(t, r.All(context.Background()))
	st, _, _ = b.do("GET", "/topics", first, "")
	assert.Equal(t, 401, st, "the old token is refused after the reload")
	st, _, _ = b.do("GET", "/topics", second, "")
	assert.Equal(t, 200, st, "the new token is accepted after the reload")

	write(`      - name: added
        token-sha256: ` + addedDigest + `
        permissions: [{actions: [admin]}]
`)
	st, _, _ = b.do("GET", "/mmmq/dispatchers", added, "")
	require.Equal(t, 401, st)
	require.Zero(t, r.All(context.Background()))
	st, _, _ = b.do("GET", "/mmmq/dispatchers", added, "")
	assert.Equal(t, 200, st, "an entry added to the file is accepted after the reload")

	// An invalid file is refused; the tokens in force stay.
	require.NoError(t, os.WriteFile(cfgFile, []byte("mmmq: {auth: {tokens: [{name: x}]}}\n"), 0o600))
	assert.Equal(t, 1, r.All(context.Background()))
	st, _, _ = b.do("GET", "/mmmq/dispatchers", added, "")
	assert.Equal(t, 200, st)
	b.assertNoToken(ts)
}

// TestAuthOffChangesNothing: without tokens a bearer header is ignored and
// every route answers as before (the other tests of the package run
// without tokens too).
func TestAuthOffChangesNothing(t *testing.T) {
	b := startAuthBroker(t, testConfig(t, t.TempDir()))
	for _, tok := range []string{"", "whatever"} {
		st, _, out := b.do("POST", "/messages", tok, `{"topic":"off.t","content":1}`)
		assert.Equal(t, 200, st, out)
		st, _, _ = b.do("GET", "/metrics", tok, "")
		assert.Equal(t, 200, st)
		st, _, _ = b.do("DELETE", "/topics/off.t", tok, "")
		assert.Equal(t, 200, st)
	}
	assert.Zero(t, b.logs.FilterLoggerName("audit").Len(), "nothing to audit with auth off")
}

// TestStatusPageAuthenticatesItself: with authentication on, the status
// page's paths are exempt from the bearer check (contract.AuthExempt) and
// the page itself sends a visitor without a session to its login form;
// its stylesheet and login form are open; a bearer token works too.
func TestStatusPageAuthenticatesItself(t *testing.T) {
	ts := tokenSet{}
	b := startAuthBroker(t, authConfig(t, ts))
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, tc := range []struct {
		method, path, tok string
		want              int
	}{
		{"GET", "/ui/", "", 303},
		{"GET", "/ui/topics", "", 303},
		{"POST", "/ui/dispatchers/d1/pause", "", 303},
		{"GET", "/ui/login", "", 200},
		{"GET", "/ui", "", 301}, // to /ui/
		{"GET", "/ui/static/style.css", "", 200},
		{"GET", "/ui/", ts["all"], 200},
		{"GET", "/ui/../topics", "", 401}, // not canonical: not exempt
		{"GET", "/topics", "", 401},
	} {
		st, h, out := b.doWith(noFollow, tc.method, tc.path, tc.tok, "")
		assert.Equal(t, tc.want, st, "%s %s: %s", tc.method, tc.path, out)
		if tc.want == 303 {
			assert.Equal(t, "/ui/login", h.Get("Location"), tc.path)
		}
	}
	b.assertNoToken(ts)
}
