package admin

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

// Member names are matched exactly at every level of a dispatcher body:
// one that differs from a setting's (or a read-only member's) only in case
// is a 400 naming it as sent and as spelt, where encoding/json alone would
// take it for the setting. Header names are the body's own.
func TestDecodeSpecExactNames(t *testing.T) {
	const base = `"name":"d","host":"http://h:1","patterns":["a.*"]`
	for body, says := range map[string]string{
		`{` + base + `,"Rate-Limit":5}`:                                `invalid dispatcher: unknown field "Rate-Limit" (the setting is "rate-limit")`,
		`{` + base + `,"Expired":"dead-letter"}`:                       `unknown field "Expired" (the setting is "expired")`,
		`{"Name":"d","host":"http://h:1"}`:                             `unknown field "Name" (the setting is "name")`,
		`{` + base + `,"PAUSED":true}`:                                 `unknown field "PAUSED" (the setting is "paused")`,
		`{` + base + `,"commit":{"Max-Count":5}}`:                      `unknown field "commit.Max-Count" (the setting is "commit.max-count")`,
		`{` + base + `,"batch":{"max-messages":2,"Max-Wait":"1s"}}`:    `unknown field "batch.Max-Wait" (the setting is "batch.max-wait")`,
		`{` + base + `,"tls":{"CA-File":"/ca"}}`:                       `unknown field "tls.CA-File" (the setting is "tls.ca-file")`,
		`{` + base + `,"Commit":{"policy":"interval"}}`:                `unknown field "Commit" (the setting is "commit")`,
		`{` + base + `,"RateLimit":{"limit":5}}`:                       `unknown field "RateLimit" ("rateLimit" is read-only (shown by GET); the setting is "rate-limit")`,
		`{` + base + `,"Source":"api"}`:                                `unknown field "Source" ("source" is read-only (shown by GET))`,
		`{` + base + `,"rateLimit":{"limit":5,"burst":5,"waiting":0}}`: `invalid dispatcher: "rateLimit" is read-only (shown by GET); the setting is "rate-limit"`,
		`{` + base + `,"rateLimit":5}`:                                 `"rateLimit" is read-only (shown by GET); the setting is "rate-limit": send "rate-limit", or leave "rateLimit" out`,
	} {
		_, err := decodeSpec([]byte(body))
		if err == nil || !strings.Contains(err.Error(), says) || contract.Classify(err).Status != 400 {
			t.Errorf("%s: %v, want a 400 saying %q", body, err, says)
		}
	}

	// Header names keep the case they are sent in; a read-only member sent
	// with its setting (what GET shows) is accepted and ignored.
	s, err := decodeSpec([]byte(`{` + base + `,"headers":{"authorization":"a","X-Trace":"b"},` +
		`"rate-limit":5,"rateLimit":{"limit":5,"burst":5,"waiting":0},"deadLetterTopic":"dead-letter.d","source":"api"}`))
	if err != nil || s.RateLimit != 5 || !slices.Equal(slices.Sorted(maps.Keys(s.Headers)), []string{"X-Trace", "authorization"}) {
		t.Fatalf("%+v %v; want rate-limit 5 and both headers as sent", s, err)
	}
	if got := readOnlyTwins; got["rateLimit"] != "rate-limit" {
		t.Errorf("readOnlyTwins %v: want rateLimit -> rate-limit", got)
	}
}

// GET, PUT what GET answered, as is: 200, the dispatcher unchanged, with
// every read-only member GET can show present (rateLimit, breaker,
// concurrency, pauseReason, pausedAt, deadLetterTopic, source, topics).
// GET shows a read-only twin only with its setting. The same body with a
// name in the wrong case, or with rate-limit taken out and rateLimit left
// in, is a 400 with a JSON error body, and changes nothing.
func TestGetPutRoundTripExactNames(t *testing.T) {
	srv, _ := ackServer(t, nil)
	l := startAdmin(t, newRegistry(t), t.TempDir())
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"rt","host":%q,"patterns":["s.*"],"rate-limit":50,"breaker-failures":3,`+
		`"max-in-flight":4,"ordering":"none","adaptive-concurrency":"aimd","headers":{"X-Api-Key":"k"},"commit":{"policy":"interval","max-count":10}}`, srv.URL), 201, nil)
	l.publish("s.a", 2)
	l.waitStatus("rt", func(st Status) bool { return len(st.Topics) == 1 && st.Topics[0].Committed == 2 })
	l.must("POST", "/mmmq/dispatchers/rt/pause", "", 200, nil)
	got := l.must("GET", "/mmmq/dispatchers/rt", "", 200, nil)
	var shown map[string]json.RawMessage
	if err := json.Unmarshal([]byte(got), &shown); err != nil {
		t.Fatal(err)
	}
	for _, ro := range readOnlyMembers {
		if _, ok := shown[ro]; !ok {
			t.Errorf("GET %s: no %q; want every read-only member shown, so the round trip covers it", got, ro)
		}
	}
	for ro, setting := range readOnlyTwins {
		if _, ok := shown[setting]; !ok {
			t.Errorf("GET %s: %q without %q", got, ro, setting)
		}
	}
	before := l.fileText()
	l.must("PUT", "/mmmq/dispatchers/rt", got, 200, nil)
	again := l.must("GET", "/mmmq/dispatchers/rt", "", 200, nil)
	var st Status
	if err := json.Unmarshal([]byte(again), &st); err != nil {
		t.Fatal(err)
	}
	if st.Spec.RateLimit != 50 || st.Spec.BreakerFailures != 3 || st.Spec.Commit.MaxCount != 10 || !st.Paused || st.Headers["X-Api-Key"] != RedactedValue {
		t.Errorf("after the round trip: %s", again)
	}
	if after := l.fileText(); after != before {
		t.Errorf("dispatchers.json changed by the round trip:\n%s\n--- now ---\n%s", before, after)
	}

	var noLimit map[string]json.RawMessage
	_ = json.Unmarshal([]byte(got), &noLimit)
	delete(noLimit, "rate-limit")
	b, _ := json.Marshal(noLimit)
	for body, says := range map[string]string{
		strings.Replace(got, `"rate-limit":`, `"Rate-Limit":`, 1):             `unknown field \"Rate-Limit\" (the setting is \"rate-limit\")`,
		strings.Replace(got, `"max-count":`, `"Max-Count":`, 1):               `unknown field \"commit.Max-Count\" (the setting is \"commit.max-count\")`,
		strings.Replace(got, `"breaker-failures":`, `"Breaker-Failures":`, 1): `unknown field \"Breaker-Failures\"`,
		string(b): `\"rateLimit\" is read-only (shown by GET); the setting is \"rate-limit\"`,
	} {
		code, out := l.call("PUT", "/mmmq/dispatchers/rt", body)
		var e contract.ErrorBody
		if code != 400 || json.Unmarshal([]byte(out), &e) != nil || e.Code != contract.CodeBadRequest || !strings.Contains(out, says) {
			t.Errorf("PUT %s: %d %s; want a 400 JSON error saying %s", body, code, out, says)
		}
	}
	if after := l.fileText(); after != before {
		t.Errorf("dispatchers.json changed by a refused PUT:\n%s", after)
	}

	// Seek's members too, and its "to" object's.
	for body, says := range map[string]string{
		`{"To":"earliest"}`:                  `invalid seek: unknown field \"To\" (the member is \"to\")`,
		`{"to":"earliest","Rate":5}`:         `unknown field \"Rate\" (the member is \"rate\")`,
		`{"to":{"Timestamp":1767225600000}}`: `unknown field \"Timestamp\" (the member is \"timestamp\")`,
		`{"to":"earliest","to":"latest"}`:    `invalid seek: field \"to\" is given more than once`,
	} {
		code, out := l.call("POST", "/mmmq/dispatchers/rt/seek", body)
		if code != 400 || !strings.Contains(out, says) || !strings.Contains(out, `"code":"BAD_REQUEST"`) {
			t.Errorf("seek %s: %d %s; want a 400 JSON error saying %s", body, code, out, says)
		}
	}
}

// Pause and resume take no body: none, null and {} are taken; a member
// sent along (a setting the route would ignore) or another JSON value is
// 400 naming it, and changes nothing.
func TestPauseResumeTakeNoBody(t *testing.T) {
	srv, _ := ackServer(t, nil)
	l := startAdmin(t, newRegistry(t), t.TempDir())
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"nb","host":%q,"patterns":["s.*"]}`, srv.URL), 201, nil)
	for _, body := range []string{"", "{}", " null ", "{ }\n"} {
		l.must("POST", "/mmmq/dispatchers/nb/pause", body, 200, nil)
		l.must("POST", "/mmmq/dispatchers/nb/resume", body, 200, nil)
	}
	for body, want := range map[string]string{
		`{"foo":1}`:            `pause takes no body (send none, or {}); got the member \"foo\"`,
		`{"reason":"x","a":2}`: `got the member \"a\"`,
		`[1]`:                  "is not a JSON object",
		`{"paused":true`:       "is not a JSON object",
	} {
		if got := l.must("POST", "/mmmq/dispatchers/nb/pause", body, 400, nil); !strings.Contains(got, want) {
			t.Errorf("pause with %s: %s; want %q", body, got, want)
		}
	}
	if got := l.must("POST", "/mmmq/dispatchers/nb/resume", `{"from":0}`, 400, nil); !strings.Contains(got, `resume takes no body`) {
		t.Errorf("resume with a body: %s", got)
	}
	var st Status
	l.must("GET", "/mmmq/dispatchers/nb", "", 200, &st)
	if st.Paused {
		t.Error("a refused pause paused the dispatcher")
	}
	// A query parameter given twice is refused too, and deletes nothing.
	if got := l.must("DELETE", "/mmmq/dispatchers/nb?delete-checkpoints=true&delete-checkpoints=false", "", 400, nil); !strings.Contains(got, "query parameter delete-checkpoints is given 2 times") {
		t.Errorf("delete with delete-checkpoints twice: %s", got)
	}
	l.must("GET", "/mmmq/dispatchers/nb", "", 200, nil)
}
