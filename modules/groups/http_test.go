package groups

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// newHTTP serves the real httpapi router with the groups Route.
func newHTTP(t *testing.T, opts Options) (*env, *httptest.Server) {
	e := newEnv(t, opts)
	srv := httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{}))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return e, ts
}

type httpResp struct {
	status     int
	session    string
	retryAfter string
	body       map[string]any
	raw        string
}

func do(t *testing.T, method, url, session, body string) httpResp {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if session != "" {
		req.Header.Set(SessionHeader, session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := httpResp{status: resp.StatusCode, session: resp.Header.Get(SessionHeader), retryAfter: resp.Header.Get("Retry-After"), raw: string(raw)}
	if err := json.Unmarshal(raw, &r.body); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, url, raw, err)
	}
	return r
}

func (r httpResp) code() string { s, _ := r.body["code"].(string); return s }

func (r httpResp) offsets() []int64 {
	var out []int64
	ms, _ := r.body["messages"].([]any)
	for _, m := range ms {
		out = append(out, int64(m.(map[string]any)["offset"].(float64)))
	}
	return out
}

func TestHTTPFetchAckRelease(t *testing.T) {
	e, ts := newHTTP(t, Options{})
	e.publish(5)
	base := ts.URL + "/topics/" + testTopic + "/groups/g"

	r := do(t, "POST", base+"/fetch?max=3", "", "")
	if r.status != 200 || r.session == "" || r.body["session"] != r.session {
		t.Fatalf("fetch: %d %s (session header %q)", r.status, r.raw, r.session)
	}
	if got := r.offsets(); len(got) != 3 || got[0] != 0 || got[2] != 2 {
		t.Fatalf("offsets %v", got)
	}
	if r.body["committed"].(float64) != 0 || r.body["topic"] != testTopic || r.body["group"] != "g" {
		t.Fatalf("body %s", r.raw)
	}
	msg := r.body["messages"].([]any)[1].(map[string]any)["message"].(map[string]any)
	if msg["n"].(float64) != 1 {
		t.Fatalf("message %v", msg)
	}
	s := r.session

	if r := do(t, "POST", base+"/fetch", "", ""); r.status != 409 || r.code() != contract.CodeGroupBusy || r.body["acknowledgement"] != "NACK" || r.retryAfter != "30" {
		t.Fatalf("second consumer: %d %s (Retry-After %q, want the 30 s lease)", r.status, r.raw, r.retryAfter)
	}
	// A member name in another case is refused (encoding/json alone would
	// take "Offset" as "offset"), and nothing is acked.
	if r := do(t, "POST", base+"/ack", s, `{"Offset": 1}`); r.status != 400 || !strings.Contains(r.raw, `unknown field \"Offset\" (the member is \"offset\")`) {
		t.Fatalf("ack with \"Offset\": %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 0, "offset": 3}`); r.status != 400 || !strings.Contains(r.raw, `field \"offset\" is given more than once`) {
		t.Fatalf("ack with offset given twice: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": "1"}`); r.status != 400 || !strings.Contains(r.raw, `field \"offset\": a JSON string where a number belongs`) || strings.Contains(r.raw, "Go struct") {
		t.Fatalf("ack with a string offset: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 3}`); r.status != 409 || r.code() != contract.CodeNotDelivered {
		t.Fatalf("ack beyond delivered: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 1}`); r.status != 200 || r.body["committed"].(float64) != 2 {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 0}`); r.status != 200 || r.body["committed"].(float64) != 2 {
		t.Fatalf("ack below committed: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", "nope", `{"offset": 1}`); r.status != 409 || r.code() != contract.CodeSessionExpired {
		t.Fatalf("ack from another session: %d %s", r.status, r.raw)
	}
	r = do(t, "POST", base+"/fetch?max=10", s, "")
	if got := r.offsets(); r.status != 200 || len(got) != 2 || got[0] != 3 {
		t.Fatalf("continued fetch: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", base+"/session", s, ""); r.status != 200 || r.body["released"] != true || r.body["committed"].(float64) != 2 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	// Redelivery from the committed offset to the next session.
	r = do(t, "POST", base+"/fetch?max=10", "", "")
	if got := r.offsets(); r.status != 200 || len(got) != 3 || got[0] != 2 || r.session == s {
		t.Fatalf("redelivery: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch", s, ""); r.status != 409 || r.code() != contract.CodeSessionExpired {
		t.Fatalf("fetch with a released session: %d %s", r.status, r.raw)
	}
}

func TestHTTPLongPoll(t *testing.T) {
	_, ts := newHTTP(t, Options{})
	url := ts.URL + "/topics/" + testTopic + "/groups/g/fetch?wait=150"
	start := time.Now()
	r := do(t, "POST", url, "", "")
	if r.status != 200 || len(r.offsets()) != 0 || !strings.Contains(r.raw, `"messages":[]`) {
		t.Fatalf("empty long poll: %d %s", r.status, r.raw)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("answered after %s, before the wait", d)
	}
}

func TestHTTPLeaseExpiry(t *testing.T) {
	e, ts := newHTTP(t, Options{LeaseTimeout: 50 * time.Millisecond})
	e.publish(3)
	base := ts.URL + "/topics/" + testTopic + "/groups/g"
	r := do(t, "POST", base+"/fetch", "", "")
	time.Sleep(120 * time.Millisecond)
	if r := do(t, "POST", base+"/ack", r.session, `{"offset": 2}`); r.status != 409 || r.code() != contract.CodeSessionExpired {
		t.Fatalf("stale ack: %d %s", r.status, r.raw)
	}
	r = do(t, "POST", base+"/fetch", "", "")
	if got := r.offsets(); r.status != 200 || len(got) != 3 || got[0] != 0 {
		t.Fatalf("after expiry: %d %s", r.status, r.raw)
	}
}

func TestHTTPErrors(t *testing.T) {
	e, ts := newHTTP(t, Options{Reserved: func(n string) bool { return n == "disp" }})
	e.publish(1)
	base := ts.URL + "/topics/" + testTopic + "/groups/g"
	for _, tc := range []struct {
		method, path, session, body string
		status                      int
		code                        string
	}{
		{"POST", base + "/fetch?max=0", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/fetch?max=x", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/fetch?wait=-1", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/fetch?wait=1.5", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/fetch?max=2&max=50", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/fetch?wait=1&wait=abc", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/fetch?from=1&from=0", "", "", 400, contract.CodeBadRequest},
		{"POST", base + "/ack", "", `{"offset":0}`, 400, contract.CodeBadRequest},
		{"POST", base + "/ack", "s", `{"offset":-1}`, 400, contract.CodeBadRequest},
		{"POST", base + "/ack", "s", `{}`, 400, contract.CodeBadRequest},
		{"POST", base + "/ack", "s", `nope`, 400, contract.CodeBadRequest},
		{"DELETE", base + "/session", "", "", 400, contract.CodeBadRequest},
		{"POST", ts.URL + "/topics/no.such/groups/g/fetch", "", "", 404, contract.CodeNotFound},
		{"POST", ts.URL + "/topics/bad..name/groups/g/fetch", "", "", 400, contract.CodeBadRequest},
		{"POST", ts.URL + "/topics/" + testTopic + "/groups/.g/fetch", "", "", 400, contract.CodeBadRequest},
		{"POST", ts.URL + "/topics/" + testTopic + "/groups/disp/fetch", "", "", 409, contract.CodeNameTaken},
	} {
		r := do(t, tc.method, tc.path, tc.session, tc.body)
		if r.status != tc.status || r.code() != tc.code || r.body["acknowledgement"] != "NACK" {
			t.Errorf("%s %s %q: %d %s, want %d %s", tc.method, tc.path, tc.body, r.status, r.raw, tc.status, tc.code)
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "no.such")); !os.IsNotExist(err) {
		t.Fatalf("fetch created a topic: %v", err)
	}
	// A failed fetch left no session behind.
	if r := do(t, "POST", base+"/fetch", "", ""); r.status != 200 {
		t.Fatalf("fetch after errors: %d %s", r.status, r.raw)
	}
}

// A fetch response lost on the way (client timeout, reset) must not let a
// later ack commit messages the consumer never saw: the consumer sends
// from=<the offset it expects next> and gets them again.
func TestHTTPFetchFromRedeliversALostResponse(t *testing.T) {
	e, ts := newHTTP(t, Options{})
	e.publish(20)
	base := ts.URL + "/topics/" + testTopic + "/groups/g"
	r := do(t, "POST", base+"/fetch?max=10", "", "") // response "lost": offsets 0..9
	s := r.session
	r = do(t, "POST", base+"/fetch?max=10&from=0", s, "")
	if got := r.offsets(); r.status != 200 || len(got) != 10 || got[0] != 0 {
		t.Fatalf("fetch from=0: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch?from=15", s, ""); r.status != 409 || r.code() != contract.CodeNotDelivered {
		t.Fatalf("from beyond delivered: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 4}`); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch?from=2", s, ""); r.status != 400 {
		t.Fatalf("from below committed: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch?from=x", s, ""); r.status != 400 || !strings.Contains(r.raw, "must be an integer offset") {
		t.Fatalf("from not a number: %d %s", r.status, r.raw)
	}
	r = do(t, "POST", base+"/fetch?max=3&from=5", s, "")
	if got := r.offsets(); r.status != 200 || len(got) != 3 || got[0] != 5 {
		t.Fatalf("fetch from=5: %d %s", r.status, r.raw)
	}
}

// retentionFixture is a topic of 7 entries, one per segment (retention can
// delete any prefix), its coordinator, and the URL of its group "g".
func retentionFixture(t *testing.T) (*Coordinator, *topicqueue.TopicQueue, string) {
	// One entry per segment: retention can delete any prefix.
	reg, c, q := newCoordinatorOver(t, t.TempDir(), storage.Options{SegmentMaxBytes: 1}, Options{})
	for i := 0; i < 7; i++ {
		if _, err := q.Log().Append(context.Background(), fmt.Appendf(nil, `{"n":%d}`, i), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	ts := httptest.NewServer(httpapi.New(httpapi.Options{}, reg, nil, zaptest.NewLogger(t), NewRoute(c, RouteOptions{})).Handler())
	t.Cleanup(ts.Close)
	base := ts.URL + "/topics/" + testTopic + "/groups/g"
	return c, q, base
}

// A group whose committed offset is below the topic's start offset
// (retention deleted what it had not read) is delivered from the start
// offset on, with the count in RetentionSkipped; asking for a deleted
// offset with from= is 410 OFFSET_EXPIRED with startOffset.
func TestHTTPFetchBelowStartOffset(t *testing.T) {
	c, q, base := retentionFixture(t)
	r := do(t, "POST", base+"/fetch?max=2", "", "")
	s := r.session
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[0 1]" {
		t.Fatalf("first fetch: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 0}`); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", base+"/session", s, ""); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	res, err := q.Log().(*storage.Log).ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 5)
	if err != nil || res.StartOffset != 5 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	r = do(t, "POST", base+"/fetch?max=10", "", "")
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[5 6]" {
		t.Fatalf("fetch after retention: %d %s", r.status, r.raw)
	}
	if got := c.RetentionSkipped(); got != 4 { // committed 1, start 5: 1..4 never delivered
		t.Fatalf("RetentionSkipped = %d, want 4", got)
	}
	// A new session without a commit starts at 1 again: the same deleted
	// offsets are not counted twice.
	if r := do(t, "DELETE", base+"/session", r.session, ""); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	r = do(t, "POST", base+"/fetch?max=10", "", "")
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[5 6]" {
		t.Fatalf("fetch in a new session: %d %s", r.status, r.raw)
	}
	if got := c.RetentionSkipped(); got != 4 {
		t.Fatalf("RetentionSkipped = %d after a second session, want still 4", got)
	}
	s = r.session
	r = do(t, "POST", base+"/fetch?from=2", s, "")
	if r.status != 410 || r.code() != contract.CodeOffsetExpired || r.body["startOffset"] != 5.0 {
		t.Fatalf("from=2 below the start offset: %d %s", r.status, r.raw)
	}
	// An ack of a deleted offset commits the start offset, not offset+1:
	// the committed offset (and the lag) say where the group really is.
	if r := do(t, "POST", base+"/ack", s, `{"offset": 2}`); r.status != 200 || r.body["committed"] != 5.0 {
		t.Fatalf("ack of deleted offset 2: %d %s, want committed 5", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 5}`); r.status != 200 || r.body["committed"] != 6.0 {
		t.Fatalf("ack 5: %d %s", r.status, r.raw)
	}
}

// Retention that deletes past what a session was delivered: an ack of a
// delivered, now deleted offset commits the start offset (it committed
// offset+1, below the start: round-3 item 6), and the session goes on from
// there.
func TestHTTPAckAfterRetentionPassedTheSession(t *testing.T) {
	_, q, base := retentionFixture(t)
	r := do(t, "POST", base+"/fetch?max=2", "", "")
	s := r.session
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[0 1]" {
		t.Fatalf("first fetch: %d %s", r.status, r.raw)
	}
	if res, err := q.Log().(*storage.Log).ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 5); err != nil || res.StartOffset != 5 {
		t.Fatalf("retention: %+v %v", res, err)
	}
	if r := do(t, "POST", base+"/ack", s, `{"offset": 1}`); r.status != 200 || r.body["committed"] != 5.0 {
		t.Fatalf("ack of delivered, deleted offset 1: %d %s, want committed 5 (the start offset)", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch?max=10", s, ""); r.status != 200 || fmt.Sprint(r.offsets()) != "[5 6]" {
		t.Fatalf("fetch after it: %d %s", r.status, r.raw)
	}
}
