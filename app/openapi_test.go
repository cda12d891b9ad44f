package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gorilla/mux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
)

// The OpenAPI document (modules/httpapi/openapi.yaml, served at
// GET /openapi.yaml) is checked here against the full default application:
// every route of the router is documented and every documented operation
// is routed, and real requests and answers — the README's examples among
// them — validate against it.

// openAPIFile is where the document lives, for failure messages.
const openAPIFile = "modules/httpapi/openapi.yaml"

// loadOpenAPI loads the embedded document with kin-openapi and validates it
// (structure, references, schemas and examples).
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(httpapi.OpenAPI())
	require.NoError(t, err, "load %s", openAPIFile)
	require.NoError(t, doc.Validate(loader.Context), "validate %s", openAPIFile)
	require.True(t, doc.IsOpenAPI31OrLater(), "%s is OpenAPI %s, want 3.1", openAPIFile, doc.OpenAPI)
	return doc
}

// muxVar is a gorilla/mux path variable with a pattern, {name:regexp}.
var muxVar = regexp.MustCompile(`\{([^{}:]+):[^{}]*\}`)

// routedOperations lists "METHOD /path/{template}" for every route of srv's
// router. HEAD is left out: the server answers HEAD wherever GET is
// allowed, through routes of its own without a path template, and the
// document lists GET only. A route without methods would answer every
// method; it is listed as "* /path" so that it cannot pass unnoticed.
func routedOperations(t *testing.T, srv *httpapi.Server) []string {
	t.Helper()
	var out []string
	require.NoError(t, srv.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return nil // the HEAD routes, matched by function
		}
		path = muxVar.ReplaceAllString(path, "{$1}")
		methods, err := route.GetMethods()
		if err != nil {
			methods = []string{"*"}
		}
		for _, m := range methods {
			if m != http.MethodHead && m != http.MethodOptions {
				out = append(out, m+" "+path)
			}
		}
		return nil
	}))
	slices.Sort(out)
	return out
}

// documentedOperations lists "METHOD /path" for every operation of doc,
// less HEAD and OPTIONS (answered by the server for every GET route and
// never served, respectively).
func documentedOperations(doc *openapi3.T) []string {
	var out []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			m := strings.ToUpper(method)
			if m != http.MethodHead && m != http.MethodOptions {
				out = append(out, m+" "+path)
			}
		}
	}
	slices.Sort(out)
	return out
}

// compareOperations returns the routed operations the document lacks and
// the documented ones no route serves.
func compareOperations(routed, documented []string) (undocumented, unrouted []string) {
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			undocumented = append(undocumented, r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			unrouted = append(unrouted, d)
		}
	}
	return undocumented, unrouted
}

// checkOperations reports, naming each, the routes missing from the
// document and the documented operations that are not routed.
func checkOperations(t testing.TB, routed, documented []string) {
	undocumented, unrouted := compareOperations(routed, documented)
	for _, r := range undocumented {
		t.Errorf("route %s is served but not documented in %s: add it (request, parameters, every answer)", r, openAPIFile)
	}
	for _, d := range unrouted {
		t.Errorf("%s documents %s, but no route serves it", openAPIFile, d)
	}
}

// recorder is a testing.TB that records Errorf calls, for the negative
// checks of checkOperations.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestOpenAPIDocumentsEveryRoute: the document lists exactly the routes of
// the default application's router (the HTTP API's, the consumer groups'
// and the metrics plugin's), method by method. HEAD and OPTIONS are left
// out on both sides (see routedOperations).
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	doc := loadOpenAPI(t)
	var srv *httpapi.Server
	a, _ := startBroker(t, testConfig(t, t.TempDir()), fx.Populate(&srv))
	defer a.RequireStop()

	routed := routedOperations(t, srv)
	// The walk sees the plugins' routes too, not only the server's own.
	for _, want := range []string{"POST /messages", "GET /metrics", "POST /topics/{topic}/groups/{group}/fetch", "GET /openapi.yaml"} {
		require.Contains(t, routed, want, "router walk")
	}
	checkOperations(t, routed, documentedOperations(doc))

	// The check can fail: a document without one path or method names that
	// route as undocumented, and a documented path without a route is
	// named too, each in addition to whatever the real document lacks.
	report := func(routed []string, d *openapi3.T) []string {
		rec := &recorder{TB: t}
		checkOperations(rec, routed, documentedOperations(d))
		return rec.errs
	}
	baseline := report(routed, doc)
	// extra returns what got reports beyond the baseline.
	extra := func(t *testing.T, got []string) []string {
		t.Helper()
		require.Len(t, got, len(baseline)+1, "%q", got)
		var out []string
		for _, e := range got {
			if !slices.Contains(baseline, e) {
				out = append(out, e)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		edit func(d *openapi3.T)
		want string
	}{
		{"undocumented route", func(d *openapi3.T) { d.Paths.Delete("/topics/{topic}/reopen") },
			"route POST /topics/{topic}/reopen is served but not documented"},
		{"undocumented method", func(d *openapi3.T) { d.Paths.Value("/topics/{topic}").Delete = nil },
			"route DELETE /topics/{topic} is served but not documented"},
		{"documented path not routed", func(d *openapi3.T) {
			d.Paths.Set("/topics/{topic}/nowhere", &openapi3.PathItem{Get: d.Paths.Value("/topics").Get})
		}, "documents GET /topics/{topic}/nowhere, but no route serves it"},
	} {
		t.Run("detects "+tc.name, func(t *testing.T) {
			edited := loadOpenAPI(t)
			tc.edit(edited)
			got := extra(t, report(routed, edited))
			require.Len(t, got, 1)
			assert.Contains(t, got[0], tc.want)
		})
	}
	// A route added by a module or plugin (contract.ProvideRoute) without
	// documenting it is named.
	t.Run("detects a plugin's undocumented route", func(t *testing.T) {
		var srv *httpapi.Server
		a, _ := startBroker(t, testConfig(t, t.TempDir()), fx.Populate(&srv),
			contract.ProvideRoute(func() contract.Route { return undocumentedRoute{} }))
		defer a.RequireStop()
		got := extra(t, report(routedOperations(t, srv), doc))
		require.Len(t, got, 1)
		assert.Contains(t, got[0], "route PUT /topics/{topic}/undocumented is served but not documented")
	})
}

// undocumentedRoute is a plugin's route that the document lacks.
type undocumentedRoute struct{}

func (undocumentedRoute) Register(r *mux.Router) {
	r.HandleFunc("/topics/{topic}/undocumented", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}).Methods(http.MethodPut)
}

// apiClient sends requests to a running broker and validates each request
// and its real answer against the document.
type apiClient struct {
	t      *testing.T
	base   string
	router routers.Router
	http   *http.Client
}

// exchange is one request and the status it must get.
type exchange struct {
	method, path string            // path with its query, as sent
	header       map[string]string // request headers
	body         string
	status       int
	// invalid: the request breaks the document (a missing field, a
	// parameter out of range), which predicts the broker's 400.
	invalid bool
}

// answer is what the broker sent back.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the answer's body into a map.
func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m), "%s", a.body)
	return m
}

var validation = &openapi3filter.Options{
	IncludeResponseStatus: true, // an undocumented status fails
	MultiError:            true,
}

// do validates ex's request, sends it, checks its status and validates the
// answer (status, headers, body) against the document.
func (c *apiClient) do(ex exchange) answer {
	t := c.t
	t.Helper()
	name := ex.method + " " + ex.path
	newReq := func() *http.Request {
		req, err := http.NewRequest(ex.method, c.base+ex.path, strings.NewReader(ex.body))
		require.NoError(t, err)
		if ex.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for k, v := range ex.header {
			req.Header.Set(k, v)
		}
		return req
	}
	req := newReq()
	route, params, err := c.router.FindRoute(req)
	require.NoError(t, err, "%s: no operation of %s matches", name, openAPIFile)
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: validation}
	err = openapi3filter.ValidateRequest(context.Background(), in)
	if ex.invalid {
		require.Error(t, err, "%s: the document accepts a request the broker refuses", name)
	} else {
		require.NoError(t, err, "%s: request does not match %s", name, openAPIFile)
	}

	resp, err := c.http.Do(newReq())
	require.NoError(t, err, name)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, name)
	require.Equal(t, ex.status, resp.StatusCode, "%s: %s", name, body)

	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: validation}
	out.SetBodyBytes(body)
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out),
		"%s: answer %d does not match %s: %s", name, resp.StatusCode, openAPIFile, body)
	return answer{resp.StatusCode, resp.Header, body}
}

// readme is the README, for the examples taken from it.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	return string(b)
}

// TestOpenAPIValidatesRealExchanges sends the README's example requests and
// a few more (batch with ids, duplicates, errors, a consumer group's fetch,
// ack and release, topic deletion) to a running broker and validates every
// request and every real answer against the document. Each README example
// is checked to be still in the README, so that the two cannot drift apart
// silently.
func TestOpenAPIValidatesRealExchanges(t *testing.T) {
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	c := &apiClient{t: t, base: base, router: router, http: rawClient(t)}
	md := readme(t)
	inREADME := func(s string) {
		t.Helper()
		require.Contains(t, md, s, "README example changed: update this test and check it against %s", openAPIFile)
	}

	// Quickstart: publish, list, read back.
	quick := `{"topic":"order.created","content":{"orderId":42}}`
	inREADME(`curl -s localhost:8080/messages -d '` + quick + `'`)
	got := c.do(exchange{method: "POST", path: "/messages", body: quick, status: 200}).json(t)
	assert.Equal(t, 0.0, got["offset"])
	assert.NotEmpty(t, got["id"])
	inREADME("curl -s localhost:8080/topics\n")
	c.do(exchange{method: "GET", path: "/topics", status: 200})
	inREADME(`'localhost:8080/topics/order.created/messages?offset=0&limit=10'`)
	page := c.do(exchange{method: "GET", path: "/topics/order.created/messages?offset=0&limit=10", status: 200}).json(t)
	assert.Equal(t, 1.0, page["nextOffset"])

	// Publishing: the README's full request, on both paths; its id makes
	// the second a duplicate of the first.
	full := `{"topic": "order.created", "content": {"orderId": 42}, "headers": {"k": "v"}, "id": "evt-1"}`
	inREADME(full)
	first := c.do(exchange{method: "POST", path: "/messages", body: full, status: 200}).json(t)
	assert.Nil(t, first["duplicate"])
	dup := c.do(exchange{method: "POST", path: "/mmmq/messages", body: full, status: 200}).json(t)
	assert.Equal(t, true, dup["duplicate"])
	assert.Equal(t, first["offset"], dup["offset"])
	// Every ack level: ACCEPTED has no offset, the others have one.
	for _, lvl := range []string{"accepted", "written", "durable"} {
		got := c.do(exchange{method: "POST", path: "/messages?ack=" + lvl, body: `{"topic":{"name":"order.created"},"content":null}`, status: 200}).json(t)
		assert.Equal(t, strings.ToUpper(lvl), got["level"])
	}
	acc := c.do(exchange{method: "POST", path: "/messages?ack=accepted", body: full, status: 200}).json(t)
	assert.Equal(t, true, acc["duplicate"])
	assert.Nil(t, acc["offset"])

	// Batch: generated and producer ids, a duplicate of evt-1, two topics.
	batch := `[{"topic":"order.created","content":1,"id":"evt-2"},{"topic":"order.created","content":2,"id":"evt-1"},{"topic":"payment.done","content":3}]`
	br := c.do(exchange{method: "POST", path: "/messages/batch", body: batch, status: 200}).json(t)
	results := br["results"].([]any)
	require.Len(t, results, 3)
	assert.Equal(t, "evt-2", results[0].(map[string]any)["id"])
	assert.Equal(t, true, results[1].(map[string]any)["duplicate"])
	assert.NotEmpty(t, results[2].(map[string]any)["id"])
	// NDJSON: one message per line. kin-openapi has no decoder for it; the
	// document gives the body as a string, which the plain-text decoder
	// hands over whole.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.PlainBodyDecoder)
	defer openapi3filter.UnregisterBodyDecoder("application/x-ndjson")
	nd := c.do(exchange{method: "POST", path: "/messages/batch?ack=written", header: map[string]string{"Content-Type": "application/x-ndjson"},
		body: "{\"topic\":\"order.created\",\"content\":4}\n{\"topic\":\"order.created\",\"content\":5,\"id\":\"evt-2\"}\n", status: 200}).json(t)
	assert.Equal(t, 2.0, nd["count"])
	assert.Equal(t, true, nd["results"].([]any)[1].(map[string]any)["duplicate"])
	// Read the whole topic back: stored messages with and without ids and
	// headers.
	c.do(exchange{method: "GET", path: "/topics/order.created/messages", status: 200})

	// Errors.
	bad := c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order.created"}`, status: 400, invalid: true}).json(t)
	assert.Equal(t, "BAD_REQUEST", bad["code"])
	c.do(exchange{method: "POST", path: "/messages?ack=never", body: quick, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order..created","content":1}`, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: "/messages/batch", body: `[{"topic":"ok","content":1},{"topic":"bad name","content":2}]`, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: "/messages/batch", body: `{"topic":"ok","content":1}`, status: 400, invalid: true})
	c.do(exchange{method: "GET", path: "/topics/order.created/messages?limit=0", status: 400, invalid: true})
	c.do(exchange{method: "GET", path: "/topics/missing/messages", status: 404})

	// Consumer groups: the README's fetch and ack, then a second consumer,
	// an ack beyond what was delivered, a missing session, the release.
	inREADME(`'localhost:8080/topics/order.created/groups/billing/fetch?max=10&wait=2000'`)
	fetched := c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/fetch?max=10&wait=2000", status: 200})
	session := fetched.header.Get(groups.SessionHeader)
	require.NotEmpty(t, session)
	assert.NotEmpty(t, fetched.json(t)["messages"])
	inREADME(`-H 'mmmq-session: <id>' -d '{"offset":0}'`)
	ack := c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/ack",
		header: map[string]string{groups.SessionHeader: session}, body: `{"offset":0}`, status: 200}).json(t)
	assert.Equal(t, 1.0, ack["committed"])
	busy := c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/fetch", status: 409})
	assert.NotEmpty(t, busy.header.Get("Retry-After"))
	assert.Equal(t, "GROUP_BUSY", busy.json(t)["code"])
	c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/ack",
		header: map[string]string{groups.SessionHeader: session}, body: `{"offset":1000}`, status: 409})
	c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/ack", body: `{"offset":0}`, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/fetch?from=1",
		header: map[string]string{groups.SessionHeader: session}, status: 200})
	c.do(exchange{method: "DELETE", path: "/topics/order.created/groups/billing/session",
		header: map[string]string{groups.SessionHeader: session}, status: 200})
	c.do(exchange{method: "POST", path: "/topics/missing/groups/billing/fetch", status: 404})

	// Topic lifecycle.
	c.do(exchange{method: "POST", path: "/topics/order.created/reopen", status: 409})
	c.do(exchange{method: "DELETE", path: "/topics/payment.done", status: 200})
	c.do(exchange{method: "DELETE", path: "/topics/payment.done", status: 404})

	// Operations, and the document itself as served.
	c.do(exchange{method: "GET", path: "/healthz", status: 200})
	c.do(exchange{method: "GET", path: "/readyz", status: 200})
	c.do(exchange{method: "GET", path: "/metrics", status: 200})
	served := c.do(exchange{method: "GET", path: "/openapi.yaml", status: 200})
	assert.Equal(t, httpapi.OpenAPIContentType, served.header.Get("Content-Type"))
	assert.True(t, bytes.Equal(httpapi.OpenAPI(), served.body), "GET /openapi.yaml serves the embedded document")
}

// TestOpenAPIValidatesREADMEAnswers: the answers the README shows validate
// against the document's schema for that operation and status.
func TestOpenAPIValidatesREADMEAnswers(t *testing.T) {
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	md := readme(t)
	for _, tc := range []struct {
		method, path string
		status       int
		body         string // as the README shows it
	}{
		{"POST", "/messages", 200, `{"acknowledgement":"ACK","topic":"order.created","offset":0,"level":"DURABLE","id":"..."}`},
		{"POST", "/messages", 200, `{"acknowledgement":"ACK","topic":"t","offset":17,"level":"DURABLE","id":"evt-1","duplicate":true}`},
		{"POST", "/topics/order.created/groups/billing/ack", 200, `{"topic":"order.created","group":"billing","committed":1}`},
		{"DELETE", "/topics/t", 200, `{"topic":"t","deleted":true}`},
		{"POST", "/topics/order.created/reopen", 200, `{"topic":"order.created","highWatermark":17,"reopened":true}`},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			require.Contains(t, md, tc.body, "README example changed: update this test")
			req, err := http.NewRequest(tc.method, "http://localhost:8080"+tc.path, nil)
			require.NoError(t, err)
			route, params, err := router.FindRoute(req)
			require.NoError(t, err)
			out := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: validation},
				Status:                 tc.status,
				Header:                 http.Header{"Content-Type": {"application/json"}},
				Options:                validation,
			}
			out.SetBodyBytes([]byte(tc.body))
			require.NoError(t, openapi3filter.ValidateResponse(context.Background(), out))
		})
	}
}
