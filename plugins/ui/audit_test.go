package ui_test

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// authBroker is a broker with two tokens, "all" (every permission) and
// "reader" (read on public.*), and a dispatcher d1 on public.*.
func authBroker(t *testing.T) (b *broker, all, reader string) {
	holding, _ := consumers(t)
	cfg := testConfig(t)
	all, allDigest := auth.NewToken()
	reader, readerDigest := auth.NewToken()
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{
			{Name: "all", TokenSHA256: allDigest, Permissions: []auth.PermissionConfig{{Actions: []string{"publish", "consume", "read", "admin", "metrics"}}}},
			{Name: "reader", TokenSHA256: readerDigest, Permissions: []auth.PermissionConfig{{Actions: []string{"read"}, Topics: []string{"public.*"}}}},
		}
	})
	b = startBroker(t, cfg)
	b.publish(map[string]any{"topic": "secret.b", "content": 1}, "Authorization", "Bearer "+all)
	b.createDispatcher("d1", holding, "public.*", "Authorization", "Bearer "+all)
	return b, all, reader
}

// login logs visitor c in with tok through the form and fails the test
// unless it is accepted.
func (b *broker) login(c *http.Client, tok string) {
	b.t.Helper()
	_, page := b.doWith(c, http.MethodGet, "/ui/login", "")
	resp, out := b.doWith(c, http.MethodPost, "/ui/login", "token="+url.QueryEscape(tok)+"&csrf="+csrfOf(b.t, page))
	require.Equal(b.t, http.StatusSeeOther, resp.StatusCode, out)
}

// refusedFields are the fields of the HTTP API's "request refused" line
// (contract.AuditRefused); adminFields those of its "admin action".
var (
	refusedFields = []string{"action", "method", "path", "principal", "reason", "remote", "status", "topic"}
	adminFields   = []string{"action", "outcome", "principal", "remote", "status", "target"}
)

// lineSummary is the message and fields of each line, for a failure.
func lineSummary(l *observer.ObservedLogs) string {
	var out []string
	for _, e := range l.All() {
		out = append(out, fmt.Sprintf("%s %v", e.Message, e.ContextMap()))
	}
	return strings.Join(out, "; ")
}

func keys(e observer.LoggedEntry) []string {
	var k []string
	for name := range e.ContextMap() {
		k = append(k, name)
	}
	slices.Sort(k)
	return k
}

// TestStatusPageAudit: the status page writes its refusals and admin
// actions on the audit logger ("audit", as the HTTP API and the line
// protocol do), with the HTTP API's fields: a wrong login, an unknown or
// malformed bearer token and a forged cookie (401), a viewer's post, a
// foreign Origin and a wrong CSRF token (403), a topic the token may not
// read (403), and an admin's pause. No token is in any line.
func TestStatusPageAudit(t *testing.T) {
	b, all, reader := authBroker(t)
	audit := func() *observer.ObservedLogs { return b.logs.FilterLoggerName("audit") }
	seen := audit().Len() // the setup's admin actions
	// fresh returns the audit lines written since the last call.
	fresh := func() []observer.LoggedEntry {
		all := audit().All()
		defer func() { seen = len(all) }()
		return all[seen:]
	}
	refusal := func(what string, status int, path, principal string) map[string]any {
		t.Helper()
		lines := fresh()
		require.Len(t, lines, 1, "%s: one audit line (audit: %s)", what, lineSummary(audit()))
		assert.Equal(t, "request refused", lines[0].Message, what)
		assert.Equal(t, refusedFields, keys(lines[0]), what)
		m := lines[0].ContextMap()
		assert.EqualValues(t, status, m["status"], what)
		assert.Equal(t, path, m["path"], what)
		assert.Equal(t, principal, m["principal"], what)
		assert.Contains(t, m["remote"], "127.0.0.1:", what)
		assert.NotEmpty(t, m["reason"], what)
		return m
	}

	visitor := b.visitor(nil)
	_, page := b.doWith(visitor, http.MethodGet, "/ui/login", "")
	resp, _ := b.doWith(visitor, http.MethodPost, "/ui/login", "token=mmmq_wrong&csrf="+csrfOf(t, page))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	refusal("wrong login", 401, "/ui/login", "")

	for _, tc := range []struct{ what, name, value string }{
		{"unknown bearer", "Authorization", "Bearer mmmq_unknown"},
		{"malformed bearer", "Authorization", "Basic dXNlcjpwYXNz"},
		{"forged cookie", "Cookie", "mmmq_ui=mmmq_forged"},
	} {
		resp, _ = b.do(http.MethodGet, "/ui/topics", "", tc.name, tc.value)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, tc.what)
		assert.Equal(t, "/ui/login", resp.Header.Get("Location"), tc.what)
		refusal(tc.what, 401, "/ui/topics", "")
	}
	// A first visit without any credential is sent to the login unaudited.
	resp, _ = b.do(http.MethodGet, "/ui/", "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Empty(t, fresh(), "a visit without credentials is no refusal")

	viewer := b.visitor(nil)
	b.login(viewer, reader)
	_, page = b.doWith(viewer, http.MethodGet, "/ui/", "")
	csrf := csrfOf(t, page)
	resp, _ = b.doWith(viewer, http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+csrf)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	m := refusal("viewer's pause", 403, "/ui/dispatchers/d1/pause", "reader")
	assert.Equal(t, "admin", m["action"])
	assert.Equal(t, "POST", m["method"])
	resp, _ = b.doWith(viewer, http.MethodGet, "/ui/topics/secret.b", "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	m = refusal("viewer's topic page", 403, "/ui/topics/secret.b", "reader")
	assert.Equal(t, "read", m["action"])
	assert.Equal(t, "secret.b", m["topic"])

	admin := b.visitor(nil)
	b.login(admin, all)
	_, page = b.doWith(admin, http.MethodGet, "/ui/", "")
	csrf = csrfOf(t, page)
	resp, _ = b.doWith(admin, http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+csrf, "Origin", "http://evil.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	refusal("foreign origin", 403, "/ui/dispatchers/d1/pause", "all")
	resp, _ = b.doWith(admin, http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+strings.Repeat("0", 64))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	refusal("wrong csrf", 403, "/ui/dispatchers/d1/pause", "all")

	resp, _ = b.doWith(admin, http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+csrf)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, _ = b.doWith(admin, http.MethodPost, "/ui/dispatchers/nope/resume", "csrf="+csrf)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	actions := fresh()
	require.Len(t, actions, 2, "audit: %s", lineSummary(audit()))
	for i, want := range []struct {
		target  string
		status  int
		outcome string
	}{{"POST /ui/dispatchers/d1/pause", 200, "ok"}, {"POST /ui/dispatchers/nope/resume", 404, "failed"}} {
		assert.Equal(t, "admin action", actions[i].Message)
		assert.Equal(t, adminFields, keys(actions[i]))
		m := actions[i].ContextMap()
		assert.Equal(t, "all", m["principal"])
		assert.Equal(t, "admin", m["action"])
		assert.Equal(t, want.target, m["target"])
		assert.EqualValues(t, want.status, m["status"])
		assert.Equal(t, want.outcome, m["outcome"])
	}
	assert.Zero(t, b.logs.FilterLoggerName("ui.audit").Len(), "nothing on the old logger name")
	for _, e := range b.logs.All() {
		for _, tok := range []string{all, reader, "mmmq_wrong", "mmmq_unknown", "mmmq_forged", "dXNlcjpwYXNz"} {
			assert.NotContains(t, e.Message, tok)
			for _, v := range e.ContextMap() {
				if s, ok := v.(string); ok {
					assert.NotContains(t, s, tok, "a token in a log line")
				}
			}
		}
	}
}

// TestStatusPageAuditAuthOff: without tokens an admin action is still
// written (principal "anonymous") and so are the CSRF refusals.
func TestStatusPageAuditAuthOff(t *testing.T) {
	holding, _ := consumers(t)
	b := startBroker(t, testConfig(t))
	b.createDispatcher("d1", holding, "a.*")
	resp, _ := b.do(http.MethodPost, "/ui/dispatchers/d1/pause", "csrf=bad")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	_, page := b.do(http.MethodGet, "/ui/", "")
	resp, _ = b.do(http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+csrfOf(t, page))
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	audit := b.logs.FilterLoggerName("audit")
	require.Equal(t, 1, audit.FilterMessage("request refused").FilterField(zap.Int("status", 403)).Len(), "audit: %s", lineSummary(audit))
	a := audit.FilterMessage("admin action").All()
	require.Len(t, a, 1)
	assert.Equal(t, "anonymous", a[0].ContextMap()["principal"])
}

// TestStatusPageLoginDelay: a wrong login waits contract.AuthFailureDelay
// (200 ms, as an unknown token at the line protocol's AUTH), so 10 from
// one visitor take at least 2 s; meanwhile a visitor from another address
// logs in and loads pages at once, and its own wrong login waits its own
// 200 ms, not the other's queue.
func TestStatusPageLoginDelay(t *testing.T) {
	b, all, _ := authBroker(t)
	guesser := b.visitor(nil)
	_, page := b.doWith(guesser, http.MethodGet, "/ui/login", "")
	csrf := csrfOf(t, page)
	const n = 10
	var (
		wg      sync.WaitGroup
		guesses time.Duration
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		for i := 0; i < n; i++ {
			resp, _ := b.doWith(guesser, http.MethodPost, "/ui/login", "token=mmmq_guess&csrf="+csrf)
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		}
		guesses = time.Since(start)
	}()

	other := b.visitor(net.IPv4(127, 0, 0, 2))
	time.Sleep(100 * time.Millisecond) // the guesser is waiting now
	start := time.Now()
	b.login(other, all)
	resp, _ := b.doWith(other, http.MethodGet, "/ui/", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	atOnce := time.Since(start)
	start = time.Now()
	_, page = b.doWith(other, http.MethodGet, "/ui/login", "")
	resp, _ = b.doWith(other, http.MethodPost, "/ui/login", "token=mmmq_typo&csrf="+csrfOf(t, page))
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	ownWrong := time.Since(start)
	wg.Wait()

	t.Logf("%d wrong logins from 127.0.0.1: %v; meanwhile from 127.0.0.2 a login and a page: %v, a wrong login: %v", n, guesses, atOnce, ownWrong)
	assert.GreaterOrEqual(t, guesses, n*contract.AuthFailureDelay, "each wrong login waits")
	assert.Less(t, atOnce, contract.AuthFailureDelay, "another address is answered at once")
	assert.GreaterOrEqual(t, ownWrong, contract.AuthFailureDelay)
	assert.Less(t, ownWrong, 3*contract.AuthFailureDelay, "its own delay only, not the guesser's queue")
	remotes := map[string]bool{}
	for _, e := range b.logs.FilterLoggerName("audit").FilterField(zap.String("path", "/ui/login")).All() {
		host, _, _ := net.SplitHostPort(e.ContextMap()["remote"].(string))
		remotes[host] = true
	}
	assert.Equal(t, map[string]bool{"127.0.0.1": true, "127.0.0.2": true}, remotes, "each wrong login audited with its address")
}
