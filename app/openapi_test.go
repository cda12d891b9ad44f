package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/gorilla/mux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
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
	// The document's security is the bearer scheme or none (the broker
	// without tokens, as these tests run it): a request sending
	// credentials must send them as the bearer scheme says.
	AuthenticationFunc: func(_ context.Context, in *openapi3filter.AuthenticationInput) error {
		h := in.RequestValidationInput.Request.Header.Get("Authorization")
		if in.SecuritySchemeName == "bearer" && h != "" && !strings.HasPrefix(h, "Bearer ") {
			return fmt.Errorf("Authorization %q is not a bearer token", h)
		}
		return nil
	},
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

// exampleDocs are the Markdown files whose HTTP examples the tests below
// send: the top-level README's quickstart and the reference beside each
// module.
var exampleDocs = []string{
	"README.md",
	"modules/httpapi/README.md",
	"modules/dedup/README.md",
	"modules/groups/README.md",
	"modules/admin/README.md",
	"modules/topicqueue/README.md",
}

// readme is the text of exampleDocs, for the examples taken from them.
func readme(t *testing.T) string {
	t.Helper()
	var md strings.Builder
	for _, f := range exampleDocs {
		b, err := os.ReadFile("../" + f)
		require.NoError(t, err)
		md.Write(b)
		md.WriteString("\n")
	}
	return md.String()
}

// readmeChecker returns a func that requires the README to still hold an
// example the test sends, so that the two cannot drift apart silently.
func readmeChecker(t *testing.T) func(example string) {
	md := readme(t)
	return func(example string) {
		t.Helper()
		require.Contains(t, md, example, "README example changed: update this test and check it against %s", openAPIFile)
	}
}

// newAPIClient loads the document and returns a client of the broker at
// base that validates every exchange against it.
func newAPIClient(t *testing.T, base string) *apiClient {
	t.Helper()
	router, err := gorillamux.NewRouter(loadOpenAPI(t))
	require.NoError(t, err)
	return &apiClient{t: t, base: base, router: router, http: rawClient(t)}
}

// TestOpenAPIValidatesRealExchanges sends the README's example requests and
// a few more (batch with ids, duplicates, errors, a consumer group's fetch,
// ack and release, the topic's group list and group seeks, topic deletion)
// to a running broker and validates every
// request and every real answer against the document. Each README example
// is checked to be still in the README, so that the two cannot drift apart
// silently.
func TestOpenAPIValidatesRealExchanges(t *testing.T) {
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	c := newAPIClient(t, base)
	inREADME := readmeChecker(t)

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

	// Publishing: the README's full request (headers, id, ordering key), on
	// both paths; its id makes the second a duplicate of the first.
	full := `{"topic": "order.created", "content": {"orderId": 42}, "headers": {"k": "v"}, "id": "evt-1", "key": "customer-7"}`
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
	batch := `[{"topic":"order.created","content":1,"id":"evt-2","key":"k-2","ttl":"1h"},{"topic":"order.created","content":2,"id":"evt-1"},{"topic":"payment.done","content":3,"key":null,"ttl":null}]`
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
	// Read the whole topic back: stored messages with and without ids,
	// keys and headers.
	c.do(exchange{method: "GET", path: "/topics/order.created/messages", status: 200})

	// Errors.
	bad := c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order.created"}`, status: 400, invalid: true}).json(t)
	assert.Equal(t, "BAD_REQUEST", bad["code"])
	c.do(exchange{method: "POST", path: "/messages?ack=never", body: quick, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order..created","content":1}`, status: 400, invalid: true})
	for _, ttl := range []string{`30`, `""`, `"30"`, `"soon"`, `"-1s"`} {
		c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order.created","content":1,"ttl":` + ttl + `}`, status: 400, invalid: true})
	}
	c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order.created","content":1,"expiresAt":1}`, status: 400, invalid: true})
	for _, key := range []string{`7`, `""`, `" k"`, `"a\u0007"`} {
		c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"order.created","content":1,"key":` + key + `}`, status: 400, invalid: true})
	}
	c.do(exchange{method: "POST", path: "/messages/batch", body: `[{"topic":"ok","content":1},{"topic":"ok","content":2,"key":""}]`, status: 400, invalid: true})
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

	// A topic's groups, and moving a group's committed offset. billing is
	// released: it is listed unheld, with its lag, and may be sought.
	listed := c.do(exchange{method: "GET", path: "/topics/order.created/groups", status: 200}).json(t)
	hw := listed["highWatermark"].(float64)
	assert.Equal(t, []any{map[string]any{"group": "billing", "committed": 1.0, "lag": hw - 1, "held": false, "mode": "exclusive"}}, listed["groups"])
	seek := `{"to":{"timestamp":1718000000000}}`
	inREADME(`-d '` + seek + `'`)
	sought := c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/seek", body: seek, status: 200}).json(t)
	assert.Equal(t, map[string]any{"topic": "order.created", "group": "billing", "committed": 0.0, "previous": 1.0}, sought,
		"every message was stored after the timestamp")
	latest := c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/seek", body: `{"to":"latest"}`, status: 200}).json(t)
	assert.Equal(t, hw, latest["committed"])
	// While a session holds a group it is listed held, with the time left
	// on its lease, and a seek is refused with Retry-After.
	held := c.do(exchange{method: "POST", path: "/topics/order.created/groups/audit/fetch?max=1", status: 200})
	audit := held.header.Get(groups.SessionHeader)
	listed = c.do(exchange{method: "GET", path: "/topics/order.created/groups", status: 200}).json(t)
	require.Len(t, listed["groups"], 2)
	auditInfo := listed["groups"].([]any)[0].(map[string]any)
	assert.Equal(t, "audit", auditInfo["group"])
	assert.Equal(t, true, auditInfo["held"])
	assert.Greater(t, auditInfo["leaseExpiresInMs"], 0.0)
	refused := c.do(exchange{method: "POST", path: "/topics/order.created/groups/audit/seek", body: `{"to":"earliest"}`, status: 409})
	assert.Equal(t, "GROUP_BUSY", refused.json(t)["code"])
	assert.NotEmpty(t, refused.header.Get("Retry-After"))
	c.do(exchange{method: "DELETE", path: "/topics/order.created/groups/audit/session",
		header: map[string]string{groups.SessionHeader: audit}, status: 200})
	c.do(exchange{method: "POST", path: "/topics/order.created/groups/audit/seek", body: `{"to":1}`, status: 200})
	// Bodies the document refuses, an offset it cannot know is too high,
	// and a topic that does not exist.
	for _, body := range []string{`{"to":"yesterday"}`, `{"to":0,"from":1}`, `{"to":{"timestamp":-1}}`, `{"to":null}`, `{}`} {
		bad := c.do(exchange{method: "POST", path: "/topics/order.created/groups/audit/seek", body: body, status: 400, invalid: true})
		assert.Equal(t, "BAD_REQUEST", bad.json(t)["code"], body)
	}
	c.do(exchange{method: "POST", path: "/topics/order.created/groups/audit/seek", body: `{"to":1000000}`, status: 400})
	c.do(exchange{method: "GET", path: "/topics/missing/groups", status: 404})
	c.do(exchange{method: "POST", path: "/topics/missing/groups/audit/seek", body: `{"to":0}`, status: 404})

	// A shared group: two sessions get different messages with their
	// delivery counts, per-message acks (a repeat counts as already) and
	// nacks, the forms of the other mode refused, the group list's shared
	// fields, and the redrive of its (not yet existing) dead letters.
	workers := "/topics/order.created/groups/workers"
	w1 := c.do(exchange{method: "POST", path: workers + "/fetch?mode=shared&max=2", status: 200})
	s1 := w1.header.Get(groups.SessionHeader)
	fb := w1.json(t)
	assert.Equal(t, "shared", fb["mode"])
	got1 := fb["messages"].([]any)
	require.Len(t, got1, 2)
	assert.Equal(t, 1.0, got1[0].(map[string]any)["deliveries"])
	second := c.do(exchange{method: "POST", path: workers + "/fetch?max=1", status: 200})
	s2 := second.header.Get(groups.SessionHeader)
	got2 := second.json(t)["messages"].([]any)
	require.Len(t, got2, 1)
	o0, o1, o2 := got1[0].(map[string]any)["offset"], got1[1].(map[string]any)["offset"], got2[0].(map[string]any)["offset"]
	assert.NotEqual(t, o0, o2)
	assert.NotEqual(t, o1, o2)
	h1, h2 := map[string]string{groups.SessionHeader: s1}, map[string]string{groups.SessionHeader: s2}
	acked := c.do(exchange{method: "POST", path: workers + "/ack", header: h1, body: fmt.Sprintf(`{"offsets":[%v]}`, o0), status: 200}).json(t)
	assert.Equal(t, map[string]any{"topic": "order.created", "group": "workers", "committed": 1.0, "acked": 1.0, "already": 0.0}, acked)
	again := c.do(exchange{method: "POST", path: workers + "/ack", header: h1, body: fmt.Sprintf(`{"offsets":[%v,%v]}`, o0, o0), status: 200}).json(t)
	assert.Equal(t, 0.0, again["acked"])
	assert.Equal(t, 1.0, again["already"])
	nacked := c.do(exchange{method: "POST", path: workers + "/nack", header: h1, body: fmt.Sprintf(`{"offsets":[%v],"retryAfter":"0s"}`, o1), status: 200}).json(t)
	assert.Equal(t, map[string]any{"topic": "order.created", "group": "workers", "committed": 1.0, "nacked": 1.0, "already": 0.0}, nacked)
	c.do(exchange{method: "POST", path: workers + "/nack", header: h2, body: fmt.Sprintf(`{"offsets":[%v],"retryAfter":30}`, o2), status: 200})
	notLeased := c.do(exchange{method: "POST", path: workers + "/nack", header: h2, body: `{"offsets":[1000000]}`, status: 409}).json(t)
	assert.Equal(t, "NOT_DELIVERED", notLeased["code"])
	mode := c.do(exchange{method: "POST", path: workers + "/ack", header: h2, body: `{"offset":0}`, status: 409}).json(t)
	assert.Equal(t, "GROUP_MODE", mode["code"])
	assert.Equal(t, "GROUP_MODE", c.do(exchange{method: "POST", path: workers + "/fetch?mode=exclusive", status: 409}).json(t)["code"])
	assert.Equal(t, "GROUP_MODE", c.do(exchange{method: "POST", path: "/topics/order.created/groups/billing/fetch?mode=shared", status: 409}).json(t)["code"])
	for _, body := range []string{`{"offset":0,"offsets":[1]}`, `{"offsets":[]}`, `{"offsets":[1],"x":1}`, `{"offsets":[-1]}`, `{}`} {
		c.do(exchange{method: "POST", path: workers + "/ack", header: h2, body: body, status: 400, invalid: true})
	}
	c.do(exchange{method: "POST", path: workers + "/nack", body: `{"offsets":[1]}`, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: workers + "/nack", header: h2, body: `{"offsets":[1],"retryAfter":-1}`, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: workers + "/fetch?mode=both", status: 400, invalid: true})
	listed = c.do(exchange{method: "GET", path: "/topics/order.created/groups", status: 200}).json(t)
	require.Len(t, listed["groups"], 3)
	shared := listed["groups"].([]any)[2].(map[string]any)
	assert.Equal(t, "workers", shared["group"])
	assert.Equal(t, "shared", shared["mode"])
	assert.Equal(t, true, shared["held"])
	assert.Nil(t, shared["leaseExpiresInMs"])
	assert.Equal(t, 0.0, shared["inFlight"], "o0 is acknowledged, o1 and o2 were given back")
	assert.Len(t, shared["sessions"], 2)
	redriven := c.do(exchange{method: "POST", path: workers + "/redrive", body: `{}`, status: 200}).json(t)
	assert.Equal(t, "dead-letter.workers", redriven["deadLetterTopic"])
	c.do(exchange{method: "POST", path: workers + "/redrive", status: 200})
	c.do(exchange{method: "POST", path: workers + "/redrive", body: `{"from":"x"}`, status: 400, invalid: true})
	// A replay rate is a dispatcher's: a group's redrive refuses it.
	c.do(exchange{method: "POST", path: workers + "/redrive", body: `{"rate":5}`, status: 400, invalid: true})
	c.do(exchange{method: "DELETE", path: workers + "/session", header: h1, status: 200})
	c.do(exchange{method: "DELETE", path: workers + "/session", header: h2, status: 200})

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

// TestOpenAPIValidatesDispatcherExchanges drives the dispatcher admin API
// of a running broker through every operation — create, list, status while
// a test consumer is being delivered to, replace, pause, resume, seek to
// earliest and to a timestamp, delete with its checkpoints — and its
// errors (unknown field, unknown dispatcher, a config dispatcher's
// READ_ONLY, a NAME_TAKEN, an oversized body), validating every request
// and answer against the document. The README's admin examples are sent
// as written, the consumer's address in place of localhost:8081.
func TestOpenAPIValidatesDispatcherExchanges(t *testing.T) {
	cons := newConsumer(t)
	cfg := testConfig(t, t.TempDir())
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "from-file", Host: cons.srv.URL, Patterns: []string{"file.only"}}})
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	c := newAPIClient(t, base)
	inREADME := readmeChecker(t)
	const readmeHost = "http://localhost:8081"
	local := func(body string) string { return strings.ReplaceAll(body, readmeHost, cons.srv.URL) }
	for i := range 3 {
		st, body := publish(t, base, "order.created", i)
		require.Equal(t, 200, st, "%v", body)
	}

	// The configuration file's dispatcher is listed with its defaults.
	list := c.do(exchange{method: "GET", path: "/mmmq/dispatchers", status: 200}).json(t)
	require.Len(t, list["dispatchers"], 1)
	fromFile := list["dispatchers"].([]any)[0].(map[string]any)
	assert.Equal(t, "config", fromFile["source"])
	assert.Equal(t, "/mmmq/messages", fromFile["path"])

	// Create: the README's body. It replays what order.created holds.
	create := `{"name":"billing","host":"http://localhost:8081","patterns":["order.**"]}`
	inREADME(`-d '` + create + `'`)
	created := c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: local(create), status: 201}).json(t)
	assert.Equal(t, "api", created["source"])
	assert.Equal(t, "earliest", created["start"])
	assert.Equal(t, map[string]any{"policy": "every-message"}, created["commit"])
	cons.waitFor(t, 3)
	// Its status on the topic it delivers, once every message is ACKed
	// and committed.
	var topic map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		st := c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 200}).json(t)
		require.Len(t, st["topics"], 1, "%v", st)
		topic = st["topics"].([]any)[0].(map[string]any)
		if topic["committed"] == 3.0 || time.Now().After(deadline) {
			break
		}
	}
	assert.Equal(t, "order.created", topic["topic"])
	assert.Equal(t, 3.0, topic["committed"], "%v", topic)
	assert.Equal(t, 0.0, topic["lag"])
	assert.Equal(t, "idle", topic["state"])
	assert.Equal(t, 2, len(c.do(exchange{method: "GET", path: "/mmmq/dispatchers", status: 200}).json(t)["dispatchers"].([]any)))

	// Replace: the README's body, which names no name.
	replace := `{"host":"http://localhost:8081","patterns":["order.*","pay.*"]}`
	inREADME(`-d '` + replace + `'`)
	replaced := c.do(exchange{method: "PUT", path: "/mmmq/dispatchers/billing", body: local(replace), status: 200}).json(t)
	assert.Equal(t, []any{"order.*", "pay.*"}, replaced["patterns"])
	assert.Equal(t, "billing", replaced["name"])

	// Pause and resume; a paused dispatcher's topics show state paused
	// with its checkpoints. A config dispatcher may be paused too.
	paused := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/pause", status: 200}).json(t)
	assert.Equal(t, true, paused["paused"])
	pausedTopics := c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 200}).json(t)["topics"].([]any)
	require.NotEmpty(t, pausedTopics)
	for _, pt := range pausedTopics {
		assert.Equal(t, "paused", pt.(map[string]any)["state"])
	}
	resumed := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/resume", status: 200}).json(t)
	assert.Nil(t, resumed["paused"])
	assert.Equal(t, true, c.do(exchange{method: "POST", path: "/mmmq/dispatchers/from-file/pause", status: 200}).json(t)["paused"])
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers/from-file/resume", status: 200})

	// Seek: back to the log start (redelivered), then to a time after the
	// last message (the high watermark), then the README's request.
	sought := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: `{"topic":"order.created","to":"earliest"}`, status: 200}).json(t)
	assert.Equal(t, map[string]any{"name": "billing", "topics": []any{map[string]any{"topic": "order.created", "previous": 3.0, "offset": 0.0}}}, sought)
	cons.waitFor(t, 6)
	future := fmt.Sprintf(`{"to":{"timestamp":%d}}`, time.Now().Add(time.Hour).UnixMilli())
	sought = c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: future, status: 200}).json(t)
	assert.Equal(t, 3.0, sought["topics"].([]any)[0].(map[string]any)["offset"])
	seek := `{"topic":"order.**","to":{"timestamp":1767225600000}}`
	inREADME(`-d '` + seek + `'`)
	sought = c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: seek, status: 200}).json(t)
	assert.Len(t, sought["topics"], 1)
	// A seek at a rate (one message per 1000 s: the replay stays): the
	// answer and GET show it; a seek without a rate clears it.
	paced := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: `{"to":"earliest","rate":0.001}`, status: 200}).json(t)
	wantReplay := map[string]any{"rate": 0.001, "from": 0.0, "until": 3.0}
	assert.Equal(t, wantReplay, paced["topics"].([]any)[0].(map[string]any)["replay"])
	assert.Equal(t, wantReplay, c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 200}).json(t)["topics"].([]any)[0].(map[string]any)["replay"])
	for _, body := range []string{`{"to":0,"rate":0}`, `{"to":0,"rate":-5}`, `{"to":0,"rate":1000001}`, `{"to":0,"rate":"50"}`} {
		bad := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: body, status: 400, invalid: true}).json(t)
		assert.Contains(t, bad["error"], `"rate"`, body)
	}
	cleared := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: `{"to":"latest"}`, status: 200}).json(t)
	assert.Nil(t, cleared["topics"].([]any)[0].(map[string]any)["replay"])
	assert.Nil(t, c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 200}).json(t)["topics"].([]any)[0].(map[string]any)["replay"])
	nothing := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: `{"topic":"pay.*","to":"latest"}`, status: 404}).json(t)
	assert.Contains(t, nothing["error"], "nothing moved")

	// Errors.
	unknown := c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: local(`{"name":"x","host":"http://localhost:8081","patterns":["a"],"colour":1}`), status: 400, invalid: true}).json(t)
	assert.Contains(t, unknown["error"], `"colour"`)
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: `{"host":"http://h:1","patterns":["a"]}`, status: 400, invalid: true})
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: `{"name":"x","host":"ftp://h:1","patterns":["a"]}`, status: 400})
	c.do(exchange{method: "PUT", path: "/mmmq/dispatchers/billing", body: local(`{"name":"other","host":"http://localhost:8081","patterns":["a"]}`), status: 400})
	for _, body := range []string{`{"to":"yesterday"}`, `{"to":null}`, `{"topic":"a..b","to":0}`, `{"to":0,"at":1}`} {
		c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: body, status: 400, invalid: true})
	}
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/seek", body: `{"to":1000}`, status: 400})
	c.do(exchange{method: "DELETE", path: "/mmmq/dispatchers/billing?delete-checkpoints=maybe", status: 400, invalid: true})
	for _, ex := range []exchange{
		{method: "GET", path: "/mmmq/dispatchers/nope"},
		{method: "PUT", path: "/mmmq/dispatchers/nope", body: local(`{"host":"http://localhost:8081","patterns":["a"]}`)},
		{method: "DELETE", path: "/mmmq/dispatchers/nope"},
		{method: "POST", path: "/mmmq/dispatchers/nope/pause"},
		{method: "POST", path: "/mmmq/dispatchers/nope/resume"},
		{method: "POST", path: "/mmmq/dispatchers/nope/seek", body: `{"to":"latest"}`},
	} {
		ex.status = 404
		assert.Equal(t, "NOT_FOUND", c.do(ex).json(t)["code"], "%s %s", ex.method, ex.path)
	}
	for _, ex := range []exchange{
		{method: "PUT", path: "/mmmq/dispatchers/from-file", body: local(`{"host":"http://localhost:8081","patterns":["a"]}`)},
		{method: "DELETE", path: "/mmmq/dispatchers/from-file"},
	} {
		ex.status = 409
		ro := c.do(ex).json(t)
		assert.Equal(t, "READ_ONLY", ro["code"], "%s %s", ex.method, ex.path)
		assert.Contains(t, ro["error"], "config")
	}
	for _, name := range []string{"billing", "from-file"} {
		taken := c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: local(fmt.Sprintf(`{"name":%q,"host":"http://localhost:8081","patterns":["a"]}`, name)), status: 409}).json(t)
		assert.Equal(t, "NAME_TAKEN", taken["code"], name)
	}
	huge := `{"name":"x","host":"http://h:1","patterns":["` + strings.Repeat("a", 1<<20) + `"]}`
	assert.Equal(t, "TOO_LARGE", c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: huge, status: 413, invalid: true}).json(t)["code"])

	// Delete, its checkpoints too: gone, and the name is free again.
	inREADME(`-XDELETE 'localhost:8080/mmmq/dispatchers/billing?delete-checkpoints=true'`)
	deleted := c.do(exchange{method: "DELETE", path: "/mmmq/dispatchers/billing?delete-checkpoints=true", status: 200}).json(t)
	assert.Equal(t, map[string]any{"name": "billing", "deleted": true, "checkpointsDeleted": true}, deleted)
	c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 404})
	assert.Len(t, c.do(exchange{method: "GET", path: "/mmmq/dispatchers", status: 200}).json(t)["dispatchers"], 1)
}

// TestOpenAPIValidatesDeadLetterExchanges drives the delivery settings and
// dead letters through a running broker, validating every request and
// answer against the document: a dispatcher created with every setting
// (its secret and header redacted in the answers), replaced with what GET
// showed, its NACKed messages dead-lettered (the status counts them), then
// redriven by range and whole; bad redrive bodies, an unknown dispatcher
// and one whose dead letters are off.
func TestOpenAPIValidatesDeadLetterExchanges(t *testing.T) {
	nack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"NACK"}`)
	}))
	defer nack.Close()
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) { d.MaxResends = 0 })
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	c := newAPIClient(t, base)
	for i := range 3 {
		st, body := publish(t, base, "order.created", i)
		require.Equal(t, 200, st, "%v", body)
	}

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	const signingKey = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	create := fmt.Sprintf(`{"name":"billing","host":%q,"patterns":["order.**"],"ack-mode":"body","max-abnormal-attempts":5,`+
		`"max-abnormal-duration":"1h","backoff-jitter":true,"signing-secrets":[%q],"signing-keys":[%q],"headers":{"Authorization":"Bearer 0123456789"},`+
		`"max-in-flight":2,"batch":{"max-messages":2,"max-wait":"10ms"},"rate-limit":1000}`, nack.URL, secret, signingKey)
	created := c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: create, status: 201})
	assert.NotContains(t, string(created.body), "MfKQ9r8G")
	assert.NotContains(t, string(created.body), "VEVTVFNJR05J")
	keys := c.do(exchange{method: "GET", path: "/.well-known/mmmq/webhook-keys", status: 200})
	assert.JSONEq(t, `{"keys":[{"dispatcher":"billing","kid":"808d1060236c20d2","alg":"ed25519","key":"whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="}]}`, string(keys.body))
	assert.NotContains(t, string(created.body), "0123456789")
	var st map[string]any
	require.Eventually(t, func() bool {
		st = c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 200}).json(t)
		topics := st["topics"].([]any)
		return len(topics) == 1 && topics[0].(map[string]any)["deadLettered"] == 3.0
	}, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, "dead-letter.billing", st["deadLetterTopic"])
	assert.Equal(t, 3.0, st["topics"].([]any)[0].(map[string]any)["exhausted"])
	assert.Equal(t, map[string]any{"limit": 1000.0, "burst": 1000.0, "waiting": 0.0}, st["rateLimit"])

	// GET, edit, PUT: the redacted secret and header are kept.
	spec := st
	for _, k := range []string{"source", "topics", "deadLetterTopic", "rateLimit"} {
		delete(spec, k)
	}
	spec["paused"] = true
	spec["max-in-flight"] = 1.0
	body, _ := json.Marshal(spec)
	replaced := c.do(exchange{method: "PUT", path: "/mmmq/dispatchers/billing", body: string(body), status: 200}).json(t)
	assert.Equal(t, st["signing-secrets"], replaced["signing-secrets"])
	assert.Equal(t, map[string]any{"Authorization": "(redacted)"}, replaced["headers"])

	// Redrive the first dead letter, then the rest.
	first := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", body: `{"from":0,"to":1}`, status: 200}).json(t)
	assert.Equal(t, 1.0, first["next"])
	require.Len(t, first["redriven"], 1)
	assert.Equal(t, map[string]any{"deadLetterOffset": 0.0, "topic": "order.created", "offset": 3.0}, first["redriven"].([]any)[0])
	rest := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", body: `{"from":1}`, status: 200}).json(t)
	assert.Len(t, rest["redriven"], 2)
	page := c.do(exchange{method: "GET", path: "/topics/order.created/messages?offset=3", status: 200}).json(t)
	assert.Len(t, page["messages"], 3, "the three dead letters are in their topic again")
	all := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", status: 200}).json(t)
	assert.Equal(t, 3.0, all["to"])
	// At a rate: the answer names the replay of order.created (the
	// dispatcher is paused: it stays).
	paced := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", body: `{"rate":0.5}`, status: 200}).json(t)
	assert.Equal(t, []any{map[string]any{"topic": "order.created", "rate": 0.5, "from": 9.0, "until": 12.0}}, paced["replay"])
	replays := c.do(exchange{method: "GET", path: "/mmmq/dispatchers/billing", status: 200}).json(t)["topics"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"rate": 0.5, "from": 9.0, "until": 12.0}, replays["replay"])
	for _, body := range []string{`{"rate":0}`, `{"rate":2000000}`, `{"rate":"x"}`} {
		bad := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", body: body, status: 400, invalid: true}).json(t)
		assert.Contains(t, bad["error"], `"rate"`, body)
	}

	// Errors; the document refuses the bad bodies too.
	for _, body := range []string{`{"from":-1}`, `{"to":1.5}`, `{"from":"0"}`, `{"from":0,"count":1}`, `[]`} {
		bad := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", body: body, status: 400, invalid: true}).json(t)
		assert.Equal(t, "BAD_REQUEST", bad["code"], body)
	}
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers/billing/redrive", body: `{"to":99}`, status: 400})
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers/nope/redrive", status: 404})
	c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: fmt.Sprintf(`{"name":"off","host":%q,"patterns":["x"],"dead-letter":""}`, nack.URL), status: 201})
	off := c.do(exchange{method: "POST", path: "/mmmq/dispatchers/off/redrive", status: 409}).json(t)
	assert.Equal(t, "NO_DEAD_LETTERS", off["code"])
	for _, body := range []string{
		`{"name":"x","host":"http://h:1","patterns":["a"],"dead-letter":"a..b"}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"ack-mode":"maybe"}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"signing-secrets":["secret"]}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"max-in-flight":2000}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"batch":{"max-messages":1,"size":2}}`,
	} {
		c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: body, status: 400, invalid: true})
	}
	// Refused by the broker, not by the document.
	for _, body := range []string{
		`{"name":"x","host":"http://h:1","patterns":["a"],"headers":{"Content-Type":"text/plain"}}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"signing-secrets":["whsec_c2hvcnQ="]}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"cloudevents":true,"batch":{"max-messages":2}}`,
		`{"name":"x","host":"http://h:1","patterns":["a"],"headers":{"X-A":"(redacted)"}}`,
	} {
		c.do(exchange{method: "POST", path: "/mmmq/dispatchers", body: body, status: 400})
	}
}

// validateAnswer validates a JSON answer with status and body to method
// path against the document's schema for that operation and status.
func validateAnswer(t *testing.T, router routers.Router, method, path string, status int, body string) error {
	t.Helper()
	req, err := http.NewRequest(method, "http://localhost:8080"+path, nil)
	require.NoError(t, err)
	route, params, err := router.FindRoute(req)
	require.NoError(t, err, "%s %s: no operation of %s matches", method, path, openAPIFile)
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: validation},
		Status:                 status,
		Header:                 http.Header{"Content-Type": {"application/json"}},
		Options:                validation,
	}
	out.SetBodyBytes([]byte(body))
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// TestOpenAPIValidatesREADMEAnswers: the answers the README shows validate
// against the document's schema for that operation and status.
func TestOpenAPIValidatesREADMEAnswers(t *testing.T) {
	router, err := gorillamux.NewRouter(loadOpenAPI(t))
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
		{"POST", "/topics/order.created/groups/billing/seek", 200, `{"topic":"order.created","group":"billing","committed":42,"previous":57}`},
		{"DELETE", "/topics/t", 200, `{"topic":"t","deleted":true,"scheduledDropped":0}`},
		{"POST", "/topics/order.created/reopen", 200, `{"topic":"order.created","highWatermark":17,"reopened":true}`},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			require.Contains(t, md, tc.body, "README example changed: update this test")
			require.NoError(t, validateAnswer(t, router, tc.method, tc.path, tc.status, tc.body))
		})
	}
}

// TestOpenAPIAdminSchemasAreStrict: the schemas of the dispatcher and
// group answers accept what the broker sends and refuse what it does not
// (a member too many or missing, a value out of its set), so that the
// real-exchange tests above fail when an answer changes shape.
func TestOpenAPIAdminSchemasAreStrict(t *testing.T) {
	router, err := gorillamux.NewRouter(loadOpenAPI(t))
	require.NoError(t, err)
	const disp = `"name":"billing","host":"http://localhost:8081","patterns":["order.**"],"path":"/mmmq/messages","timeout":"30s","commit":{"policy":"every-message"},"start":"earliest","dead-letter":"dead-letter.billing","ack-mode":"body","max-in-flight":1,"ordering":"topic"`
	const topic = `{"topic":"order.created","committed":2,"highWatermark":3,"lag":1,"oldestUnackedAgeSeconds":0.5,"state":"backoff","attempt":2,"delivered":2,"exhausted":1,"deadLettered":1,"lastError":"503","lastErrorAt":"2026-01-01T00:00:00Z","nextRetry":"2026-01-01T00:00:01.5Z"}`
	// Every delivery setting, as the broker shows it: secrets and header
	// values redacted.
	const delivery = `,"ack-mode":"status","max-abnormal-attempts":3,"max-abnormal-duration":"1m0s","backoff-jitter":true,` +
		`"signing-secrets":["whsec_\u2026(redacted, fingerprint f74e1720)"],"signing-keys":["whsk_\u2026(redacted, kid 808d1060236c20d2)"],` +
		`"headers":{"Authorization":"(redacted)"},"cloudevents":true,` +
		`"batch":{"max-messages":10,"max-bytes":1048576,"max-wait":"50ms"}`
	const redriven = `{"deadLetterTopic":"dead-letter.billing","from":0,"to":3,"next":3,"redriven":[{"deadLetterOffset":0,"topic":"order.created","offset":7}],"skipped":[{"offset":1,"reason":"not a dead letter"}]}`
	for _, tc := range []struct {
		name, method, path string
		status             int
		body               string
		ok                 bool
	}{
		{"listed", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"source":"api"}]}`, true},
		{"listed paused", "POST", "/mmmq/dispatchers/billing/pause", 200, `{` + disp + `,"paused":true,"source":"config"}`, true},
		{"listed from Go code, no path or timeout", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{"name":"g","host":"http://h:1","patterns":["a"],"commit":{"policy":"interval","interval":"1s","max-count":10},"start":"latest","dead-letter":"","ack-mode":"body","max-in-flight":1,"ordering":"topic","source":"go"}]}`, true},
		{"listed with every delivery setting", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + delivery + `,"source":"api"}]}`, true},
		{"listed without dead-letter", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + strings.Replace(disp, `"dead-letter":"dead-letter.billing",`, "", 1) + `,"source":"api"}]}`, false},
		{"listed with an invalid dead-letter topic", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + strings.Replace(disp, `"dead-letter.billing"`, `"a..b"`, 1) + `,"source":"api"}]}`, false},
		{"listed with an unknown ack-mode", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + strings.Replace(disp, `"body"`, `"json"`, 1) + `,"source":"api"}]}`, false},
		{"listed with a signing secret shown", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"signing-secrets":["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"],"source":"api"}]}`, false},
		{"webhook keys", "GET", "/.well-known/mmmq/webhook-keys", 200, `{"keys":[{"dispatcher":"billing","kid":"808d1060236c20d2","alg":"ed25519","key":"whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="}]}`, true},
		{"no webhook keys", "GET", "/.well-known/mmmq/webhook-keys", 200, `{"keys":[]}`, true},
		{"webhook keys with a private key", "GET", "/.well-known/mmmq/webhook-keys", 200, `{"keys":[{"dispatcher":"billing","kid":"808d1060236c20d2","alg":"ed25519","key":"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="}]}`, false},
		{"webhook keys of another alg", "GET", "/.well-known/mmmq/webhook-keys", 200, `{"keys":[{"dispatcher":"billing","kid":"808d1060236c20d2","alg":"rsa","key":"whpk_ZlN4eg7dSSqi0moX9hQUk3orrOouK3QVQSlJa248c/g="}]}`, false},
		{"listed with a signing key shown", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"signing-keys":["whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="],"source":"api"}]}`, false},
		{"listed with a header value shown", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"headers":{"Authorization":"Bearer x"},"source":"api"}]}`, false},
		{"listed with backoff-jitter false", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"backoff-jitter":false,"source":"api"}]}`, false},
		{"listed with tls", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + strings.Replace(disp, "http://", "https://", 1) + `,"tls":{"ca-file":"/etc/mmmq/ca.pem","cert-file":"/etc/mmmq/c.pem","key-file":"/etc/mmmq/k.pem","server-name":"b","insecure-skip-verify":true},"source":"api"}]}`, true},
		{"listed with an unknown tls member", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"tls":{"ca":"/etc/mmmq/ca.pem"},"source":"api"}]}`, false},
		{"listed with an empty tls", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"tls":{},"source":"api"}]}`, false},
		{"listed with a batch member too many", "GET", "/mmmq/dispatchers", 200, `{"dispatchers":[{` + disp + `,"batch":{"max-messages":1,"max-bytes":1,"size":1},"source":"api"}]}`, false},
		{"listed without source", "POST", "/mmmq/dispatchers", 201, `{` + disp + `}`, false},
		{"listed with paused false", "POST", "/mmmq/dispatchers/billing/resume", 200, `{` + disp + `,"paused":false,"source":"api"}`, false},
		{"listed with an unknown source", "PUT", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"file"}`, false},
		{"listed with a member too many", "PUT", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","topics":[]}`, false},
		{"status", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":"dead-letter.billing","topics":[` + topic + `]}`, true},
		{"status with ordering key", "GET", "/mmmq/dispatchers/billing", 200, `{` + strings.Replace(disp, `"ordering":"topic"`, `"ordering":"key","max-unacked":1000`, 1) + `,"source":"api","deadLetterTopic":"","topics":[` + strings.Replace(topic, `"attempt"`, `"keys":{"inFlight":2,"parkedKeys":1,"parked":[{"key":"customer-7","offset":2,"since":"2026-01-01T00:00:00Z","attempts":3,"lastError":"503","nextRetry":"2026-01-01T00:00:04Z"}],"unacked":1000,"maxUnacked":1000,"heldBy":"customer-7"},"attempt"`, 1) + `]}`, true},
		{"status with a parked key member too many", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":"","topics":[` + strings.Replace(topic, `"attempt"`, `"keys":{"inFlight":0,"parkedKeys":1,"parked":[{"key":"k","offset":2,"since":"2026-01-01T00:00:00Z","attempts":3,"nextRetry":"2026-01-01T00:00:04Z","n":1}],"unacked":3,"maxUnacked":10},"attempt"`, 1) + `]}`, false},
		{"status without topics", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":""}`, false},
		{"status without deadLetterTopic", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","topics":[` + topic + `]}`, false},
		{"status without deadLettered", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":"dead-letter.billing","topics":[` + strings.Replace(topic, `"deadLettered":1,`, "", 1) + `]}`, false},
		{"status with a member too many", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":"","topics":[],"workers":1}`, false},
		{"status with an unknown state", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":"","topics":[` + strings.Replace(topic, "backoff", "stuck", 1) + `]}`, false},
		{"status with a topic member too many", "GET", "/mmmq/dispatchers/billing", 200, `{` + disp + `,"source":"api","deadLetterTopic":"","topics":[` + strings.Replace(topic, `"attempt"`, `"running":true,"attempt"`, 1) + `]}`, false},
		{"redriven", "POST", "/mmmq/dispatchers/billing/redrive", 200, redriven, true},
		{"redriven without next", "POST", "/mmmq/dispatchers/billing/redrive", 200, strings.Replace(redriven, `"next":3,`, "", 1), false},
		{"redriven with a member too many", "POST", "/mmmq/dispatchers/billing/redrive", 200, strings.Replace(redriven, `"offset":7}`, `"offset":7,"id":"x"}`, 1), false},
		{"redriven, a skip without reason", "POST", "/mmmq/dispatchers/billing/redrive", 200, strings.Replace(redriven, `,"reason":"not a dead letter"`, "", 1), false},
		{"no dead letters", "POST", "/mmmq/dispatchers/billing/redrive", 409, `{"acknowledgement":"NACK","error":"off","code":"NO_DEAD_LETTERS"}`, true},
		{"deleted", "DELETE", "/mmmq/dispatchers/billing", 200, `{"name":"billing","deleted":true,"checkpointsDeleted":false}`, true},
		{"deleted without checkpointsDeleted", "DELETE", "/mmmq/dispatchers/billing", 200, `{"name":"billing","deleted":true}`, false},
		{"sought", "POST", "/mmmq/dispatchers/billing/seek", 200, `{"name":"billing","topics":[{"topic":"order.created","previous":3,"offset":0}]}`, true},
		{"sought without previous", "POST", "/mmmq/dispatchers/billing/seek", 200, `{"name":"billing","topics":[{"topic":"order.created","offset":0}]}`, false},
		{"read-only", "DELETE", "/mmmq/dispatchers/from-file", 409, `{"acknowledgement":"NACK","error":"config","code":"READ_ONLY"}`, true},
		{"unknown code", "DELETE", "/mmmq/dispatchers/from-file", 409, `{"acknowledgement":"NACK","error":"config","code":"READONLY"}`, false},
		{"expired seek", "POST", "/mmmq/dispatchers/billing/seek", 410, `{"acknowledgement":"NACK","error":"expired","code":"OFFSET_EXPIRED","startOffset":5}`, true},
		{"expired seek without startOffset", "POST", "/mmmq/dispatchers/billing/seek", 410, `{"acknowledgement":"NACK","error":"expired","code":"OFFSET_EXPIRED"}`, false},
		{"groups", "GET", "/topics/t/groups", 200, `{"topic":"t","highWatermark":9,"startOffset":2,"groups":[{"group":"a","committed":0,"lag":7,"held":true,"leaseExpiresInMs":29000},{"group":"b","committed":9,"lag":0,"held":false}]}`, true},
		{"held group without its lease", "GET", "/topics/t/groups", 200, `{"topic":"t","highWatermark":9,"startOffset":2,"groups":[{"group":"a","committed":0,"lag":7,"held":true}]}`, false},
		{"free group with a lease", "GET", "/topics/t/groups", 200, `{"topic":"t","highWatermark":9,"startOffset":2,"groups":[{"group":"a","committed":0,"lag":7,"held":false,"leaseExpiresInMs":1}]}`, false},
		{"group sought with a member too many", "POST", "/topics/t/groups/g/seek", 200, `{"topic":"t","group":"g","committed":1,"previous":0,"session":"x"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := validateAnswer(t, router, tc.method, tc.path, tc.status, tc.body)
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err, "the document accepts an answer the broker never sends")
			}
		})
	}
}
