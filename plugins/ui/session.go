package ui

import (
	"crypto/hmac"
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
}

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

// csrf is the CSRF token of session id: hex HMAC-SHA256 under the
// process's random key (forms of an earlier process are refused).
func (u *UI) csrf(id string) string {
	m := hmac.New(sha256.New, u.key)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil))
}

// sameOrigin reports whether r has no Origin header or one naming r's own
// scheme and host.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	ou, err := url.Parse(o)
	if err != nil {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return ou.Scheme == scheme && ou.Host == r.Host
}

// checkPost reads r's form (at most maxForm bytes) and checks its Origin
// and csrf field against s; on failure it has answered 403 with a plain
// page and returns false.
func (u *UI) checkPost(w http.ResponseWriter, r *http.Request, s session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		u.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return false
	}
	if !sameOrigin(r) {
		u.refuse(w, r, s.name(), http.StatusForbidden, "", "", "Refused: the form was posted from another origin.")
		return false
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(u.csrf(s.id))) {
		u.refuse(w, r, s.name(), http.StatusForbidden, "", "", "Refused: the form's CSRF token is missing or stale; reload the page and try again.")
		return false
	}
	return true
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
	u.render(w, http.StatusOK, &pageData{Title: "Log in", CSRF: u.csrf(loginSession), Login: &loginData{}})
}

// handleLogin is POST /ui/login: Origin and the form's csrf checked
// (403), then a known token sets the cookie and redirects to /ui/; an
// unknown one shows the form again with an error (401).
func (u *UI) handleLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		u.fail(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	if !sameOrigin(r) {
		u.refuse(w, r, "", http.StatusForbidden, "", "", "Refused: the form was posted from another origin.")
		return
	}
	if !u.authOn() {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	if !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(u.csrf(loginSession))) {
		u.refuse(w, r, "", http.StatusForbidden, "", "", "Refused: the form's CSRF token is missing or stale; reload the page and try again.")
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	p, err := u.o.Authenticator.Authenticate(tok)
	if tok == "" || err != nil || p == nil {
		contract.WaitAuthFailure(r.Context(), u.o.AuthFailureDelay)
		contract.AuditRefused(u.o.Audit, r, "", http.StatusUnauthorized, "", "", "login with an unknown token")
		u.render(w, http.StatusUnauthorized, &pageData{Title: "Log in", CSRF: u.csrf(loginSession), Login: &loginData{Error: "Unknown token."}})
		return
	}
	u.o.Logger.Info("ui login", zap.String("principal", p.Name()), zap.String("remote", r.RemoteAddr))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: tok, Path: "/ui/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// handleLogout is POST /ui/logout: clears the cookie, back to the login.
func (u *UI) handleLogout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		u.refuse(w, r, "", http.StatusForbidden, "", "", "Refused: the form was posted from another origin.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}
