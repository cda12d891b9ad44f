package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// pluginRoute stands for a module's or plugin's contract.Route: GET and
// DELETE on /plugin/{name}. It records the method and path variable its GET
// handler saw.
type pluginRoute struct {
	mu     sync.Mutex
	method string
	name   string
}

func (p *pluginRoute) Register(r *mux.Router) {
	r.HandleFunc("/plugin/{name}", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.method, p.name = r.Method, mux.Vars(r)["name"]
		p.mu.Unlock()
		w.Header().Set("X-Plugin", "yes")
		contract.WriteJSON(w, http.StatusOK, map[string]string{"name": mux.Vars(r)["name"]})
	}).Methods(http.MethodGet)
	r.HandleFunc("/plugin/{name}", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}).Methods(http.MethodDelete)
}

func (p *pluginRoute) seen() (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.method, p.name
}

// methodsEnv is a real HTTP server (httptest) on the broker's handler with
// one plugin route, and one message stored in topic t.
type methodsEnv struct {
	url    string
	reg    *topicqueue.Registry
	plugin *pluginRoute
	client *http.Client // no redirects followed, no transparent gzip
}

func startMethods(t *testing.T) *methodsEnv {
	t.Helper()
	log := zaptest.NewLogger(t)
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir(), Storage: storage.Options{Logger: log}})
	t.Cleanup(func() { _ = reg.Close() })
	p := &pluginRoute{}
	s := New(Options{}, reg, nil, log, p)
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	h := httptest.NewServer(s.Handler())
	t.Cleanup(h.Close)
	e := &methodsEnv{url: h.URL, reg: reg, plugin: p, client: &http.Client{
		Transport:     &http.Transport{DisableCompression: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	t.Cleanup(e.client.CloseIdleConnections)
	if st, body, _ := e.do(t, http.MethodPost, "/messages?ack=durable", `{"topic":"t","content":1}`); st != http.StatusOK {
		t.Fatalf("publish: %d %s", st, body)
	}
	return e
}

// do sends method path (path as it goes on the wire) with body and returns
// the status, the body and the header.
func (e *methodsEnv) do(t *testing.T, method, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// errorBody decodes the broker's JSON error body, failing on anything else.
func errorBody(t *testing.T, h http.Header, body string) contract.ErrorBody {
	t.Helper()
	if ct := h.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (body %q)", ct, body)
	}
	var eb contract.ErrorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Acknowledgement != "NACK" || eb.Error == "" {
		t.Fatalf("body %q is not the broker's error body (%v)", body, err)
	}
	return eb
}

// TestHeadWhereGet: every GET route, the server's own and a plugin's,
// answers HEAD with GET's status and headers and no body.
func TestHeadWhereGet(t *testing.T) {
	e := startMethods(t)
	for _, c := range []struct {
		path   string
		status int
	}{
		{"/healthz", http.StatusOK},
		{"/readyz", http.StatusOK},
		{"/topics", http.StatusOK},
		{"/topics/t/messages", http.StatusOK},
		{"/topics/t/messages?offset=0&limit=1", http.StatusOK},
		{"/topics/missing/messages", http.StatusNotFound},
		{"/topics/t/messages?limit=0", http.StatusBadRequest},
		{"/openapi.yaml", http.StatusOK},
		{"/plugin/p1", http.StatusOK},
	} {
		path := c.path
		t.Run(path, func(t *testing.T) {
			gst, gbody, gh := e.do(t, http.MethodGet, path, "")
			hst, hbody, hh := e.do(t, http.MethodHead, path, "")
			if gst != c.status {
				t.Fatalf("GET %d (%s), want %d", gst, gbody, c.status)
			}
			if hst != gst {
				t.Fatalf("HEAD %d, GET %d (%s)", hst, gst, gbody)
			}
			if hbody != "" {
				t.Fatalf("HEAD has a body: %q", hbody)
			}
			for _, k := range []string{"Content-Type", "Content-Length", "X-Plugin", "Allow"} {
				if hh.Get(k) != gh.Get(k) {
					t.Errorf("%s: HEAD %q, GET %q", k, hh.Get(k), gh.Get(k))
				}
			}
		})
	}
	// The plugin's handler saw the HEAD request, with its path variable.
	e.do(t, http.MethodHead, "/plugin/p2", "")
	if m, name := e.plugin.seen(); m != http.MethodHead || name != "p2" {
		t.Fatalf("plugin handler saw %s %q, want HEAD p2", m, name)
	}
}

// TestHeadHasNoBodyOnTheWire: the bytes after a HEAD answer's header are
// none, though Content-Length is GET's.
func TestHeadHasNoBodyOnTheWire(t *testing.T) {
	e := startMethods(t)
	nc, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(nc, "HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(nc)
	if err != nil {
		t.Fatal(err)
	}
	head, body, ok := strings.Cut(string(raw), "\r\n\r\n")
	if !ok || !strings.HasPrefix(head, "HTTP/1.1 200 ") || body != "" {
		t.Fatalf("HEAD /healthz answered %q", raw)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(head+"\r\n\r\n")), &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != int64(len(`{"status":"ok"}`+"\n")) {
		t.Fatalf("Content-Length %d, want GET's", resp.ContentLength)
	}
}

// TestMethodNotAllowedHasAllow: every 405 lists the path's methods in Allow
// and has the JSON error body; a wrong method on a publish path (which
// bypasses the router) stores nothing.
func TestMethodNotAllowedHasAllow(t *testing.T) {
	e := startMethods(t)
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodOptions, "/messages", "POST"},
		{http.MethodPut, "/messages", "POST"},
		{http.MethodGet, "/messages", "POST"},
		{http.MethodHead, "/messages", "POST"},
		{http.MethodGet, "/mmmq/messages", "POST"},
		{http.MethodPut, "/mmmq/messages", "POST"},
		{http.MethodGet, "/messages/batch", "POST"},
		{http.MethodDelete, "/healthz", "GET, HEAD"},
		{http.MethodPost, "/readyz", "GET, HEAD"},
		{http.MethodPost, "/topics", "GET, HEAD"},
		{http.MethodDelete, "/topics/t/messages", "GET, HEAD"},
		{http.MethodPost, "/plugin/x", "GET, HEAD, DELETE"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			st, body, h := e.do(t, c.method, c.path, `{"topic":"wrong.method","content":1}`)
			if st != http.StatusMethodNotAllowed {
				t.Fatalf("status %d (%s), want 405", st, body)
			}
			if got := h.Get("Allow"); got != c.allow {
				t.Fatalf("Allow %q, want %q", got, c.allow)
			}
			if c.method == http.MethodHead {
				if body != "" {
					t.Fatalf("HEAD has a body: %q", body)
				}
				return
			}
			if eb := errorBody(t, h, body); eb.Code != contract.CodeMethod {
				t.Fatalf("code %q, want %s", eb.Code, contract.CodeMethod)
			}
		})
	}
	if _, ok := e.reg.Get("wrong.method"); ok {
		t.Fatal("a request with a wrong method stored a message")
	}
}

// TestNonCanonicalPathsAreRefused: a path with an empty, "." or ".."
// segment is answered 400 with the JSON body, never redirected, and
// nothing is stored (the publish paths included).
func TestNonCanonicalPathsAreRefused(t *testing.T) {
	e := startMethods(t)
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/topics/../x/messages"},
		{http.MethodGet, "/topics/./messages"},
		{http.MethodGet, "/topics/t/messages/.."},
		{http.MethodGet, "//topics"},
		{http.MethodGet, "/topics//t/messages"},
		{http.MethodPost, "//messages"},
		{http.MethodPost, "/x/../messages"},
		{http.MethodPost, "/mmmq/./messages"},
		{http.MethodPost, "/messages/../messages/batch"},
		{http.MethodPost, "/topics/order.created/groups/%2E%2E/fetch"},
		{http.MethodHead, "/topics/../healthz"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			st, body, h := e.do(t, c.method, c.path, `{"topic":"not.canonical","content":1}`)
			if st != http.StatusBadRequest {
				t.Fatalf("status %d (Location %q, body %q), want 400", st, h.Get("Location"), body)
			}
			if loc := h.Get("Location"); loc != "" {
				t.Fatalf("Location %q on a 400", loc)
			}
			if c.method == http.MethodHead {
				return
			}
			eb := errorBody(t, h, body)
			if eb.Code != contract.CodeBadRequest || !strings.Contains(eb.Error, "not canonical") {
				t.Fatalf("body %+v, want BAD_REQUEST saying the path is not canonical", eb)
			}
		})
	}
	if _, ok := e.reg.Get("not.canonical"); ok {
		t.Fatal("a request on a non-canonical path stored a message")
	}
	// A trailing "/" is canonical: no route, 404 with the JSON body.
	st, body, h := e.do(t, http.MethodGet, "/topics/", "")
	if st != http.StatusNotFound || errorBody(t, h, body).Code != contract.CodeNotFound {
		t.Fatalf("GET /topics/: %d %s, want 404 NOT_FOUND", st, body)
	}
}

func TestCanonicalPath(t *testing.T) {
	for p, want := range map[string]bool{
		"": true, "*": true, "/": true, "/messages": true, "/topics/": true, "/topics/a.b/messages": true,
		"/..x/x..": true, "/...": true,
		"//": false, "//messages": false, "/a//b": false, "/.": false, "/..": false, "/a/./b": false,
		"/a/../b": false, "/a/.": false, "/a/..": false, "/a/./": false, "/a//": false,
	} {
		if got := canonicalPath(p); got != want {
			t.Errorf("canonicalPath(%q) = %v, want %v", p, got, want)
		}
	}
}
