package ui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// cookieName is the session cookie: the token itself.
const cookieName = "mmmq_ui"

// visitorCookie is the visitor cookie: 32 random bytes in hex, set by the
// first page a browser loads, that the CSRF tokens of its forms are bound
// to, so that each visitor has its own even when they share a session
// (everyone is "anon" with authentication off).
const visitorCookie = "mmmq_ui_csrf"

// loginSession is the session the login form's CSRF token is made for:
// there is none yet, and the form comes from this process.
const loginSession = "login"

// maxForm caps a form body (login token, seek target).
const maxForm = 16 << 10

// session is who a request comes from: the credential it presented (the
// cookie's or bearer header's token, "anon" with authentication off), for
// the CSRF token, and its principal (nil with authentication off).
type session struct {
	id        string
	principal contract.Principal
	// visitor is the visitor cookie's value ("" when the request has
	// none, or none valid).
	visitor string
}

// key is what the session's CSRF tokens and flashes are bound to: the
// visitor and the credential.
func (s session) key() string { return s.visitor + "\x00" + s.id }

// authOn reports whether authentication is on now.
func (u *UI) authOn() bool { return u.o.Authenticator != nil && u.o.Authenticator.Enabled() }

// name is the session's principal for the audit log: "anonymous" with
// authentication off.
func (s session) name() string {
	if s.principal == nil {
		return "anonymous"
	}
	return s.principal.Name()
}

// Why session refuses a request; the texts are the audit lines' reasons.
var (
	errNoCredentials = errors.New("no credentials")
	errMalformed     = errors.New("an Authorization header that is not Bearer <token>")
	errUnknownToken  = errors.New("an unknown token")
)

// session finds r's session: with authentication off everyone is "anon";
// else an Authorization: Bearer header, or else the cookie, must hold a
// known token (errNoCredentials, errMalformed or errUnknownToken
// otherwise).
func (u *UI) session(r *http.Request) (session, error) {
	if !u.authOn() {
		return session{id: "anon"}, nil
	}
	var tok string
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, t, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(t) == "" {
			return session{}, errMalformed
		}
		tok = strings.TrimSpace(t)
	} else if c, err := r.Cookie(cookieName); err == nil {
		tok = c.Value
	}
	if tok == "" {
		return session{}, errNoCredentials
	}
	p, err := u.o.Authenticator.Authenticate(tok)
	if err != nil || p == nil {
		return session{}, errUnknownToken
	}
	return session{id: tok, principal: p}, nil
}

// refuse answers status (a refusal: 403) with a plain page saying msg and
// writes its audit line: principal (of s, "" when there is none yet),
// action and topic ("" when none).
func (u *UI) refuse(w http.ResponseWriter, r *http.Request, principal string, status int, action contract.Action, topic, msg string) {
	contract.AuditRefused(u.o.Audit, r, principal, status, action, topic, msg)
	u.fail(w, r, status, msg)
}

// csrf is the CSRF token of session key k (session.key): hex HMAC-SHA256
// under the process's random key (forms of an earlier process are
// refused).
func (u *UI) csrf(k string) string {
	m := hmac.New(sha256.New, u.key)
	m.Write([]byte(k))
	return hex.EncodeToString(m.Sum(nil))
}

// visitor returns r's visitor cookie when it holds one this process could
// have made (64 hex digits); else, when set, it makes a new one and sets
// it on w (HttpOnly, SameSite=Strict, Path=/ui/, Secure over TLS, no
// expiry), else "".
func visitor(w http.ResponseWriter, r *http.Request, set bool) string {
	if c, err := r.Cookie(visitorCookie); err == nil && len(c.Value) == 64 {
		if _, err := hex.DecodeString(c.Value); err == nil {
			return c.Value
		}
	}
	if !set {
		return ""
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	v := hex.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: visitorCookie, Value: v, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return v
}

// originProblem is "" when r's Origin header or, without one, its Referer
// names r's own scheme and host; else the refusal's text. Browsers send
// Origin with every form post (Referer too, same-origin, under the pages'
// Referrer-Policy), so a post with neither is no page's form.
func originProblem(r *http.Request) string {
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return "Refused: the post has neither an Origin nor a Referer header, so it cannot be told from a forged one; post the form from the page itself."
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if su, err := url.Parse(src); err != nil || su.Scheme != scheme || su.Host != r.Host {
		return "Refused: the form was posted from another origin."
	}
	return ""
}

// checkForm reads r's form (at most maxForm bytes) and checks its Origin
// (originProblem), the visitor cookie and the csrf field against s's
// key; principal is for the audit line. On failure it has answered (400, or 403 with its audit line) with
// a plain page and returns false.
func (u *UI) checkForm(w http.ResponseWriter, r *http.Request, principal string, s session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		u.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return false
	}
	if msg := originProblem(r); msg != "" {
		u.refuse(w, r, principal, http.StatusForbidden, "", "", msg)
		return false
	}
	if s.visitor == "" {
		u.refuse(w, r, principal, http.StatusForbidden, "", "",
			"Refused: the cookie "+visitorCookie+", which the form's CSRF token belongs to, is missing; reload the page (with cookies allowed for it) and try again.")
		return false
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(u.csrf(s.key()))) {
		u.refuse(w, r, principal, http.StatusForbidden, "", "", "Refused: the form's CSRF token is missing or stale; reload the page and try again.")
		return false
	}
	return true
}

// checkPost is checkForm for a post of session s.
func (u *UI) checkPost(w http.ResponseWriter, r *http.Request, s session) bool {
	return u.checkForm(w, r, s.name(), s)
}

// loginData is the login page.
type loginData struct {
	Error   string
	AuthOff bool
}

func (u *UI) handleLoginForm(w http.ResponseWriter, r *http.Request) {
	if !u.authOn() {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	s := session{id: loginSession, visitor: visitor(w, r, true)}
	u.render(w, http.StatusOK, &pageData{Title: "Log in", CSRF: u.csrf(s.key()), Login: &loginData{}})
}

// handleLogin is POST /ui/login: Origin and the form's csrf checked
// (403), then a known token sets the cookie and redirects to /ui/; an
// unknown one shows the form again with an error (401).
func (u *UI) handleLogin(w http.ResponseWriter, r *http.Request) {
	if msg := originProblem(r); msg != "" {
		u.refuse(w, r, "", http.StatusForbidden, "", "", msg)
		return
	}
	if !u.authOn() {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	s := session{id: loginSession, visitor: visitor(w, r, false)}
	if !u.checkForm(w, r, "", s) {
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	p, err := u.o.Authenticator.Authenticate(tok)
	if tok == "" || err != nil || p == nil {
		contract.WaitAuthFailure(r.Context(), u.o.AuthFailureDelay)
		contract.AuditRefused(u.o.Audit, r, "", http.StatusUnauthorized, "", "", "login with an unknown token")
		u.render(w, http.StatusUnauthorized, &pageData{Title: "Log in", CSRF: u.csrf(s.key()), Login: &loginData{Error: "Unknown token."}})
		return
	}
	u.o.Logger.Info("ui login", zap.String("principal", p.Name()), zap.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// handleLogout is POST /ui/logout: clears the cookie, back to the login.
func (u *UI) handleLogout(w http.ResponseWriter, r *http.Request) {
	if msg := originProblem(r); msg != "" {
		u.refuse(w, r, "", http.StatusForbidden, "", "", msg)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
