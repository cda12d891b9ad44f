// Package ui is the status page: server-rendered HTML under /ui/ on the
// API port (a contract.Route), showing the broker's overview (version,
// uptime, data directory, disk free against the disk guard, publish rate
// and fsyncs per message over the last minute, failed and quarantined
// topics), its topics (paged and sorted on the server), each topic's last
// messages, the dispatchers with their state per topic and a sparkline of
// their lag over the last 10 minutes, and the consumer groups. An admin
// may pause, resume and seek dispatchers from it.
//
// Pages are html/template (every topic name, message, header and error
// text is escaped), with one stylesheet and one small script
// (/ui/static/), no inline script or style, and these headers on every
// answer: Content-Security-Policy (see csp), X-Content-Type-Options:
// nosniff, Referrer-Policy: same-origin and, on pages, Cache-Control:
// no-store.
//
// Authentication (when mmmq.auth has tokens): the route authenticates its
// paths itself (contract.AuthExempt "/ui/"): /ui/static/ and /ui/login are
// open, every other page needs the cookie mmmq_ui (the token, set by the
// login form: HttpOnly, SameSite=Strict, Path=/ui/, Secure over TLS) or an
// Authorization: Bearer header, and redirects (303) to /ui/login without
// one. Topics the principal may not read are left out; the pause, resume
// and seek forms need the admin permission (403 otherwise). Every
// state-changing POST carries a csrf field, an HMAC under a per-process
// random key of the session and the visitor cookie mmmq_ui_csrf (random,
// set by the first page: HttpOnly, SameSite=Strict, Secure over TLS), and
// must name the page's own scheme and host in Origin or, without Origin,
// in Referer (403 otherwise, with authentication off too).
//
// Audit: refusals (a wrong login, an unknown or malformed token: 401; a
// forbidden post or topic, a failed Origin or CSRF check: 403) and the
// admin actions are written on Options.Audit (the logger named "audit")
// with contract.AuditRefused and contract.AuditAdmin, as the HTTP API
// writes them. A wrong login or an unknown token waits
// Options.AuthFailureDelay (contract.WaitAuthFailure: that request only).
//
// The DOM the pages render (ids, classes, data attributes) is a contract
// the browser test relies on; see the templates.
package ui

import (
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/style.css static/ui.js
var staticFS embed.FS

// csp is the Content-Security-Policy of every answer: only the page's own
// stylesheet and script, no inline code, no framing, forms posting only
// to the broker.
const csp = "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Options configures a UI. Registry is required; the others may be zero.
type Options struct {
	// Config is mmmq.ui (zero fields: the defaults).
	Config Config
	// Storage is mmmq.broker.storage: the data directory (root-dir) or
	// backend jetstream, and the disk guard's min-free-bytes.
	Storage  topicqueue.StorageConfig
	Registry *topicqueue.Registry
	// Admin is the admin module (dispatchers); nil: no dispatchers shown.
	Admin *admin.Admin
	// Groups is the consumer-group coordinator; nil: no groups shown.
	Groups *groups.Coordinator
	// Authenticator is mmmq.auth; nil or not Enabled: no login, everyone
	// is an admin.
	Authenticator contract.Authenticator
	// JetStreamServers is mmmq.jetstream.servers, shown without any
	// user information when the backend is jetstream.
	JetStreamServers string
	// Holds says which reader holds a topic's retention back
	// (mmmq.broker.retention.keep-unconsumed), shown beside the topic's
	// readers; nil: nothing shown.
	Holds  contract.RetentionHolds
	Logger *zap.Logger
	// Audit is the audit log: refused requests and admin actions, written
	// with contract.AuditRefused and contract.AuditAdmin as the HTTP API
	// writes them; default contract.AuditLogger(Logger) (Module passes
	// the application's logger named "audit", as the HTTP API gets).
	Audit *zap.Logger
	// AuthFailureDelay is how long a refused credential (a wrong login, an
	// unknown bearer token or cookie) waits before its answer; default
	// contract.AuthFailureDelay.
	AuthFailureDelay time.Duration
	// SampleEvery is the sampler's period (rates, lag sparklines);
	// default 10s.
	SampleEvery time.Duration
}

// UI is the status page: a contract.Route (and contract.AuthExempt) with a
// sampler that Start launches and Stop ends.
type UI struct {
	o       Options
	tmpl    *template.Template
	static  http.Handler
	key     []byte // CSRF HMAC key, random per process
	started time.Time
	s       *sampler
	flash   flashes // form posts' outcomes, shown once
}

// New returns the status page over o; Start starts its sampler. Errors: a
// missing Registry, or templates that do not parse.
func New(o Options) (*UI, error) {
	if o.Registry == nil {
		return nil, fmt.Errorf("ui: Options.Registry is required")
	}
	def := ConfigSection.Defaults()
	if o.Config.Refresh <= 0 {
		o.Config.Refresh = def["mmmq.ui.refresh"].(time.Duration)
	}
	if o.Config.TopicsPerPage <= 0 {
		o.Config.TopicsPerPage = DefaultTopicsPerPage
	}
	if o.Config.Messages <= 0 {
		o.Config.Messages = DefaultMessages
	}
	if o.SampleEvery <= 0 {
		o.SampleEvery = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Audit == nil {
		o.Audit = contract.AuditLogger(o.Logger)
	}
	if o.AuthFailureDelay <= 0 {
		o.AuthFailureDelay = contract.AuthFailureDelay
	}
	t, err := template.New("ui").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("ui: parse templates: %w", err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sub, _ := fs.Sub(staticFS, "static")
	u := &UI{o: o, tmpl: t, key: key, started: time.Now(),
		static: http.StripPrefix("/ui/static/", http.FileServerFS(sub))}
	u.s = newSampler(o.Registry, o.Admin, o.SampleEvery)
	return u, nil
}

// Start launches the sampler (one goroutine); it records the start time
// the page's uptime counts from.
func (u *UI) Start(context.Context) error {
	u.started = time.Now()
	u.s.start()
	return nil
}

// Stop ends the sampler and waits for it.
func (u *UI) Stop(context.Context) error {
	u.s.stop()
	return nil
}

// AuthExempt is contract.AuthExempt: the UI authenticates /ui/ itself.
func (u *UI) AuthExempt() []string { return []string{"/ui/"} }

// Register adds the pages (HEAD is served wherever GET is, by the HTTP
// server; other methods get an HTML 405 with Allow, unknown paths under
// /ui/ an HTML 404):
//
//	GET  /ui                           301 to /ui/
//	GET  /ui/                          overview, first topic page, dispatchers, groups
//	GET  /ui/topics?page=N&sort=S&order=asc|desc
//	GET  /ui/topics/{topic}?n=N        a topic and its last N messages
//	POST /ui/dispatchers/{name}/pause|resume|seek   (admin, csrf) → 303 /ui/
//	GET  /ui/login, POST /ui/login, POST /ui/logout
//	GET  /ui/static/style.css, /ui/static/ui.js
func (u *UI) Register(r *mux.Router) {
	r.HandleFunc("/ui/", u.page(u.handleMain)).Methods(http.MethodGet)
	r.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently)).Methods(http.MethodGet)
	r.HandleFunc("/ui/topics", u.page(u.handleTopics)).Methods(http.MethodGet)
	r.HandleFunc("/ui/topics/{topic}", u.page(u.handleTopic)).Methods(http.MethodGet)
	r.HandleFunc("/ui/dispatchers/{name}/pause", u.page(u.handleAction("pause"))).Methods(http.MethodPost)
	r.HandleFunc("/ui/dispatchers/{name}/resume", u.page(u.handleAction("resume"))).Methods(http.MethodPost)
	r.HandleFunc("/ui/dispatchers/{name}/seek", u.page(u.handleAction("seek"))).Methods(http.MethodPost)
	r.HandleFunc("/ui/login", u.open(u.handleLoginForm)).Methods(http.MethodGet)
	r.HandleFunc("/ui/login", u.open(u.handleLogin)).Methods(http.MethodPost)
	r.HandleFunc("/ui/logout", u.open(u.handleLogout)).Methods(http.MethodPost)
	r.HandleFunc("/ui/static/{file}", u.open(u.handleStatic)).Methods(http.MethodGet)
	// Last: any other path under /ui/, or a method a page does not allow
	// (HEAD is let through where GET is), gets an HTML 404 or 405 with the
	// security headers instead of the API's JSON error. It has no path
	// template, so the server's route checks do not count it.
	r.MatcherFunc(func(req *http.Request, _ *mux.RouteMatch) bool {
		if !strings.HasPrefix(req.URL.Path, "/ui/") {
			return false
		}
		allow := allowOf(req.URL.Path)
		return allow == "" || !slices.Contains(strings.Split(allow, ", "), req.Method)
	}).HandlerFunc(u.open(u.handleUnrouted))
}

// uiPaths are the paths Register serves and the methods each allows, for
// handleUnrouted; keep them in step with Register.
var uiPaths = []struct {
	re    *regexp.Regexp
	allow string
}{
	{regexp.MustCompile(`^/ui/(topics(/[^/]+)?)?$`), "GET, HEAD"},
	{regexp.MustCompile(`^/ui/static/[^/]+$`), "GET, HEAD"},
	{regexp.MustCompile(`^/ui/dispatchers/[^/]+/(pause|resume|seek)$`), "POST"},
	{regexp.MustCompile(`^/ui/login$`), "GET, HEAD, POST"},
	{regexp.MustCompile(`^/ui/logout$`), "POST"},
}

// allowOf is the Allow header of path, "" when no page has it.
func allowOf(path string) string {
	for _, p := range uiPaths {
		if p.re.MatchString(path) {
			return p.allow
		}
	}
	return ""
}

// handleUnrouted answers 404 for a path under /ui/ no page has, else 405
// with Allow.
func (u *UI) handleUnrouted(w http.ResponseWriter, r *http.Request) {
	allow := allowOf(r.URL.Path)
	if allow == "" {
		u.fail(w, r, http.StatusNotFound, "No such page.")
		return
	}
	w.Header().Set("Allow", allow)
	u.fail(w, r, http.StatusMethodNotAllowed, "Method "+r.Method+" is not allowed here (allowed: "+allow+").")
}

// securityHeaders sets the headers every answer carries; pages also get
// Cache-Control: no-store.
func securityHeaders(w http.ResponseWriter, page bool) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin") // not no-referrer: with it Chromium posts forms with "Origin: null", which originProblem refuses
	if page {
		h.Set("Cache-Control", "no-store")
	}
}

// open wraps a handler that needs no session: security headers only.
func (u *UI) open(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w, r.URL.Path != "/ui/static/style.css" && r.URL.Path != "/ui/static/ui.js")
		h(w, r)
	}
}

// page wraps a handler that needs a session: security headers, then the
// session (cookie or bearer token) whose principal goes into the
// request's context; without a valid one, 303 to /ui/login.
func (u *UI) page(h func(http.ResponseWriter, *http.Request, session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w, true)
		s, err := u.session(r)
		if err != nil {
			// A first visit (a GET without credentials) is no refusal; an
			// unknown token waits as a wrong login does.
			if !errors.Is(err, errNoCredentials) || r.Method == http.MethodPost {
				if errors.Is(err, errUnknownToken) {
					contract.WaitAuthFailure(r.Context(), u.o.AuthFailureDelay)
				}
				contract.AuditRefused(u.o.Audit, r, "", http.StatusUnauthorized, "", "", err.Error()+" (sent to the login)")
			}
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		// A page sets the visitor cookie its forms' CSRF token is bound
		// to; a post without one is refused by checkPost.
		s.visitor = visitor(w, r, r.Method != http.MethodPost)
		if s.principal != nil {
			r = r.WithContext(contract.WithPrincipal(r.Context(), s.principal))
		}
		h(w, r, s)
	}
}

func (u *UI) handleStatic(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-cache")
	u.static.ServeHTTP(w, r)
}
