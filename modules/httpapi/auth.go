package httpapi

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// AuthOptions is what the server enforces (mmmq.auth, from the auth
// module). The zero value, or an Authenticator that is not Enabled, lets
// every request through as before authentication existed.
type AuthOptions struct {
	// Authenticator finds the principal of a bearer token or a verified
	// client certificate; nil: authentication off.
	Authenticator contract.Authenticator
	// Limiter enforces each principal's max-concurrent-requests (here) and
	// publish-rate (in the publish handlers); nil: no limits.
	Limiter contract.Limiter
	// MetricsOpen reports whether GET /metrics is served without
	// authentication (mmmq.auth.protect-metrics false); nil: protected.
	MetricsOpen func() bool
	// Audit is the audit log (a logger named "audit"): every refused
	// request (401, 403, 429) and every admin action, never a token; nil
	// discards it.
	Audit *zap.Logger

	// exempt are the path prefixes routes authenticate themselves
	// (contract.AuthExempt), filled in by New.
	exempt []string
}

// openPaths are served without authentication: probes and the API
// description.
var openPaths = map[string]bool{"/healthz": true, "/readyz": true, "/openapi.yaml": true}

// withAuth wraps next with authentication when a.Authenticator is set:
// while it is Enabled, every request but those to openPaths (and /metrics
// when MetricsOpen) must carry "Authorization: Bearer <token>" of a token
// entry, or come over TLS with a verified client certificate whose subject
// common name is an entry's client-cn (a request with both is judged by
// the token alone). Missing or unknown credentials are 401 UNAUTHORIZED
// with WWW-Authenticate: Bearer (sent at once, the connection then closed
// when the request has a body, which is not read); a principal at its
// max-concurrent-requests gets 429 RATE_LIMITED with Retry-After. The
// principal goes into the request's context (contract.WithPrincipal),
// where the handlers' contract.Authorize finds it. A canonical path under
// a prefix a route declared with contract.AuthExempt goes through without
// credentials: that route authenticates it.
func withAuth(a AuthOptions, next http.Handler) http.Handler {
	if a.Authenticator == nil {
		return next
	}
	if a.Audit == nil {
		a.Audit = zap.NewNop()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.Authenticator.Enabled() || openPaths[r.URL.Path] || (r.URL.Path == "/metrics" && a.MetricsOpen != nil && a.MetricsOpen()) ||
			exempted(a.exempt, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		p, err := authenticate(a.Authenticator, r)
		if err != nil {
			contract.AuditRefused(a.Audit, r, "", http.StatusUnauthorized, "", "", "missing or unknown credentials")
			if r.ContentLength != 0 {
				refuseBeforeBody(w, err)
				return
			}
			contract.WriteErr(w, err)
			return
		}
		if a.Limiter != nil {
			release, err := a.Limiter.Acquire(p, "request")
			if err != nil {
				refused(a.Audit, r, p.Name(), http.StatusTooManyRequests, "", "", err)
				contract.WriteErr(w, err)
				return
			}
			defer release()
		}
		rp := &requestPrincipal{Principal: p, r: r, audit: a.Audit}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(contract.WithPrincipal(r.Context(), rp)))
		if rp.admin.Load() {
			contract.AuditAdmin(a.Audit, r, p.Name(), sw.code())
		}
	})
}

// exempted reports whether path is canonical (see canonicalPath: no "..",
// so that "/ui/../topics" is not under "/ui/") and starts with one of
// prefixes, or is one of them without its final "/" ("/ui" for "/ui/").
func exempted(prefixes []string, path string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(path, p) || path == p[:len(p)-1] {
			return canonicalPath(path)
		}
	}
	return false
}

// exemptPrefixes collects the contract.AuthExempt prefixes of routes,
// those that start and end with "/".
func exemptPrefixes(routes []contract.Route) []string {
	var out []string
	for _, rt := range routes {
		if e, ok := rt.(contract.AuthExempt); ok {
			for _, p := range e.AuthExempt() {
				if len(p) > 1 && strings.HasPrefix(p, "/") && strings.HasSuffix(p, "/") {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// authenticate finds the principal of r: its bearer token if it has an
// Authorization header (any other scheme, or an unknown token, is
// refused), else its verified client certificate.
func authenticate(a contract.Authenticator, r *http.Request) (contract.Principal, error) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") {
			return nil, contract.ErrUnauthorized
		}
		return a.Authenticate(strings.TrimSpace(token))
	}
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return a.AuthenticateCert(r.TLS.VerifiedChains[0][0].Subject.CommonName)
	}
	return nil, contract.ErrUnauthorized
}

// refused writes the audit line of a refused request.
func refused(audit *zap.Logger, r *http.Request, principal string, status int, action contract.Action, topic string, err error) {
	contract.AuditRefused(audit, r, principal, status, action, topic, err.Error())
}

// requestPrincipal is the principal of one authenticated request as the
// handlers see it: Can asks the token entry, and also writes the audit
// line of every refusal and notes an admin action for the audit line the
// middleware writes once the handler is done.
type requestPrincipal struct {
	contract.Principal
	r     *http.Request
	audit *zap.Logger
	admin atomic.Bool
}

func (rp *requestPrincipal) Can(action contract.Action, topic, group string) bool {
	if !rp.Principal.Can(action, topic, group) {
		refused(rp.audit, rp.r, rp.Name(), http.StatusForbidden, action, topic,
			&contract.ForbiddenError{Principal: rp.Name(), Action: action, Topic: topic, Group: group})
		return false
	}
	if action == contract.ActionAdmin {
		rp.admin.Store(true)
	}
	return true
}

// authorizeTopic is contract.Authorize for an action on the topic of the
// path, which the handler has not validated yet: an invalid name is left
// to the handler's 400 (it touches nothing), so that a principal allowed
// every topic does not get 403 for a typo.
func authorizeTopic(r *http.Request, action contract.Action, topic string) error {
	if contract.ValidateTopic(topic) != nil {
		return nil
	}
	return contract.Authorize(r.Context(), action, topic, "")
}

// pathTopic returns the path's topic once it is a valid name (else 400
// BAD_REQUEST) that the request's principal may do action on (else 403);
// on failure it has answered and returns ok=false.
func pathTopic(w http.ResponseWriter, r *http.Request, action contract.Action) (string, bool) {
	name := mux.Vars(r)["topic"]
	if err := contract.ValidateTopic(name); err != nil {
		contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return "", false
	}
	if err := contract.Authorize(r.Context(), action, name, ""); err != nil {
		contract.WriteErr(w, err)
		return "", false
	}
	return name, true
}

// may reports whether the principal of ctx (if any) may do action on
// topic, without an audit line: for filtering a listing, where what is
// left out is not a refused request.
func may(r *http.Request, action contract.Action, topic string) bool {
	p, ok := contract.PrincipalFrom(r.Context())
	if !ok {
		return true
	}
	if rp, ok := p.(*requestPrincipal); ok {
		p = rp.Principal
	}
	return p.Can(action, topic, "")
}

// publishAllowed checks that the principal of r may publish to every one
// of topics (all or nothing: the first refused topic is the error) and
// takes n messages from its publish-rate bucket.
func (s *Server) publishAllowed(r *http.Request, n int, topics ...string) error {
	for _, t := range topics {
		if err := contract.Authorize(r.Context(), contract.ActionPublish, t, ""); err != nil {
			return err
		}
	}
	p, ok := contract.PrincipalFrom(r.Context())
	if !ok || s.opts.Auth.Limiter == nil {
		return nil
	}
	if err := s.opts.Auth.Limiter.Publish(p, n); err != nil {
		refused(s.auditLog(), r, p.Name(), http.StatusTooManyRequests, contract.ActionPublish, strings.Join(topics, ","), err)
		return err
	}
	return nil
}

func (s *Server) auditLog() *zap.Logger {
	if s.opts.Auth.Audit == nil {
		return zap.NewNop()
	}
	return s.opts.Auth.Audit
}

// statusWriter remembers the status a handler wrote, for the audit line
// of an admin action. Unwrap lets http.ResponseController reach the
// connection (write deadlines of long polls, flushes).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush forwards to the wrapped writer when it can flush.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap is for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// Lingering after a refusal sent before the request's body was read.
const (
	// refusedLinger is how long the connection of a refused request
	// keeps discarding what the client still sends after the answer.
	refusedLinger = time.Second
	// refusedLingerBytes is the most it discards in that time.
	refusedLingerBytes = 8 << 20
)

// refuseBeforeBody answers err to a request refused before its body was
// read, and it never will be: net/http would otherwise read what is left
// of the body (a chunked one, or up to 256 KiB) before sending the answer,
// waiting for bytes that may never come. The connection is closed after
// the answer. Closed at once, though, a socket that still receives the
// body makes the kernel send a reset, which can destroy the answer before
// the client reads it (the client then sees "connection reset by peer"
// instead of the 401). So, on HTTP/1.x, the connection is hijacked: the
// answer is written with "Connection: close", the write side shut (FIN),
// and what the client still sends is discarded for at most refusedLinger
// and refusedLingerBytes before the close, as a lingering close does.
// Where the connection cannot be hijacked (HTTP/2, a recorder) the answer
// goes out as before, with "Connection: close" and reading ended.
func refuseBeforeBody(w http.ResponseWriter, err error) {
	rc := http.NewResponseController(w)
	var rec bufferedResponse
	rec.header = http.Header{}
	for k, v := range w.Header() {
		rec.header[k] = v
	}
	contract.WriteErr(&rec, err)
	conn, brw, herr := rc.Hijack()
	if herr != nil {
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set("Connection", "close")
		_ = rc.SetReadDeadline(time.Now())
		w.WriteHeader(rec.code)
		_, _ = w.Write(rec.body.Bytes())
		return
	}
	defer conn.Close()
	resp := &http.Response{StatusCode: rec.code, ProtoMajor: 1, ProtoMinor: 1, Header: rec.header,
		ContentLength: int64(rec.body.Len()), Body: io.NopCloser(&rec.body), Close: true}
	_ = conn.SetWriteDeadline(time.Now().Add(refusedLinger))
	if resp.Write(brw.Writer) != nil || brw.Writer.Flush() != nil {
		return
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = conn.SetReadDeadline(time.Now().Add(refusedLinger))
	_, _ = io.CopyN(io.Discard, io.MultiReader(brw.Reader, conn), refusedLingerBytes)
}

// bufferedResponse is a ResponseWriter that keeps the answer in memory,
// for refuseBeforeBody to write it on a hijacked connection.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }
func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}
func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}
