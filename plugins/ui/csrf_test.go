package ui_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// visitorCookie is the cookie a page's CSRF token is bound to.
const visitorCookie = "mmmq_ui_csrf"

// TestCSRFIsPerVisitor: with authentication off, each visitor gets its
// own random cookie (HttpOnly, SameSite=Strict, Path=/ui/) and its own
// CSRF token: one visitor's token is refused with another's cookie or
// with none, and accepted with its own.
func TestCSRFIsPerVisitor(t *testing.T) {
	holding, _ := consumers(t)
	b := startBroker(t, testConfig(t))
	b.createDispatcher("d1", holding, "a.*")
	alice, mallory := b.visitor(nil), b.visitor(nil)
	resp, page := b.doWith(alice, http.MethodGet, "/ui/", "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var c *http.Cookie
	for _, rc := range resp.Cookies() {
		if rc.Name == visitorCookie {
			c = rc
		}
	}
	require.NotNil(t, c, "the page sets the visitor cookie %s", visitorCookie)
	assert.Regexp(t, `^[0-9a-f]{64}$`, c.Value)
	assert.True(t, c.HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
	assert.Equal(t, "/ui/", c.Path)
	assert.False(t, c.Secure, "plain HTTP")
	aliceTok := csrfOf(t, page)
	resp, page = b.doWith(alice, http.MethodGet, "/ui/", "")
	assert.Empty(t, resp.Cookies(), "the cookie is set once")
	assert.Equal(t, aliceTok, csrfOf(t, page), "a visitor's token stays")

	_, page = b.doWith(mallory, http.MethodGet, "/ui/", "")
	assert.NotEqual(t, aliceTok, csrfOf(t, page), "another visitor, another token")
	paused := func() bool {
		st, err := b.admin.Status("d1")
		require.NoError(t, err)
		return st.Paused
	}
	for _, tc := range []struct {
		what string
		c    *http.Client
		hdr  []string
	}{
		{"with another visitor's cookie", mallory, nil},
		{"without the cookie", b.visitor(nil), nil},
		{"with a forged cookie", b.visitor(nil), []string{"Cookie", visitorCookie + "=" + forged(c.Value)}},
	} {
		resp, out := b.doWith(tc.c, http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+aliceTok, tc.hdr...)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, tc.what)
		assert.Contains(t, out, "Refused", tc.what)
		assert.False(t, paused(), tc.what)
	}
	resp, _ = b.doWith(alice, http.MethodPost, "/ui/dispatchers/d1/pause", "csrf="+aliceTok)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.True(t, paused())
	// The outcome is shown to the visitor that posted it only.
	_, page = b.doWith(mallory, http.MethodGet, resp.Header.Get("Location"), "")
	assert.NotContains(t, page, `id="flash"`, "another visitor's flash")
	_, page = b.doWith(alice, http.MethodGet, resp.Header.Get("Location"), "")
	assert.Contains(t, page, `id="flash"`)
}

// TestPostNeedsOrigin: a post must name the page's own scheme and host in
// Origin or, without Origin, in Referer; one with neither, "Origin: null"
// or a foreign one is refused 403 saying why, with authentication off and
// on (the login and logout forms too).
func TestPostNeedsOrigin(t *testing.T) {
	holding, _ := consumers(t)
	b := startBroker(t, testConfig(t))
	b.createDispatcher("d1", holding, "a.*")
	_, page := b.do(http.MethodGet, "/ui/", "")
	tok := "csrf=" + csrfOf(t, page)
	for _, tc := range []struct {
		what, want string
		hdr        []string
	}{
		{"neither Origin nor Referer", "neither an Origin nor a Referer", []string{"Origin", ""}},
		{"Origin null", "another origin", []string{"Origin", "null"}},
		{"foreign Referer", "another origin", []string{"Origin", "", "Referer", "http://evil.example/ui/"}},
		{"other scheme", "another origin", []string{"Origin", "https" + b.base[len("http"):]}},
	} {
		resp, out := b.do(http.MethodPost, "/ui/dispatchers/d1/pause", tok, tc.hdr...)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode, tc.what)
		assert.Contains(t, out, "Refused: ", tc.what)
		assert.Contains(t, out, tc.want, tc.what)
		for _, path := range []string{"/ui/login", "/ui/logout"} {
			resp, _ = b.do(http.MethodPost, path, tok, tc.hdr...)
			assert.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", path, tc.what)
		}
	}
	st, err := b.admin.Status("d1")
	require.NoError(t, err)
	require.False(t, st.Paused)
	resp, out := b.do(http.MethodPost, "/ui/dispatchers/d1/pause", tok, "Origin", "", "Referer", b.base+"/ui/topics?page=2")
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, "a same-origin Referer without Origin: %s", out)
	resp, out = b.do(http.MethodPost, "/ui/dispatchers/d1/resume", tok, "Origin", b.base)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode, out)

	// With tokens, the login form needs Origin (or Referer) too.
	ab, all, _ := authBroker(t)
	_, page = ab.do(http.MethodGet, "/ui/login", "")
	resp, out = ab.do(http.MethodPost, "/ui/login", "token="+all+"&csrf="+csrfOf(t, page), "Origin", "")
	assert.Equal(t, http.StatusForbidden, resp.StatusCode, out)
	assert.Contains(t, out, "neither an Origin nor a Referer")
}

// TestVisitorCookieIsSecureOverTLS: over TLS the visitor cookie is Secure.
func TestVisitorCookieIsSecureOverTLS(t *testing.T) {
	b := startBroker(t, testConfig(t))
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "https://mmmq.example/ui/", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	var found bool
	for _, c := range rec.Result().Cookies() {
		if c.Name == visitorCookie {
			found = true
			assert.True(t, c.Secure)
			assert.True(t, c.HttpOnly)
			assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
		}
	}
	assert.True(t, found, "the visitor cookie is set")
}

// forged is v with its last hex digit changed: a cookie one digit away from
// a real one. (Setting it to '0' was the real cookie again one time in 16.)
func forged(v string) string {
	last := "0"
	if strings.HasSuffix(v, "0") {
		last = "1"
	}
	return v[:len(v)-1] + last
}
