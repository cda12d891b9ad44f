package ui_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/ui"
)

// broker is a full broker (app.Options) on a loopback port.
type broker struct {
	t     *testing.T
	base  string
	admin *admin.Admin
	reg   *topicqueue.Registry
	c     *http.Client // b.visitor(): does not follow redirects, keeps cookies
	logs  *observer.ObservedLogs
	h     http.Handler // the server's handler, for requests without a network (TLS)
}

func testConfig(t *testing.T) *config.Config {
	cfg := config.Default()
	cfg.Server.Port = 0
	cfg.Server.Host = "127.0.0.1"
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	// A consumer that is down leaves its dispatcher in backoff for seconds.
	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) { d.BackoffInitial, d.BackoffMax = 5*time.Second, 10*time.Second })
	return cfg
}

func startBroker(t *testing.T, cfg *config.Config) *broker {
	t.Helper()
	var srv *httpapi.Server
	core, logs := observer.New(zapcore.DebugLevel)
	b := &broker{t: t, logs: logs}
	b.c = b.visitor(nil)
	ta := fxtest.New(t, app.Options(config.Supply(cfg), fx.Populate(&srv, &b.admin, &b.reg),
		fx.Decorate(func(l *zap.Logger) *zap.Logger { return zap.New(zapcore.NewTee(l.Core(), core)) })))
	ta.RequireStart()
	t.Cleanup(ta.RequireStop)
	b.base = "http://" + srv.Addr()
	b.h = srv.Handler()
	return b
}

// visitor is a client as a browser is one: it keeps its cookies and does
// not follow redirects; local, when set, is the address it connects from.
func (b *broker) visitor(local net.IP) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(b.t, err)
	tr := &http.Transport{}
	if local != nil {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: local}}
		tr.DialContext = d.DialContext
	}
	b.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Jar: jar, Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// do sends a request through b.c; hdr are name, value pairs ("Cookie",
// ...). A post under /ui/ carries the form's Content-Type and, as a
// browser's does, "Origin: <the broker>" unless hdr names an Origin
// ("" for none).
func (b *broker) do(method, path, body string, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	return b.doWith(b.c, method, path, body, hdr...)
}

// doWith is do through the client c (another visitor).
func (b *broker) doWith(c *http.Client, method, path, body string, hdr ...string) (*http.Response, string) {
	b.t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	require.NoError(b.t, err)
	if method == http.MethodPost && strings.HasPrefix(path, "/ui/") {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", b.base)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		}
	}
	resp, err := c.Do(req)
	require.NoError(b.t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(b.t, err)
	return resp, string(out)
}

func (b *broker) publish(msg map[string]any, hdr ...string) {
	b.t.Helper()
	body, _ := json.Marshal(msg)
	resp, out := b.do(http.MethodPost, "/messages", string(body), hdr...)
	require.Equal(b.t, 200, resp.StatusCode, out)
}

func (b *broker) createDispatcher(name, host, pattern string, hdr ...string) {
	b.t.Helper()
	resp, out := b.do(http.MethodPost, "/mmmq/dispatchers",
		fmt.Sprintf(`{"name":%q,"host":%q,"patterns":[%q],"timeout":"30s"}`, name, host, pattern), hdr...)
	require.Equal(b.t, 201, resp.StatusCode, out)
}

// csrfOf finds the page's CSRF token.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(page)
	require.NotNil(t, m, "a csrf field in the page")
	return m[1]
}

// assertHeaders checks the security headers of a /ui/ answer.
func assertHeaders(t *testing.T, h http.Header, what string) {
	t.Helper()
	assert.Equal(t, "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		h.Get("Content-Security-Policy"), what)
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), what)
	assert.Equal(t, "same-origin", h.Get("Referrer-Policy"), what)
}

// consumers are a consumer that holds every push (delivering) until the
// test ends, and the address of one that is down (connection refused).
func consumers(t *testing.T) (holding, down string) {
	release := make(chan struct{})
	ack := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		w.Write([]byte(`{"acknowledgement":"ACK"}`))
	}
	hold := httptest.NewServer(http.HandlerFunc(ack))
	gone := httptest.NewServer(http.NotFoundHandler())
	down = gone.URL
	gone.Close()
	t.Cleanup(hold.Close)
	t.Cleanup(func() { close(release) }) // before the broker stops (cleanups run last first)
	return hold.URL, down
}

// TestStatusPage: two topics, a dispatcher in backoff (consumer down), one
// delivering, a consumer group with a session: the main page shows them
// in the DOM the browser test relies on, with the security headers.
func TestStatusPage(t *testing.T) {
	holding, down := consumers(t)
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "orders.new", "content": map[string]any{"n": 1}, "id": "evt-1"})
	b.publish(map[string]any{"topic": "pay.done", "content": 2})
	b.createDispatcher("billing", holding, "orders.*")
	b.createDispatcher("audit", down, "pay.*")
	resp, out := b.do(http.MethodPost, "/topics/pay.done/groups/g1/fetch?max=1", "")
	require.Equal(t, 200, resp.StatusCode, out)

	require.Eventually(t, func() bool {
		_, page := b.do(http.MethodGet, "/ui/", "")
		return strings.Contains(page, `<span class="next-retry">`) && regexp.MustCompile(`class="state">delivering`).MatchString(page)
	}, 10*time.Second, 50*time.Millisecond, "a dispatcher in backoff and one delivering")

	resp, page := b.do(http.MethodGet, "/ui/", "")
	require.Equal(t, 200, resp.StatusCode)
	assertHeaders(t, resp.Header, "GET /ui/")
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	for _, want := range []string{
		`<section id="overview">`, `<h2>Overview</h2>`, `<section id="topics">`, `<h2>Topics</h2>`,
		`<section id="dispatchers">`, `<h2>Dispatchers</h2>`, `<section id="groups">`, `<h2>Consumer groups</h2>`,
		`<dd data-k="version">` + contract.Version + `</dd>`, `<dd data-k="topics" class="num">2</dd>`,
		`<dd data-k="dispatchers" class="num">2</dd>`, `<dd data-k="groups" class="num">1</dd>`,
		`<dd data-k="failed-topics" class="num">0</dd>`, `data-k="uptime"`, `data-k="data-dir"`, `data-k="disk-free"`,
		`data-k="publish-rate"`, `data-k="fsyncs-per-message"`,
		`<table id="topic-table">`, `<tr data-topic="orders.new"><td class="name"><a href="/ui/topics/orders.new">orders.new</a></td>`,
		`<tr data-topic="pay.done">`, `<td class="readers">audit: lag 1, g1: lag 1</td>`, `<span id="topic-count">2 topics</span>`,
		`<table id="dispatcher-table">`, `<tr data-dispatcher="billing" data-topic="orders.new">`,
		`<tr data-dispatcher="audit" data-topic="pay.done">`, `<div class="actions" data-dispatcher="billing">`,
		`<form class="pause" method="post" action="/ui/dispatchers/billing/pause">`, `<form class="seek" method="post" action="/ui/dispatchers/audit/seek">`,
		`<input name="topic" value="**"`, `<input type="hidden" name="csrf" value="`,
		`<svg class="sparkline" data-dispatcher="billing"`, `<polyline points="`,
		`<table id="group-table">`, `<tr data-topic="pay.done" data-group="g1">`, `<td class="committed num">0</td>`,
		`<td class="holder">held</td>`, `<button type="button" id="refresh-toggle">Pause refresh</button>`,
		`<body data-refresh-ms="2000">`, `<link rel="stylesheet" href="/ui/static/style.css">`, `<script src="/ui/static/ui.js" defer></script>`,
	} {
		assert.Contains(t, page, want)
	}
	assert.Regexp(t, `data-topic="pay.done">\s*<td class="dispatcher">.*</td>\s*<td class="topic">pay.done</td>\s*<td class="state bad">backoff <span class="next-retry">next retry in \d+s</span></td>`, page)
	assert.Regexp(t, `<td class="lease num">\d+s</td>`, page)
	// The last error says how long ago it was (round-3 item 19).
	assert.Regexp(t, `data-topic="pay.done">(?s:.*?)<td class="error">\d+s ago: [^<]+</td>`, page)
	assert.NotContains(t, page, `class="resume"`, "no resume button for a running dispatcher")
	assert.NotContains(t, page, "<style", "no inline style")
	assert.Equal(t, 1, strings.Count(page, "<script"), "one script, no inline one")

	// The other pages and the static files carry the headers too.
	for _, p := range []string{"/ui/topics?page=1&sort=bytes&order=desc", "/ui/topics/orders.new", "/ui/static/style.css", "/ui/static/ui.js", "/ui/topics/no.such", "/ui/login"} {
		resp, _ := b.do(http.MethodGet, p, "")
		assertHeaders(t, resp.Header, p)
	}
}

// TestTopicsPaging: 25 topics, 10 per page, sorted on the server.
func TestTopicsPaging(t *testing.T) {
	cfg := testConfig(t)
	config.SetSectionValue(cfg, uiSection(), uiConfig(10))
	b := startBroker(t, cfg)
	for i := range 25 {
		for range i % 4 {
			b.publish(map[string]any{"topic": fmt.Sprintf("t%02d", i), "content": i})
		}
		if i%4 == 0 {
			b.publish(map[string]any{"topic": fmt.Sprintf("t%02d", i), "content": i})
		}
	}
	_, page := b.do(http.MethodGet, "/ui/topics?page=3&sort=name", "")
	assert.Contains(t, page, "25 topics")
	assert.Contains(t, page, "page 3 of 3")
	rows := regexp.MustCompile(`<tr data-topic="([^"]+)">`).FindAllStringSubmatch(page, -1)
	require.Len(t, rows, 5)
	assert.Equal(t, "t20", rows[0][1])
	assert.Contains(t, page, `href="/ui/topics?page=2&amp;sort=name&amp;order=asc"`)
	_, page = b.do(http.MethodGet, "/ui/topics?page=1&sort=next&order=desc", "")
	rows = regexp.MustCompile(`<tr data-topic="([^"]+)"><td class="name">.*?<td class="next num">(\d+)</td>`).FindAllStringSubmatch(page, -1)
	require.Len(t, rows, 10)
	assert.Equal(t, "3", rows[0][2])
	assert.Equal(t, "t03", rows[0][1], "ties by name")
	assert.Equal(t, "t02", rows[6][1])
	assert.Equal(t, "2", rows[9][2])
}

// TestTopicPageShowsTheNewest: a topic's page lists its newest messages,
// newest first, also when they span several segments (a batch read would
// stop at the first segment's end and show older ones).
func TestTopicPageShowsTheNewest(t *testing.T) {
	cfg := testConfig(t)
	config.EditSection(cfg, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) {
		seg.MaxBytes = 4096
		seg.MaxRecordBytes = 2048
	})
	b := startBroker(t, cfg)
	for i := range 26 {
		b.publish(map[string]any{"topic": "seg.t", "content": strings.Repeat(fmt.Sprint(i%10), 400)})
	}
	resp, page := b.do(http.MethodGet, "/ui/topics/seg.t?n=12", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, page, `<td class="segments num">3</td>`, "the messages span segments")
	rows := regexp.MustCompile(`<tr data-offset="(\d+)">`).FindAllStringSubmatch(page, -1)
	var got []string
	for _, r := range rows {
		got = append(got, r[1])
	}
	assert.Equal(t, []string{"25", "24", "23", "22", "21", "20", "19", "18", "17", "16", "15", "14"}, got)
	assert.Contains(t, page, "12 shown, at most 12")
}

// TestUntrustedTextIsEscaped: message content and headers, and a
// dispatcher's last error, that hold markup render as text.
func TestUntrustedTextIsEscaped(t *testing.T) {
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`{"acknowledgement":"<script>alert(1)</script>"}`))
	}))
	t.Cleanup(evil.Close)
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "x.y", "content": "<script>alert(1)</script>",
		"headers": map[string]string{"h": `"><img src=x onerror=alert(1)>`}, "id": `"><img src=x onerror=alert(1)>`})
	b.createDispatcher("evil", evil.URL, "x.*")
	require.Eventually(t, func() bool {
		st, err := b.admin.Status("evil")
		return err == nil && len(st.Topics) == 1 && strings.Contains(st.Topics[0].LastError, "<script>")
	}, 10*time.Second, 20*time.Millisecond)
	for _, p := range []string{"/ui/", "/ui/topics/x.y"} {
		resp, page := b.do(http.MethodGet, p, "")
		require.Equal(t, 200, resp.StatusCode, p)
		assert.NotContains(t, page, "<script>alert", p)
		assert.NotContains(t, page, "<img", p)
	}
	_, page := b.do(http.MethodGet, "/ui/", "")
	assert.Regexp(t, `<td class="error">[^<]*&lt;script&gt;alert\(1\)&lt;/script&gt;`, page)
	_, page = b.do(http.MethodGet, "/ui/topics/x.y", "")
	// The broker stores the content's '<' as \u003c; the header and the id
	// keep theirs, escaped on the page.
	assert.Contains(t, page, `\u003cscript\u003ealert(1)\u003c/script\u003e`)
	assert.Contains(t, page, `&#34;headers&#34;:{&#34;h&#34;:&#34;\&#34;&gt;&lt;img src=x onerror=alert(1)&gt;&#34;}`)
	assert.Contains(t, page, `<td class="id">&#34;&gt;&lt;img src=x onerror=alert(1)&gt;</td>`)
	assert.Regexp(t, `<tr data-offset="0"><td class="offset num">0</td><td class="time">\d{4}-`, page)

	// Topic names cannot hold '<' (contract.ValidateTopic refuses it): an
	// invalid name in the URL is a 404 page that does not echo it.
	resp, page := b.do(http.MethodGet, "/ui/topics/"+url.PathEscape(`a<script>b`), "")
	assert.Equal(t, 404, resp.StatusCode)
	assert.Contains(t, page, "No such topic.")
	assert.NotContains(t, page, "a<script>b")
	assert.NotContains(t, page, "a&lt;script")
	assertHeaders(t, resp.Header, "404")
	resp, _ = b.do(http.MethodGet, "/ui/topics/no.such", "")
	assert.Equal(t, 404, resp.StatusCode)
	resp, _ = b.do(http.MethodGet, "/ui/dispatchers/evil/pause", "")
	assert.Equal(t, 405, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	assertHeaders(t, resp.Header, "405")
	resp, _ = b.do(http.MethodDelete, "/ui/login", "")
	assert.Equal(t, 405, resp.StatusCode)
	assert.Equal(t, "GET, HEAD, POST", resp.Header.Get("Allow"))
	resp, page = b.do(http.MethodGet, "/ui/nothing/here", "")
	assert.Equal(t, 404, resp.StatusCode)
	assert.Contains(t, page, "No such page.")
	assertHeaders(t, resp.Header, "unknown page")
	for _, p := range []string{"/ui/", "/ui/topics", "/ui/topics/x.y", "/ui/static/ui.js"} {
		resp, _ = b.do(http.MethodHead, p, "")
		assert.Equal(t, 200, resp.StatusCode, "HEAD "+p)
	}
}

// TestCSRF: a pause without the csrf field, with a wrong one, or from a
// foreign Origin is 403 and pauses nothing; the page's token pauses, and
// the answer is 303 back to /ui/ with the outcome.
func TestCSRF(t *testing.T) {
	holding, _ := consumers(t)
	b := startBroker(t, testConfig(t))
	b.createDispatcher("d1", holding, "a.*")
	_, page := b.do(http.MethodGet, "/ui/", "")
	tok := csrfOf(t, page)
	paused := func() bool {
		st, err := b.admin.Status("d1")
		require.NoError(t, err)
		return st.Paused
	}
	for _, tc := range []struct {
		name, body string
		hdr        []string
	}{
		{"no csrf", "", nil},
		{"wrong csrf", "csrf=" + strings.Repeat("0", 64), nil},
		{"foreign origin", "csrf=" + tok, []string{"Origin", "http://evil.example"}},
	} {
		resp, out := b.do(http.MethodPost, "/ui/dispatchers/d1/pause", tc.body, tc.hdr...)
		assert.Equal(t, 403, resp.StatusCode, tc.name)
		assertHeaders(t, resp.Header, tc.name)
		assert.Contains(t, out, "Refused", tc.name)
		assert.False(t, paused(), tc.name)
	}
	resp, _ := b.do(http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+tok, "Origin", b.base)
	require.Equal(t, 303, resp.StatusCode)
	assert.Regexp(t, `^/ui/\?flash=[0-9a-f]{32}$`, resp.Header.Get("Location"))
	assert.True(t, paused())
	_, page = b.do(http.MethodGet, resp.Header.Get("Location"), "")
	assert.Contains(t, page, `<p id="flash" class="ok">Dispatcher d1 paused.</p>`)
	_, page = b.do(http.MethodGet, resp.Header.Get("Location"), "")
	assert.NotContains(t, page, `id="flash"`, "a flash is shown once")
	resp, _ = b.do(http.MethodGet, "/ui", "")
	assert.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	assert.Equal(t, "/ui/", resp.Header.Get("Location"))
	// A link cannot put text of its choosing on the page.
	for _, q := range []string{"?err=Your+token+expired", "?msg=Call+us", "?flash=" + strings.Repeat("a", 32)} {
		_, page = b.do(http.MethodGet, "/ui/"+q, "")
		assert.NotContains(t, page, `id="flash"`, q)
	}
	assert.Contains(t, page, `<form class="resume" method="post" action="/ui/dispatchers/d1/resume">`)
	assert.NotContains(t, page, `<form class="pause"`)

	// Seek through the admin module: a bad target comes back as an error.
	resp, _ = b.do(http.MethodPost, "/ui/dispatchers/d1/seek", "csrf="+tok+"&topic=**&to=soon")
	require.Equal(t, 303, resp.StatusCode)
	_, page = b.do(http.MethodGet, resp.Header.Get("Location"), "")
	assert.Contains(t, page, `<p id="flash" class="bad">seek d1:`)
	resp, _ = b.do(http.MethodPost, "/ui/dispatchers/d1/resume", "csrf="+tok)
	require.Equal(t, 303, resp.StatusCode)
	assert.False(t, paused())
}

// TestAuth: with tokens, /ui/ needs a session: none → 303 to the login;
// a wrong token → the form again; the right one → the cookie; a token
// without admin sees no buttons and its POSTs are 403; topics it may not
// read are not shown.
func TestAuth(t *testing.T) {
	b, all, reader := authBroker(t)
	bearer := "Bearer " + all
	b.publish(map[string]any{"topic": "public.a", "content": 1}, "Authorization", bearer)
	resp, out := b.do(http.MethodPost, "/topics/public.a/groups/gpub/fetch?max=1", "", "Authorization", bearer)
	require.Equal(t, 200, resp.StatusCode, out)

	resp, _ = b.do(http.MethodGet, "/ui/", "")
	require.Equal(t, 303, resp.StatusCode)
	assert.Equal(t, "/ui/login", resp.Header.Get("Location"))
	assertHeaders(t, resp.Header, "redirect")
	resp, page := b.do(http.MethodGet, "/ui/login", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, page, `<form id="login" method="post" action="/ui/login">`)
	assert.Contains(t, page, `<input type="password" name="token"`)
	assert.Contains(t, page, `<input type="hidden" name="csrf"`)

	loginCSRF := "&csrf=" + csrfOf(t, page)
	resp, _ = b.do(http.MethodPost, "/ui/login", "token="+url.QueryEscape(all))
	assert.Equal(t, 403, resp.StatusCode, "a login without the form's csrf")
	resp, page = b.do(http.MethodPost, "/ui/login", "token=mmmq_wrong"+loginCSRF)
	assert.Equal(t, 401, resp.StatusCode, "an unknown token")
	assert.Contains(t, page, `<form id="login"`)
	assert.Contains(t, page, "Unknown token.")
	assert.Empty(t, resp.Cookies())
	resp, _ = b.do(http.MethodPost, "/ui/login", "token="+url.QueryEscape(all)+loginCSRF, "Origin", "http://evil.example")
	assert.Equal(t, 403, resp.StatusCode, "a login from another origin")

	login := func(tok string) string {
		resp, _ := b.do(http.MethodPost, "/ui/login", "token="+url.QueryEscape(tok)+loginCSRF, "Origin", b.base)
		require.Equal(t, 303, resp.StatusCode)
		require.Equal(t, "/ui/", resp.Header.Get("Location"))
		require.Len(t, resp.Cookies(), 1)
		c := resp.Cookies()[0]
		assert.Equal(t, "mmmq_ui", c.Name)
		assert.True(t, c.HttpOnly)
		assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
		assert.Equal(t, "/ui/", c.Path)
		assert.False(t, c.Secure, "plain HTTP")
		return "mmmq_ui=" + c.Value
	}
	adminCookie := login(all)
	resp, page = b.do(http.MethodGet, "/ui/", "", "Cookie", adminCookie)
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, page, `<form class="pause"`)
	assert.Contains(t, page, `data-topic="secret.b"`)
	assert.Contains(t, page, `data-group="gpub"`, "the admin token may consume: it sees the group")
	resp, page = b.do(http.MethodGet, "/ui/", "", "Cookie", "mmmq_ui=mmmq_forged")
	assert.Equal(t, 303, resp.StatusCode, page)

	readerCookie := login(reader)
	resp, page = b.do(http.MethodGet, "/ui/", "", "Cookie", readerCookie)
	require.Equal(t, 200, resp.StatusCode)
	assert.Contains(t, page, `<tr data-topic="public.a">`)
	assert.NotContains(t, page, "secret.b", "a topic the principal may not read")
	assert.NotContains(t, page, `<form class="pause"`)
	assert.NotContains(t, page, `<form class="seek"`)
	// Dispatchers need the admin permission, as in the admin API: not
	// listed, not named as readers, not counted.
	assert.Contains(t, page, `id="dispatchers-hidden"`)
	assert.NotContains(t, page, `data-dispatcher="d1"`)
	assert.NotContains(t, page, "d1: lag")
	assert.Contains(t, page, `<dd data-k="dispatchers" class="num">—</dd>`)
	assert.NotContains(t, page, "gpub", "groups need the consume permission, as GET /topics/{t}/groups")
	resp, _ = b.do(http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+csrfOf(t, page), "Cookie", readerCookie)
	assert.Equal(t, 403, resp.StatusCode)
	st, err := b.admin.Status("d1")
	require.NoError(t, err)
	assert.False(t, st.Paused)
	resp, _ = b.do(http.MethodGet, "/ui/topics/secret.b", "", "Cookie", readerCookie)
	assert.Equal(t, 403, resp.StatusCode)

	// A bearer header works as well as the cookie.
	resp, _ = b.do(http.MethodGet, "/ui/topics/secret.b", "", "Authorization", bearer)
	assert.Equal(t, 200, resp.StatusCode)
	// The reader's page's token is no good with the admin's session.
	resp, _ = b.do(http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+csrfOf(t, page), "Cookie", adminCookie)
	assert.Equal(t, 403, resp.StatusCode)

	resp, _ = b.do(http.MethodPost, "/ui/logout", "", "Cookie", adminCookie)
	assert.Equal(t, 303, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	assert.Equal(t, -1, resp.Cookies()[0].MaxAge)
}

func uiSection() *config.SectionOf[ui.Config] { return ui.ConfigSection }

// uiConfig is mmmq.ui with per topics per page.
func uiConfig(per int) ui.Config {
	c := ui.ConfigSection.Default()
	c.TopicsPerPage = per
	return c
}

// TestFailedTopics: a quarantined topic is listed in red with its cause
// (escaped) and counted.
func TestFailedTopics(t *testing.T) {
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "ok.t", "content": 1})
	b.reg.Quarantine("broken.t", errors.New("corrupt entry at <offset 7>"))
	_, page := b.do(http.MethodGet, "/ui/", "")
	assert.Contains(t, page, `<dd data-k="failed-topics" class="num bad">1</dd>`)
	assert.Contains(t, page, `<ul id="failed-topics"><li class="bad"><span class="name">broken.t</span>: <span class="cause">quarantined: corrupt entry at &lt;offset 7&gt;</span></li></ul>`)
}

// The data directory is shown absolute, though root-dir is relative
// (round-3 item 19: "./data" says nothing on a page).
func TestStatusPageDataDirIsAbsolute(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	cfg := testConfig(t)
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = "data" })
	b := startBroker(t, cfg)
	_, page := b.do(http.MethodGet, "/ui/", "")
	assert.Contains(t, page, `<dd data-k="data-dir">`+filepath.Join(dir, "data")+`</dd>`)
}

// A dispatcher with ordering key whose consumer is down: its row says how
// many keys are parked, the oldest named, and the window's fill; the
// metrics carry the same counts, never labelled by key.
func TestStatusPageShowsParkedKeys(t *testing.T) {
	_, down := consumers(t)
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "orders.new", "content": 1, "key": "customer-7"})
	b.publish(map[string]any{"topic": "orders.new", "content": 2, "key": "customer-7"})
	resp, out := b.do(http.MethodPost, "/mmmq/dispatchers",
		fmt.Sprintf(`{"name":"keyed","host":%q,"patterns":["orders.*"],"max-in-flight":4,"ordering":"key","max-unacked":10}`, down))
	require.Equal(t, 201, resp.StatusCode, out)
	want := regexp.MustCompile(`<span class="keys">0 keys in flight, 1 parked \(oldest &#34;customer-7&#34;, [^)]* ago\), window 2/10</span>`)
	require.Eventually(t, func() bool {
		_, page := b.do(http.MethodGet, "/ui/", "")
		return want.MatchString(page)
	}, 10*time.Second, 50*time.Millisecond, "the keyed dispatcher's row shows the parked key")
	_, metrics := b.do(http.MethodGet, "/metrics", "")
	assert.Contains(t, metrics, `mmmq_dispatch_parked_keys{dispatcher="keyed",topic="orders.new"} 1`)
	assert.Contains(t, metrics, `mmmq_dispatch_unacked_messages{dispatcher="keyed",topic="orders.new"} 2`)
	assert.Contains(t, metrics, `mmmq_dispatch_max_unacked{dispatcher="keyed",topic="orders.new"} 10`)
	assert.NotContains(t, metrics, `customer-7`)
}

// A dispatcher with a rate limit: its row says the limit, the burst and
// how many of its topics wait for tokens; the metrics carry the same.
func TestStatusPageShowsRateLimit(t *testing.T) {
	holding, _ := consumers(t)
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "orders.new", "content": 1})
	b.publish(map[string]any{"topic": "orders.new", "content": 2})
	resp, out := b.do(http.MethodPost, "/mmmq/dispatchers",
		fmt.Sprintf(`{"name":"slow","host":%q,"patterns":["orders.*"],"max-in-flight":2,"rate-limit":0.001}`, holding))
	require.Equal(t, 201, resp.StatusCode, out)
	require.Eventually(t, func() bool {
		_, page := b.do(http.MethodGet, "/ui/", "")
		return strings.Contains(page, `<small class="rate">at most 0.001/s, burst 1, 1 waiting</small>`)
	}, 10*time.Second, 50*time.Millisecond, "the dispatcher's row shows its rate limit")
	_, metrics := b.do(http.MethodGet, "/metrics", "")
	assert.Contains(t, metrics, `mmmq_dispatch_rate_limited_workers{dispatcher="slow"} 1`)
}

// A dispatcher with a circuit breaker and a dead consumer: its row says
// the breaker is open and when it probes; one with pause-after says it
// paused itself; the metrics carry both.
func TestStatusPageShowsBreakerAndAutoPause(t *testing.T) {
	_, down := consumers(t)
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "orders.new", "content": 1})
	resp, out := b.do(http.MethodPost, "/mmmq/dispatchers",
		fmt.Sprintf(`{"name":"guarded","host":%q,"patterns":["orders.*"],"breaker-failures":1,"breaker-cooloff":"1h"}`, down))
	require.Equal(t, 201, resp.StatusCode, out)
	resp, out = b.do(http.MethodPost, "/mmmq/dispatchers",
		fmt.Sprintf(`{"name":"quitter","host":%q,"patterns":["orders.*"],"pause-after":"100ms"}`, down))
	require.Equal(t, 201, resp.StatusCode, out)
	require.Eventually(t, func() bool {
		_, page := b.do(http.MethodGet, "/ui/", "")
		return strings.Contains(page, `<small class="breaker bad">breaker open, probe in `) && strings.Contains(page, `<small class="paused-by bad">paused by auto, `)
	}, 10*time.Second, 50*time.Millisecond, "the rows show the open breaker and the automatic pause")
	_, metrics := b.do(http.MethodGet, "/metrics", "")
	assert.Contains(t, metrics, `mmmq_dispatch_breaker_state{dispatcher="guarded"} 1`)
	assert.Contains(t, metrics, `mmmq_dispatch_paused{dispatcher="quitter",reason="auto"} 1`)
}

// A seek with a rate shows on the dispatcher's row: "replay at 0.001/s
// until offset 2, 1 to go"; a seek without one takes it away.
func TestStatusPageShowsReplayRate(t *testing.T) {
	ack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(ack.Close)
	up := ack.URL
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "orders.new", "content": 1})
	b.publish(map[string]any{"topic": "orders.new", "content": 2})
	resp, out := b.do(http.MethodPost, "/mmmq/dispatchers", fmt.Sprintf(`{"name":"replayer","host":%q,"patterns":["orders.*"]}`, up))
	require.Equal(t, 201, resp.StatusCode, out)
	require.Eventually(t, func() bool {
		_, st := b.do(http.MethodGet, "/mmmq/dispatchers/replayer", "")
		return strings.Contains(st, `"committed":2`)
	}, 10*time.Second, 20*time.Millisecond)
	resp, out = b.do(http.MethodPost, "/mmmq/dispatchers/replayer/seek", `{"to":"earliest","rate":0.001}`)
	require.Equal(t, 200, resp.StatusCode, out)
	require.Eventually(t, func() bool {
		_, page := b.do(http.MethodGet, "/ui/", "")
		return strings.Contains(page, `<span class="replay">replay at 0.001/s until offset 2, 1 to go</span>`)
	}, 10*time.Second, 50*time.Millisecond, "the row shows the replay rate once the first message went")
	resp, out = b.do(http.MethodPost, "/mmmq/dispatchers/replayer/seek", `{"to":"latest"}`)
	require.Equal(t, 200, resp.StatusCode, out)
	_, page := b.do(http.MethodGet, "/ui/", "")
	assert.NotContains(t, page, `class="replay"`)
}

// A dispatcher with adaptive-concurrency aimd and a consumer answering
// 429: its row shows the limit lowered under its max-in-flight; the
// metrics carry the limit and the decreases.
func TestStatusPageShowsConcurrency(t *testing.T) {
	busy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(busy.Close)
	b := startBroker(t, testConfig(t))
	b.publish(map[string]any{"topic": "orders.new", "content": 1})
	resp, out := b.do(http.MethodPost, "/mmmq/dispatchers",
		fmt.Sprintf(`{"name":"adaptive","host":%q,"patterns":["orders.*"],"max-in-flight":4,"ordering":"none","adaptive-concurrency":"aimd"}`, busy.URL))
	require.Equal(t, 201, resp.StatusCode, out)
	limit := regexp.MustCompile(`<small class="concurrency">concurrency ([0-9]+)/4, [0-9]+ in flight</small>`)
	require.Eventually(t, func() bool {
		_, page := b.do(http.MethodGet, "/ui/", "")
		m := limit.FindStringSubmatch(page)
		return m != nil && m[1] != "4"
	}, 10*time.Second, 50*time.Millisecond, "the row shows the limit lowered under 4")
	_, metrics := b.do(http.MethodGet, "/metrics", "")
	assert.Regexp(t, `mmmq_dispatch_concurrency_limit\{dispatcher="adaptive"\} [1-3]\n`, metrics)
	assert.Regexp(t, `mmmq_dispatch_concurrency_decreases_total\{dispatcher="adaptive"\} [1-9]`, metrics)
	assert.Contains(t, metrics, `mmmq_dispatch_concurrency_in_flight{dispatcher="adaptive"}`)
}
