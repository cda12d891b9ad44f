package app_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/contract"
)

// rawClient follows no redirect and asks for no transparent gzip, so a test
// sees the answer exactly as the broker sent it.
func rawClient(t *testing.T) *http.Client {
	c := &http.Client{
		Transport:     &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// send sends method base+path (path as it goes on the wire) and returns the
// status, the body and the header.
func send(t *testing.T, c *http.Client, method, base, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// requireErrorBody requires the broker's JSON error body with code.
func requireErrorBody(t *testing.T, h http.Header, body, code string) contract.ErrorBody {
	t.Helper()
	require.Equal(t, "application/json", h.Get("Content-Type"), body)
	var eb contract.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(body), &eb), body)
	require.Equal(t, "NACK", eb.Acknowledgement, body)
	require.Equal(t, code, eb.Code, body)
	require.NotEmpty(t, eb.Error, body)
	return eb
}

// TestHTTPHeadOnEveryGetRoute: in the full application, every GET route
// (the HTTP API's and the metrics plugin's) answers HEAD with GET's status
// and headers and no body.
func TestHTTPHeadOnEveryGetRoute(t *testing.T) {
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	st, _ := publish(t, base, "t", 1)
	require.Equal(t, 200, st)
	c := rawClient(t)
	for _, tc := range []struct {
		path       string
		status     int
		sameLength bool // the body does not change between the two requests
	}{
		{"/healthz", 200, true},
		{"/readyz", 200, true},
		{"/topics", 200, true},
		{"/topics/t/messages", 200, true},
		{"/topics/missing/messages", 404, true},
		{"/metrics", 200, false},
	} {
		t.Run(tc.path, func(t *testing.T) {
			gst, gbody, gh := send(t, c, http.MethodGet, base, tc.path, "")
			hst, hbody, hh := send(t, c, http.MethodHead, base, tc.path, "")
			require.Equal(t, tc.status, gst, gbody)
			assert.Equal(t, gst, hst, "HEAD status")
			assert.Empty(t, hbody, "HEAD body")
			assert.Equal(t, gh.Get("Content-Type"), hh.Get("Content-Type"))
			if tc.sameLength {
				assert.Equal(t, gh.Get("Content-Length"), hh.Get("Content-Length"))
			}
		})
	}
}

// TestHTTPMethodNotAllowedHasAllow: every 405 of the full application, on
// the HTTP API's routes, the publish fast path's and the consumer groups'
// and metrics' routes, lists the accepted methods in Allow and has the JSON
// error body; nothing is stored.
func TestHTTPMethodNotAllowedHasAllow(t *testing.T) {
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	c := rawClient(t)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodOptions, "/messages", "POST"},
		{http.MethodPut, "/messages", "POST"},
		{http.MethodGet, "/messages", "POST"},
		{http.MethodGet, "/mmmq/messages", "POST"},
		{http.MethodDelete, "/messages/batch", "POST"},
		{http.MethodDelete, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/topics", "GET, HEAD"},
		{http.MethodPut, "/topics/t/messages", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
		{http.MethodGet, "/topics/t/groups/g/fetch", "POST"},
		{http.MethodPut, "/topics/t/groups/g/ack", "POST"},
		{http.MethodPost, "/topics/t/groups/g/session", "DELETE"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			st, body, h := send(t, c, tc.method, base, tc.path, `{"topic":"wrong.method","content":1}`)
			require.Equal(t, http.StatusMethodNotAllowed, st, body)
			assert.Equal(t, tc.allow, h.Get("Allow"))
			requireErrorBody(t, h, body, contract.CodeMethod)
		})
	}
	st, body, _ := send(t, c, http.MethodGet, base, "/topics", "")
	require.Equal(t, 200, st)
	assert.NotContains(t, body, "wrong.method")
}

// TestHTTPNonCanonicalPathIsRefused: a path with an empty, "." or ".."
// segment is answered 400 with the JSON body, not redirected, and nothing
// is stored or acknowledged.
func TestHTTPNonCanonicalPathIsRefused(t *testing.T) {
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	c := rawClient(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/topics/../x/messages"},
		{http.MethodPost, "//messages"},
		{http.MethodPost, "/mmmq/../messages"},
		{http.MethodPost, "/topics/order.created/groups/%2E%2E/fetch"},
		{http.MethodPost, "/topics/order.created/groups/./ack?offset=0"},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			st, body, h := send(t, c, tc.method, base, tc.path, `{"topic":"not.canonical","content":1}`)
			require.Equal(t, http.StatusBadRequest, st, body)
			assert.Empty(t, h.Get("Location"))
			eb := requireErrorBody(t, h, body, contract.CodeBadRequest)
			assert.Contains(t, eb.Error, "not canonical")
		})
	}
	st, body, _ := send(t, c, http.MethodGet, base, "/topics", "")
	require.Equal(t, 200, st)
	assert.NotContains(t, body, "not.canonical")
}
