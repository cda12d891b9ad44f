package app_test

// Hostile HTTP input: every test runs against a
// real listening broker, most of them over raw TCP so that the client
// cannot tidy up what it sends.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// hostOf is the host:port of a base URL.
func hostOf(base string) string { return strings.TrimPrefix(base, "http://") }

// rawExchange writes raw to a new connection, then (after optional extra
// actions by after) reads one response; the connection is closed on return.
func rawExchange(t *testing.T, base, raw string, after func(net.Conn)) (*http.Response, []byte, error) {
	t.Helper()
	c, err := net.Dial("tcp", hostOf(base))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(15*time.Second)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	if after != nil {
		after(c)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// requireJSONNACK checks a raw answer: status, JSON NACK with code.
func requireJSONNACK(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, "body %q", body)
	var eb contract.ErrorBody
	require.NoError(t, json.Unmarshal(body, &eb), "error answer is not JSON: %q", body)
	assert.Equal(t, "NACK", eb.Acknowledgement)
	assert.Equal(t, code, eb.Code)
	assert.NotEmpty(t, eb.Error)
}

// requireNoTopics checks that nothing exists on disk under e.root and the
// broker lists no topic.
func requireNoTopics(t *testing.T, e *hostileEnv) {
	t.Helper()
	assert.Empty(t, dataEntries(t, e.root), "nothing may be created on disk")
	resp, err := http.DefaultClient.Do(newRequest(t, http.MethodGet, e.base+"/topics", e.token, nil))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	defer resp.Body.Close()
	var out struct{ Topics []httpapi.TopicInfo }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	assert.Empty(t, out.Topics)
}

// hostileMode is where a hostile test's requests stand with
// authentication: off, or on (a token entry configured) with the hostile
// requests carrying a valid token or none.
type hostileMode struct {
	name string
	auth bool // a token entry is configured
	send bool // the hostile requests carry its token
}

var hostileModes = []hostileMode{
	{name: "auth off"},
	{name: "auth on, valid token", auth: true, send: true},
	{name: "auth on, no token", auth: true},
}

// forHostileModes runs f as a subtest in each of hostileModes.
func forHostileModes(t *testing.T, f func(t *testing.T, m hostileMode)) {
	for _, m := range hostileModes {
		t.Run(m.name, func(t *testing.T) { f(t, m) })
	}
}

// hostileEnv is a running broker of the hostile tests.
type hostileEnv struct {
	base, root, parent string
	mode               hostileMode
	// token is valid for everything when auth is on ("" when off): the
	// legitimate requests and the checks use it.
	token string
}

// sent is the token the hostile requests carry ("" for none).
func (e *hostileEnv) sent() string {
	if e.mode.send {
		return e.token
	}
	return ""
}

// authLine is the header line of a raw hostile request ("" without a token).
func (e *hostileEnv) authLine() string {
	if e.sent() == "" {
		return ""
	}
	return "Authorization: Bearer " + e.sent() + "\r\n"
}

// refused reports whether the hostile requests are refused 401 (auth on,
// no token) whatever else is wrong with them.
func (e *hostileEnv) refused() bool { return e.mode.auth && !e.mode.send }

// requireRefusedOr checks a raw answer: 401 UNAUTHORIZED with
// WWW-Authenticate when the hostile requests are refused, else status and
// code.
func (e *hostileEnv) requireRefusedOr(t *testing.T, resp *http.Response, body []byte, status int, code string) {
	t.Helper()
	if e.refused() {
		requireJSONNACK(t, resp, body, http.StatusUnauthorized, contract.CodeUnauthorized)
		assert.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
		return
	}
	requireJSONNACK(t, resp, body, status, code)
}

// startHostile starts a broker whose data root is <tmp>/data, so that a
// path escaping the root would be visible in <tmp>, with a token entry
// when m.auth.
func startHostile(t *testing.T, m hostileMode, tune func(c *config.Config)) *hostileEnv {
	e := &hostileEnv{parent: t.TempDir(), mode: m}
	e.root = filepath.Join(e.parent, "data")
	cfg := testConfig(t, e.root)
	if m.auth {
		ts := tokenSet{}
		config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
			a.Tokens = []auth.TokenConfig{ts.entry("hostile", allow(contract.Actions, nil, nil))}
		})
		e.token = ts["hostile"]
	}
	if tune != nil {
		tune(cfg)
	}
	a, base := startBroker(t, cfg)
	t.Cleanup(a.RequireStop)
	e.base = base
	return e
}

// hostileBroker is startHostile with auth off.
func hostileBroker(t *testing.T, tune func(c *config.Config)) (base, root, parent string) {
	e := startHostile(t, hostileModes[0], tune)
	return e.base, e.root, e.parent
}

// TestHostileTopics: path traversal, encoded traversal, empty segments, NUL,
// over-long and non-string topics are 400 JSON NACKs and create nothing,
// neither under the data root nor beside it; the same names in the read
// path are refused too.
func TestHostileTopics(t *testing.T) {
	base, root, parent := hostileBroker(t, nil)
	long := strings.Repeat("a", 300)
	for _, topic := range []string{
		`"../x"`, `"..\/x"`, `"%2e%2e/x"`, `"%2e%2e%2fx"`, `"a..b"`, `".."`, `"."`, `"/etc/passwd"`,
		`"a/../../x"`, `"a\\b"`, `"a\u0000b"`, `"\u0000"`, `"` + long + `"`, `"x.` + long + `"`,
		`""`, `" a"`, `"a\n"`, `"é"`, `"a:b"`,
		`123`, `true`, `null`, `[]`, `["a"]`, `{}`, `{"name":"../x"}`, `{"name":5}`, `{"name":null}`,
	} {
		body := `{"topic":` + topic + `,"content":1}`
		for _, path := range []string{"/messages", "/mmmq/messages"} {
			st, out := postJSON(t, base+path, []byte(body))
			requireNACK(t, st, out, http.StatusBadRequest, contract.CodeBadRequest)
		}
		// A batch answers with its own shape (BatchResponse), per message.
		st, out := postJSON(t, base+"/messages/batch", []byte("["+body+"]"))
		require.Equal(t, http.StatusBadRequest, st, "batch %v", out)
		assert.Equal(t, "NACK", out["acknowledgement"])
	}
	// The read path: traversal in the URL never reaches the filesystem (a
	// dot-dot path is cleaned and redirected by the router, 301, which is
	// not followed here).
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"..%2Fx", "%2e%2e", "..", "a..b", "a%00b", long} {
		resp, err := noFollow.Get(base + "/topics/" + p + "/messages")
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Contains(t, []int{301, 400, 404}, resp.StatusCode, "GET %s: %q", p, b)
	}
	requireNoTopics(t, &hostileEnv{base: base, root: root})
	ents, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, ents, 1, "nothing beside the data root")
	assert.Equal(t, "data", ents[0].Name())
}

// TestContentLengthLies: a body shorter than its Content-Length is 408
// TIMEOUT once server.read-timeout passes, or 400 BAD_REQUEST when the
// client closes its side first; a body longer than its Content-Length is
// cut to the declared length, which is then invalid JSON (400), and the
// surplus is not taken as a publish: net/http reads it as the next request
// and refuses it as malformed. An invalid Content-Length is refused by
// net/http itself (400, plain text) before the broker's handler runs. Every
// answer is a 400 or a 408, and nothing is stored. With auth on and no
// token every request that reaches the broker is 401 before its body is
// read, and the connection closed (the surplus is never read): its
// server.read-timeout is a minute there, so a broker that waited for the
// missing bytes would miss rawExchange's deadline. With a valid token it is
// as with auth off.
func TestContentLengthLies(t *testing.T) {
	forHostileModes(t, testContentLengthLies)
}

func testContentLengthLies(t *testing.T, m hostileMode) {
	e := startHostile(t, m, func(c *config.Config) {
		c.Server.ReadTimeout = time.Second
		if m.auth && !m.send {
			c.Server.ReadTimeout = time.Minute
		}
	})
	base := e.base
	body := `{"topic":"lies.topic","content":{"a":1}}`
	hdr := func(n int) string {
		return fmt.Sprintf("POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n%sContent-Length: %d\r\n\r\n", e.authLine(), n)
	}

	t.Run("declared larger, client waits", func(t *testing.T) {
		resp, b, err := rawExchange(t, base, hdr(len(body)+100)+body, nil)
		require.NoError(t, err, "the broker answers once server.read-timeout has passed (without a token: at once, without the body)")
		e.requireRefusedOr(t, resp, b, http.StatusRequestTimeout, contract.CodeTimeout)
		if !e.refused() {
			assert.Contains(t, string(b), "server.read-timeout")
		}
	})
	t.Run("declared larger, client closes its side", func(t *testing.T) {
		resp, b, err := rawExchange(t, base, hdr(len(body)+100)+body, func(c net.Conn) {
			require.NoError(t, c.(*net.TCPConn).CloseWrite())
		})
		require.NoError(t, err)
		e.requireRefusedOr(t, resp, b, http.StatusBadRequest, contract.CodeBadRequest)
	})
	t.Run("declared smaller", func(t *testing.T) {
		// The surplus is the whole valid body again: it must not be stored.
		raw := hdr(20) + body + "\r\n\r\n" + body
		rs := rawResponses(t, base, raw)
		if e.refused() {
			require.Len(t, rs, 1, "401, then the connection ends: the body and the surplus are not read")
			e.requireRefusedOr(t, rs[0].resp, rs[0].body, 0, "")
			return
		}
		require.Len(t, rs, 2, "one answer for the cut body, one for the surplus, then the connection ends")
		requireJSONNACK(t, rs[0].resp, rs[0].body, http.StatusBadRequest, contract.CodeBadRequest)
		assert.Contains(t, string(rs[0].body), "invalid JSON")
		assert.Equal(t, http.StatusBadRequest, rs[1].resp.StatusCode, "the surplus is a malformed request: %q", rs[1].body)
	})
	t.Run("invalid Content-Length", func(t *testing.T) {
		for _, cl := range []string{"-1", "abc", "1, 2", "99999999999999999999"} {
			raw := "POST /messages HTTP/1.1\r\nHost: x\r\n" + e.authLine() + "Content-Length: " + cl + "\r\n\r\n" + body
			resp, b, err := rawExchange(t, base, raw, nil)
			require.NoError(t, err, "Content-Length %q", cl)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "Content-Length %q: %q", cl, b)
			// net/http's own answer: the broker's handler never ran.
			assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"), "Content-Length %q: %q", cl, b)
		}
	})
	requireNoTopics(t, e)
}

// rawResponse is one answer read by rawResponses.
type rawResponse struct {
	resp *http.Response
	body []byte
}

// rawResponses writes raw to a new connection and reads every answer until
// the broker closes it.
func rawResponses(t *testing.T, base, raw string) []rawResponse {
	t.Helper()
	c, err := net.Dial("tcp", hostOf(base))
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(15*time.Second)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	var out []rawResponse
	for {
		if _, err := br.Peek(1); errors.Is(err, io.EOF) {
			return out
		}
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err, "answer %d", len(out)+1)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		out = append(out, rawResponse{resp, b})
	}
}

// zeros is an endless reader of 'a' bytes that allocates nothing per call.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

// heapInUse forces two GCs and returns the live heap in bytes.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestOversizedBodies413FlatMemory: bodies over server.max-body-bytes are
// 413 TOO_LARGE, with a Content-Length (refused before reading) or chunked
// (cut by the reader at the limit); nothing is stored. Memory: 200 bodies
// of 4 MiB (800 MiB in all) allocate, client and broker together, a small
// fraction of one body per request (a handler that read a whole body before
// refusing it would allocate at least 4 MiB per request), and the live heap
// afterwards has not grown by more than a few buffers. With auth on and no
// token every one is 401 before its body is read (the headers alone get
// the answer, with a Content-Length or chunked), with the same flat
// memory; with a valid token it is as with auth off.
func TestOversizedBodies413FlatMemory(t *testing.T) {
	forHostileModes(t, testOversizedBodies)
}

func testOversizedBodies(t *testing.T, m hostileMode) {
	const max = 64 << 10
	e := startHostile(t, m, func(c *config.Config) {
		c.Server.MaxBodyBytes = max
		config.EditSection(c, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) { seg.MaxRecordBytes = max + 1024 })
	})
	base := e.base
	prefix := `{"topic":"big.topic","content":"`
	// send writes the request on its own connection from another
	// goroutine and reads the answer here. http.Client is not used: when the
	// server answers before the body is sent and closes, the client's write
	// fails (broken pipe, connection reset) and Do may return that error
	// instead of the answer, depending on timing — on a loaded machine it
	// did. Write errors are the expected end of an oversized upload; the
	// answer is what is checked.
	send := func(t *testing.T, path string, size int64, chunked bool) (int, []byte) {
		t.Helper()
		var body io.Reader = io.MultiReader(strings.NewReader(prefix), io.LimitReader(zeros{}, size-int64(len(prefix))-2), strings.NewReader(`"}`))
		req := newRequest(t, http.MethodPost, base+path, e.sent(), body)
		if chunked {
			req.ContentLength = -1 // Transfer-Encoding: chunked
		} else {
			req.ContentLength = size
		}
		conn, err := net.Dial("tcp", hostOf(base))
		require.NoError(t, err)
		defer conn.Close()
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			_ = req.Write(conn) // ends early once the server has answered and closed
		}()
		defer func() { conn.Close(); <-wrote }()
		resp, err := http.ReadResponse(bufio.NewReader(conn), req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	check := func(t *testing.T, st int, b []byte) {
		t.Helper()
		if e.refused() {
			var eb contract.ErrorBody
			require.Equal(t, http.StatusUnauthorized, st, "body %q", b)
			require.NoError(t, json.Unmarshal(b, &eb))
			assert.Equal(t, contract.CodeUnauthorized, eb.Code)
			return
		}
		check413(t, st, b, "server.max-body-bytes")
	}
	for _, path := range []string{"/messages", "/messages/batch"} {
		for _, chunked := range []bool{false, true} {
			st, b := send(t, path, max+1, chunked)
			check(t, st, b)
		}
	}
	// Answered from the headers alone, the body never sent: a declared
	// 4 MiB (413, or 401 without a token), and without a token a chunked
	// body too (401). A broker that read first would wait for the body
	// until the exchange's deadline.
	for _, framing := range []string{"Content-Length: 4194304", "Transfer-Encoding: chunked"} {
		if framing == "Transfer-Encoding: chunked" && !e.refused() {
			continue // with a token the chunks are read up to the limit
		}
		raw := "POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + e.authLine() + framing + "\r\n\r\n"
		resp, b, err := rawExchange(t, base, raw, nil)
		require.NoError(t, err, "%s, no body: the answer must come from the headers", framing)
		check(t, resp.StatusCode, b)
	}
	// Just at the limit is accepted: the limit is the body, not less.
	st, b := send(t, "/messages", max, false)
	if e.refused() {
		check(t, st, b)
	} else {
		require.Equal(t, 200, st, "%q", b)
	}

	const workers, each, size = 8, 25, 4 << 20
	before := heapInUse()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				st, b := send(t, "/messages", size, (w+i)%2 == 0)
				check(t, st, b)
			}
		}()
	}
	wg.Wait()
	runtime.ReadMemStats(&ms1)
	perRequest := (ms1.TotalAlloc - ms0.TotalAlloc) / (workers * each)
	after := heapInUse()
	growth := int64(after) - int64(before)
	t.Logf("%s: %d oversized requests of %d KiB: %d KiB allocated per request; live heap %d KiB before, %d KiB after",
		m.name, workers*each, size>>10, perRequest>>10, before>>10, after>>10)
	assert.Less(t, perRequest, uint64(size/8), "allocation per oversized request: the body must not be buffered")
	assert.Less(t, growth, int64(8<<20), "the live heap stays flat")
	st, page, _ := readTopicAs(t, base, "big.topic", e.token)
	if e.refused() {
		assert.Equal(t, http.StatusNotFound, st, "nothing was stored")
		return
	}
	require.Equal(t, 200, st)
	assert.Len(t, page.Messages, 1, "only the body at the limit was stored")
}

// TestRecordTooLarge413: a body under server.max-body-bytes whose stored
// record is over mmmq.broker.segment.max-record-bytes is 413 TOO_LARGE and
// stores nothing, alone or in a batch.
func TestRecordTooLarge413(t *testing.T) {
	base, _, _ := hostileBroker(t, func(c *config.Config) {
		config.EditSection(c, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) { seg.MaxRecordBytes = 1024 })
	})
	body := `{"topic":"rec.big","content":"` + strings.Repeat("a", 2048) + `"}`
	st, out := postJSON(t, base+"/messages", []byte(body))
	requireNACK(t, st, out, http.StatusRequestEntityTooLarge, contract.CodeTooLarge)
	assert.Contains(t, out["error"], "over the limit of 1024 bytes (mmmq.broker.segment.max-record-bytes)")
	st, out = postJSON(t, base+"/messages/batch", []byte(`[{"topic":"rec.big","content":1},`+body+`]`))
	require.Equal(t, http.StatusRequestEntityTooLarge, st, out)
	assert.Contains(t, fmt.Sprint(out), "nothing stored")
	st, _, _ = readTopic(t, base, "rec.big")
	assert.Equal(t, http.StatusNotFound, st, "validated before anything is written: the topic was never created")
}

// TestReadPageBounded: GET /topics/{t}/messages?limit=1000 on a topic of
// large records answers a bounded page (a hostile reader cannot make the
// broker hold limit × max-record-bytes in memory for one request), and
// paging with nextOffset returns every message once, in order.
func TestReadPageBounded(t *testing.T) {
	base, _, _ := hostileBroker(t, nil)
	const n, size = 12, 900 << 10 // 12 records of 900 KiB: 10.5 MiB
	pad := strings.Repeat("r", size)
	for i := range n {
		st, out := publishAt(t, base, "page.big", map[string]any{"n": i, "pad": pad}, "")
		require.Equal(t, 200, st, out)
	}
	next, seen := int64(0), 0
	for pages := 0; next < n; pages++ {
		require.Less(t, pages, n, "paging makes progress")
		resp, err := http.Get(fmt.Sprintf("%s/topics/page.big/messages?offset=%d&limit=1000", base, next))
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode)
		assert.Less(t, len(b), 8<<20, "one page is bounded")
		var page readPage
		require.NoError(t, json.Unmarshal(b, &page))
		require.NotEmpty(t, page.Messages)
		for _, it := range page.Messages {
			require.EqualValues(t, seen, it.Offset)
			seen++
		}
		next = page.NextOffset
	}
	assert.Equal(t, n, seen)
}

// check413 checks a 413 TOO_LARGE JSON NACK whose error contains want.
func check413(t *testing.T, st int, b []byte, want string) {
	t.Helper()
	require.Equal(t, http.StatusRequestEntityTooLarge, st, "body %q", b)
	var eb contract.ErrorBody
	require.NoError(t, json.Unmarshal(b, &eb))
	assert.Equal(t, "NACK", eb.Acknowledgement)
	assert.Equal(t, contract.CodeTooLarge, eb.Code)
	assert.Contains(t, eb.Error, want)
}

// TestMalformedBodies400: malformed JSON, invalid UTF-8 and deeply nested
// JSON are 400 JSON NACKs, each answered quickly; nothing is stored. With
// auth on and no token they are 401, with a valid token 400.
func TestMalformedBodies400(t *testing.T) {
	forHostileModes(t, testMalformedBodies)
}

func testMalformedBodies(t *testing.T, m hostileMode) {
	e := startHostile(t, m, nil)
	deep := strings.Repeat("[", 100_000)
	deepClosed := deep + strings.Repeat("]", 100_000)
	deepObj := strings.Repeat(`{"a":`, 50_000) + "1" + strings.Repeat("}", 50_000)
	for name, body := range map[string]string{
		"empty":                    ``,
		"not json":                 `hello`,
		"truncated":                `{"topic":"m.t","content":`,
		"trailing garbage":         `{"topic":"m.t","content":1}x`,
		"two values":               `{"topic":"m.t","content":1}{"topic":"m.t","content":2}`,
		"array":                    `[{"topic":"m.t","content":1}]`,
		"string":                   `"m.t"`,
		"null":                     `null`,
		"no content":               `{"topic":"m.t"}`,
		"bad headers":              `{"topic":"m.t","content":1,"headers":{"a":1}}`,
		"bad id":                   `{"topic":"m.t","content":1,"id":5}`,
		"empty id":                 `{"topic":"m.t","content":1,"id":""}`,
		"invalid UTF-8 in content": "{\"topic\":\"m.t\",\"content\":\"\xff\xfe\"}",
		"invalid UTF-8 in topic":   "{\"topic\":\"m.\xc3\",\"content\":1}",
		"invalid UTF-8 in header":  "{\"topic\":\"m.t\",\"content\":1,\"headers\":{\"k\":\"\xed\xa0\x80\"}}",
		"overlong UTF-8":           "{\"topic\":\"m.t\",\"content\":\"\xc0\xaf\"}",
		"100k [":                   deep,
		"100k [ ] as content":      `{"topic":"m.t","content":` + deepClosed + `}`,
		"50k nested objects":       `{"topic":"m.t","content":` + deepObj + `}`,
		"100k [ as topic":          `{"topic":` + deepClosed + `,"content":1}`,
		"NUL byte":                 "{\"topic\":\"m.t\",\x00\"content\":1}",
		"unterminated string":      `{"topic":"m.t","content":"abc`,
	} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			st, out := postJSONAs(t, e.base+"/messages", e.sent(), []byte(body))
			if e.refused() {
				requireNACK(t, st, out, http.StatusUnauthorized, contract.CodeUnauthorized)
			} else {
				requireNACK(t, st, out, http.StatusBadRequest, contract.CodeBadRequest)
			}
			assert.Less(t, time.Since(start), 2*time.Second, "answered quickly")
		})
	}
	requireNoTopics(t, e)
}

// TestSlowloris: connections trickling their request headers a byte at a
// time are closed by server.read-header-timeout, and while they trickle a
// normal publish completes within a generous bound. With auth on the
// tricklers carry a valid token or none, and the normal publishes a valid
// one.
func TestSlowloris(t *testing.T) {
	forHostileModes(t, testSlowloris)
}

func testSlowloris(t *testing.T, m hostileMode) {
	const conns = 64
	e := startHostile(t, m, func(c *config.Config) { c.Server.ReadHeaderTimeout = 500 * time.Millisecond })
	base := e.base
	head := "POST /messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + e.authLine() + "X-Padding: " +
		strings.Repeat("p", 200) + "\r\n\r\n"
	type result struct {
		sent   int
		closed time.Duration
	}
	results := make(chan result, conns)
	start := time.Now()
	for range conns {
		c, err := net.Dial("tcp", hostOf(base))
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		go func() {
			closed := make(chan struct{})
			go func() { // the server closing the connection ends the read
				_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
				_, _ = io.Copy(io.Discard, c)
				close(closed)
			}()
			sent := 0
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for sent < len(head) {
				select {
				case <-closed:
					results <- result{sent, time.Since(start)}
					return
				case <-tick.C:
				}
				if _, err := c.Write([]byte{head[sent]}); err != nil {
					<-closed
					results <- result{sent, time.Since(start)}
					return
				}
				sent++
			}
			<-closed
			results <- result{sent, time.Since(start)}
		}()
	}
	time.Sleep(200 * time.Millisecond) // every trickler is connected and sending
	for i := range 5 {
		t0 := time.Now()
		st, out := postJSONAs(t, base+"/messages", e.token, []byte(fmt.Sprintf(`{"topic":"slow.topic","content":{"n":%d}}`, i)))
		require.Equal(t, 200, st, out)
		assert.Less(t, time.Since(t0), 2*time.Second, "a normal publish completes during slowloris")
	}
	for range conns {
		r := <-results
		assert.Less(t, r.sent, len(head), "closed before the headers were complete")
		assert.Less(t, r.closed, 10*time.Second, "closed by read-header-timeout")
	}
}

// TestTooManyTopics503: beyond mmmq.broker.storage.max-topics a new topic is
// 503 TOO_MANY_TOPICS with an error naming the key; nothing is created for
// it; existing topics keep working.
func TestTooManyTopics503(t *testing.T) {
	const max = 5
	base, root, _ := hostileBroker(t, func(c *config.Config) {
		config.EditSection(c, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.MaxTopics = max })
	})
	for i := range max {
		st, out := publishAt(t, base, fmt.Sprintf("cap.t%d", i), map[string]any{"n": 0}, "")
		require.Equal(t, 200, st, out)
	}
	for i := max; i < 4*max; i++ {
		st, out := publishAt(t, base, fmt.Sprintf("cap.t%d", i), map[string]any{"n": 0}, "")
		requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTooManyTopics)
		assert.Contains(t, out["error"], "mmmq.broker.storage.max-topics")
	}
	// The batch endpoint reports the same.
	st, out := postJSON(t, base+"/messages/batch", []byte(`[{"topic":"cap.batch","content":1}]`))
	assert.Equal(t, http.StatusServiceUnavailable, st, out)
	assert.Contains(t, fmt.Sprint(out), "max-topics")
	st, out = publishAt(t, base, "cap.t0", map[string]any{"n": 1}, "")
	require.Equal(t, 200, st, out)
	assert.EqualValues(t, 1, out["offset"])
	assert.Len(t, dataEntries(t, root), max, "no directory for a refused topic")
}
