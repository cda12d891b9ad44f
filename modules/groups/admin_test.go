package groups

import (
	"context"
	"encoding/binary"
	"fmt"
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

// serve serves the httpapi router with the groups Route of e's current
// coordinator (after e.reopen, serve again).
func serve(t *testing.T, e *env) string {
	t.Helper()
	srv := httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{}))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return ts.URL
}

// stampBase is added to the timestamps tests give publishAt and atStamp:
// 2026-01-01 in Unix ms, since a seek refuses a timestamp that looks like
// Unix seconds.
const stampBase = int64(1767225600000)

// publishAt appends one stored message per timestamp (ms after
// stampBase), in order.
func publishAt(t *testing.T, q *topicqueue.TopicQueue, stamps ...int64) {
	t.Helper()
	for i, ts := range stamps {
		msg := fmt.Sprintf(`{"topic":{"name":%q},"content":{"i":%d},"timestamp":%d}`, q.Name(), i, stampBase+ts)
		if _, err := q.Log().Append(context.Background(), []byte(msg), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
}

// atStamp is the seek body {"to": {"timestamp": stampBase+ms}}.
func atStamp(ms int64) string {
	return fmt.Sprintf(`{"to": {"timestamp": %d}}`, stampBase+ms)
}

// listed is the groups of a GET /topics/{topic}/groups answer by name.
func listed(t *testing.T, r httpResp) map[string]map[string]any {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("list: %d %s", r.status, r.raw)
	}
	out := map[string]map[string]any{}
	var names []string
	gs, ok := r.body["groups"].([]any)
	if !ok {
		t.Fatalf("groups is not an array: %s", r.raw)
	}
	for _, g := range gs {
		m := g.(map[string]any)
		out[m["group"].(string)] = m
		names = append(names, m["group"].(string))
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("groups not sorted by name: %v", names)
		}
	}
	return out
}

// wantGroup checks a listed group's committed offset, lag and held flag,
// and that leaseExpiresInMs is there exactly when it is held.
func wantGroup(t *testing.T, gs map[string]map[string]any, name string, committed, lag int64, held bool) {
	t.Helper()
	g, ok := gs[name]
	if !ok {
		t.Fatalf("group %s not listed: %v", name, gs)
	}
	ms, hasLease := g["leaseExpiresInMs"].(float64)
	if g["committed"] != float64(committed) || g["lag"] != float64(lag) || g["held"] != held || hasLease != held {
		t.Fatalf("group %s = %v, want committed %d lag %d held %v", name, g, committed, lag, held)
	}
	if held && (ms <= 0 || ms > 30000) {
		t.Fatalf("group %s: leaseExpiresInMs %v, want within the 30 s lease", name, ms)
	}
}

func TestHTTPListGroups(t *testing.T) {
	e := newEnv(t, Options{Reserved: func(n string) bool { return n == "disp" }})
	e.publish(5)
	url := serve(t, e)
	list := url + "/topics/" + testTopic + "/groups"

	r := do(t, "GET", list, "", "")
	if gs := listed(t, r); len(gs) != 0 || !strings.Contains(r.raw, `"groups":[]`) ||
		r.body["topic"] != testTopic || r.body["highWatermark"] != 5.0 || r.body["startOffset"] != 0.0 {
		t.Fatalf("list before any group: %s", r.raw)
	}

	// a: fetched, acked through 2, released. b: fetched, held.
	base := url + "/topics/" + testTopic + "/groups/"
	r = do(t, "POST", base+"a/fetch", "", "")
	if r := do(t, "POST", base+"a/ack", r.session, `{"offset": 2}`); r.status != 200 {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", base+"a/session", r.session, ""); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"b/fetch?max=1", "", ""); r.status != 200 {
		t.Fatalf("fetch b: %d %s", r.status, r.raw)
	}
	// Stored checkpoints the coordinator has not used: a group's is
	// listed, a dispatcher's is not.
	for name, off := range map[string]int64{"stored": 1, "disp": 4} {
		if err := e.q.Commit(name, off); err != nil {
			t.Fatal(err)
		}
	}
	gs := listed(t, do(t, "GET", list, "", ""))
	if len(gs) != 3 {
		t.Fatalf("listed %v, want a, b and stored", gs)
	}
	wantGroup(t, gs, "a", 3, 2, false)
	wantGroup(t, gs, "b", 0, 5, true)
	wantGroup(t, gs, "stored", 1, 4, false)

	head, err := http.Head(list)
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	if head.StatusCode != 200 || !strings.HasPrefix(head.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("HEAD: %d %v", head.StatusCode, head.Header)
	}

	// After a restart the committed groups are listed from their stored
	// checkpoints, free; b never committed, so nothing of it is stored.
	e.reopen()
	url = serve(t, e)
	gs = listed(t, do(t, "GET", url+"/topics/"+testTopic+"/groups", "", ""))
	if len(gs) != 2 {
		t.Fatalf("after a restart: %v, want a and stored", gs)
	}
	wantGroup(t, gs, "a", 3, 2, false)
	wantGroup(t, gs, "stored", 1, 4, false)
	if _, ok := e.c.Holding(testTopic, time.Time{}); ok {
		t.Fatal("listing made a stored group count for keep-unconsumed")
	}

	for path, want := range map[string]int{"/topics/no.such/groups": 404, "/topics/bad..name/groups": 400} {
		r := do(t, "GET", url+path, "", "")
		if r.status != want || r.body["acknowledgement"] != "NACK" {
			t.Errorf("GET %s: %d %s, want %d", path, r.status, r.raw, want)
		}
	}
	if head, err := http.Head(url + "/topics/no.such/groups"); err != nil || head.StatusCode != 404 {
		t.Fatalf("HEAD of an unknown topic: %v %v", head, err)
	}
}

// seek posts body to the seek route of group and checks a 200 answer's
// previous and committed offsets.
func seek(t *testing.T, url, group, body string, previous, committed int64) {
	t.Helper()
	r := do(t, "POST", url+"/topics/"+testTopic+"/groups/"+group+"/seek", "", body)
	if r.status != 200 || r.body["previous"] != float64(previous) || r.body["committed"] != float64(committed) ||
		r.body["topic"] != testTopic || r.body["group"] != group {
		t.Fatalf("seek %s %s: %d %s, want previous %d committed %d", group, body, r.status, r.raw, previous, committed)
	}
}

func TestHTTPSeekTargets(t *testing.T) {
	e := newEnv(t, Options{})
	publishAt(t, e.q, 1000, 2000, 3000, 4000) // offsets 0..3, high watermark 4
	url := serve(t, e)
	for _, tc := range []struct {
		body           string
		prev, want     int64
		explainTheCase string
	}{
		{`{"to": "latest"}`, 0, 4, "the high watermark"},
		{`{"to": "earliest"}`, 4, 0, "the start offset, backwards"},
		{`{"to": 3}`, 0, 3, "an offset"},
		{`{"to": 4}`, 3, 4, "the high watermark as an offset"},
		{atStamp(2500), 4, 2, "between 2000 and 3000: the later entry"},
		{atStamp(2000), 2, 1, "exactly an entry's"},
		{`{"to": {"timestamp": 0}}`, 1, 0, "before every entry"},
		{atStamp(4001), 0, 4, "after every entry: the high watermark"},
	} {
		t.Run(tc.explainTheCase, func(t *testing.T) { seek(t, url, "g", tc.body, tc.prev, tc.want) })
	}
}

// A seek moves the committed offset durably, backwards too, and the
// coordinator agrees: the next session fetches from there, retention's
// keep-unconsumed holds from there, and a restart keeps it.
func TestHTTPSeekMovesCommittedOffset(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(6)
	url := serve(t, e)
	base := url + "/topics/" + testTopic + "/groups/g"
	r := do(t, "POST", base+"/fetch?max=5", "", "")
	if r := do(t, "POST", base+"/ack", r.session, `{"offset": 4}`); r.status != 200 || r.body["committed"] != 5.0 {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}

	// Held: refused, nothing moves.
	if r := do(t, "POST", base+"/seek", "", `{"to": 1}`); r.status != 409 || r.code() != contract.CodeGroupBusy || r.retryAfter == "" {
		t.Fatalf("seek while held: %d %s (Retry-After %q)", r.status, r.raw, r.retryAfter)
	}
	if c, _ := e.c.Committed(testTopic, "g"); c != 5 {
		t.Fatalf("a refused seek moved the committed offset to %d", c)
	}
	if r := do(t, "DELETE", base+"/session", r.session, ""); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}

	since := time.Now()
	e.c.groups[key{testTopic, "g"}].active.Store(since.Add(-time.Hour).UnixNano()) // idle
	seek(t, url, "g", `{"to": 1}`, 5, 1)
	if off, ok := e.c.Holding(testTopic, since); !ok || off != 1 {
		t.Fatalf("Holding after the seek = %d, %v; want 1 (a seek is activity)", off, ok)
	}
	cp, err := os.ReadFile(filepath.Join(e.root, testTopic, storage.CheckpointDir, "g"+storage.CheckpointExt))
	if err != nil || len(cp) != 8 || binary.BigEndian.Uint64(cp) != 1 {
		t.Fatalf("checkpoint file %x, %v; want 1", cp, err)
	}
	r = do(t, "POST", base+"/fetch?max=2", "", "")
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[1 2]" || r.body["committed"] != 1.0 {
		t.Fatalf("fetch after the seek: %d %s", r.status, r.raw)
	}
	if r := do(t, "DELETE", base+"/session", r.session, ""); r.status != 200 {
		t.Fatalf("release: %d %s", r.status, r.raw)
	}

	// A group never seen before: its checkpoint is made, and it is listed.
	seek(t, url, "fresh", `{"to": 4}`, 0, 4)
	e.reopen()
	url = serve(t, e)
	gs := listed(t, do(t, "GET", url+"/topics/"+testTopic+"/groups", "", ""))
	wantGroup(t, gs, "g", 1, 5, false)
	wantGroup(t, gs, "fresh", 4, 2, false)
	r = do(t, "POST", url+"/topics/"+testTopic+"/groups/fresh/fetch", "", "")
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[4 5]" {
		t.Fatalf("fetch of the sought group after a restart: %d %s", r.status, r.raw)
	}
}

func TestHTTPSeekErrors(t *testing.T) {
	e := newEnv(t, Options{Reserved: func(n string) bool { return n == "disp" }})
	e.publish(3)
	url := serve(t, e)
	base := url + "/topics/" + testTopic + "/groups/g/seek"
	for _, tc := range []struct {
		url, body string
		status    int
		code      string
		says      string
	}{
		{base, `{"to": 4}`, 400, contract.CodeBadRequest, "high watermark 3"},
		{base, `{"to": -1}`, 400, contract.CodeBadRequest, "integer >= 0"},
		{base, `{"to": 1.5}`, 400, contract.CodeBadRequest, "integer >= 0"},
		{base, `{"to": "first"}`, 400, contract.CodeBadRequest, `unknown "to" "first"`},
		{base, `{"to": true}`, 400, contract.CodeBadRequest, "integer >= 0"},
		{base, `{"to": null}`, 400, contract.CodeBadRequest, `"to" is missing`},
		{base, `{}`, 400, contract.CodeBadRequest, `"to" is missing`},
		{base, ``, 400, contract.CodeBadRequest, "body must be"},
		{base, `{"to": 1} {}`, 400, contract.CodeBadRequest, "data after the JSON object"},
		{base, `{"to": 1, "from": 2}`, 400, contract.CodeBadRequest, `unknown field "from"`},
		{base, `{"To": 1}`, 400, contract.CodeBadRequest, `unknown field "To" (the member is "to")`},
		{base, `{"to": "latest", "to": "earliest"}`, 400, contract.CodeBadRequest, `field "to" is given more than once`},
		{base, `{"to": {}}`, 400, contract.CodeBadRequest, "timestamp is missing"},
		{base, `{"to": {"timestamp": -5}}`, 400, contract.CodeBadRequest, "timestamp must be an integer >= 0"},
		{base, `{"to": {"timestamp": 5, "offset": 1}}`, 400, contract.CodeBadRequest, `unknown field "offset"`},
		{url + "/topics/" + testTopic + "/groups/.g/seek", `{"to": 0}`, 400, contract.CodeBadRequest, "group name"},
		{url + "/topics/" + testTopic + "/groups/disp/seek", `{"to": 0}`, 409, contract.CodeNameTaken, "dispatcher"},
		{url + "/topics/no.such/groups/g/seek", `{"to": 0}`, 404, contract.CodeNotFound, "no.such"},
	} {
		r := do(t, "POST", tc.url, "", tc.body)
		if msg, _ := r.body["error"].(string); r.status != tc.status || r.code() != tc.code || !strings.Contains(msg, tc.says) {
			t.Errorf("seek %s %q: %d %s, want %d %s saying %s", tc.url, tc.body, r.status, r.raw, tc.status, tc.code, tc.says)
		}
	}
	if off, ok := e.c.Holding(testTopic, time.Time{}); ok {
		t.Fatalf("refused seeks left a group that holds offset %d for keep-unconsumed", off)
	}
	if c, _ := e.c.Committed(testTopic, "g"); c != 0 {
		t.Fatalf("refused seeks moved the committed offset to %d", c)
	}
	if _, err := os.Stat(filepath.Join(e.root, testTopic, storage.CheckpointDir, "g"+storage.CheckpointExt)); !os.IsNotExist(err) {
		t.Fatalf("a refused seek stored a checkpoint: %v", err)
	}
}

// Retention: a seek below the log start offset is 410 OFFSET_EXPIRED with
// the start offset, earliest is the start offset, and messages retention
// deleted are not counted as lag.
func TestHTTPSeekAndLagAfterRetention(t *testing.T) {
	log := zaptest.NewLogger(t)
	// One entry per segment: retention can delete any prefix.
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir(), Storage: storage.Options{Logger: log, SegmentMaxBytes: 1}})
	c := New(reg, Options{Logger: log})
	t.Cleanup(func() {
		_ = c.Stop(context.Background())
		if err := reg.Close(); err != nil {
			t.Error(err)
		}
	})
	q, err := reg.GetOrCreate(testTopic)
	if err != nil {
		t.Fatal(err)
	}
	publishAt(t, q, 1000, 2000, 3000, 4000, 5000, 6000, 7000)
	ts := httptest.NewServer(httpapi.New(httpapi.Options{}, reg, nil, log, NewRoute(c, RouteOptions{})).Handler())
	t.Cleanup(ts.Close)
	url := ts.URL
	seek(t, url, "behind", `{"to": 1}`, 0, 1)
	seek(t, url, "ahead", `{"to": 6}`, 0, 6)
	res, err := q.Log().(*storage.Log).ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 5)
	if err != nil || res.StartOffset != 5 {
		t.Fatalf("retention: %+v %v", res, err)
	}

	gs := listed(t, do(t, "GET", url+"/topics/"+testTopic+"/groups", "", ""))
	wantGroup(t, gs, "behind", 1, 2, false) // 7 - max(1, 5): 1..4 were deleted, not lag
	wantGroup(t, gs, "ahead", 6, 1, false)

	r := do(t, "POST", url+"/topics/"+testTopic+"/groups/behind/seek", "", `{"to": 4}`)
	if r.status != 410 || r.code() != contract.CodeOffsetExpired || r.body["startOffset"] != 5.0 {
		t.Fatalf("seek below the start offset: %d %s", r.status, r.raw)
	}
	seek(t, url, "behind", `{"to": "earliest"}`, 1, 5)
	seek(t, url, "ahead", atStamp(1500), 6, 5) // deleted timestamps: the start offset
	seek(t, url, "ahead", atStamp(6500), 5, 6)
	// A timestamp in Unix seconds is refused, naming the rule; the group
	// stays where it was.
	r = do(t, "POST", url+"/topics/"+testTopic+"/groups/ahead/seek", "", `{"to": {"timestamp": 1767225600}}`)
	if r.status != 400 || !strings.Contains(string(r.raw), "timestamp is in Unix milliseconds; 1767225600 looks like seconds") {
		t.Fatalf("seek to a timestamp in seconds: %d %s", r.status, r.raw)
	}
	seek(t, url, "ahead", `{"to": 6}`, 6, 6)
}
