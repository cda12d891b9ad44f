package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// keysOf reads back topic through GET /topics/{topic}/messages and
// returns each message's "key" in offset order ("-" for none).
func (a *api) keysOf(topic string) []string {
	a.t.Helper()
	var out []string
	for _, m := range a.read("/topics/" + topic + "/messages?limit=1000").Messages {
		k, ok := m.Message["key"].(string)
		if !ok {
			k = "-"
		}
		out = append(out, k)
	}
	return out
}

// A publish's "key", on both publish paths, is stored and read back with
// the message; absent or null stores none.
func TestPublishKeyIsStoredAndReadBack(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for _, c := range []struct{ path, body string }{
		{"/messages", `{"topic":"k.t","content":1,"key":"customer-7"}`},
		{"/mmmq/messages", `{"topic":{"name":"k.t"},"content":2,"key":"é \u00e9/\"q\""}`},
		{"/messages", `{"topic":"k.t","content":3}`},
		{"/mmmq/messages", `{"topic":"k.t","content":4,"key":null}`},
	} {
		if rec := a.call(http.MethodPost, c.path, "application/json", c.body); rec.Code != http.StatusOK {
			t.Fatalf("POST %s %s: HTTP %d %s", c.path, c.body, rec.Code, rec.Body)
		}
	}
	if got, want := fmt.Sprintf("%q", a.keysOf("k.t")), `["customer-7" "é é/\"q\"" "-" "-"]`; got != want {
		t.Errorf("keys read back %s, want %s", got, want)
	}
}

// An invalid key is a 400 NACK naming the rule, and nothing is stored
// (not even the topic is created).
func TestPublishInvalidKeyStoresNothing(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for _, key := range []string{`7`, `true`, `{}`, `["k"]`, `""`, `" k"`, `"k "`, `"a\nb"`, `"a\u0085"`, `"\ud800"`, `"` + strings.Repeat("k", 257) + `"`} {
		for _, path := range []string{"/messages", "/mmmq/messages"} {
			rec := a.call(http.MethodPost, path, "application/json", `{"topic":"bad.key","content":1,"key":`+key+`}`)
			wantNACK(t, rec, http.StatusBadRequest, contract.CodeBadRequest, contract.KeyRule)
		}
	}
	a.noTopics()
}

// In a batch each member has its own key, stored and read back; one
// member with an invalid key fails the whole batch with a 400 naming its
// index and the rule, and nothing of it is stored.
func TestBatchKeys(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	rec := a.call(http.MethodPost, "/messages/batch", "application/json", `[
		{"topic":"bk.a","content":1,"key":"k1"},
		{"topic":"bk.b","content":2,"key":"k2"},
		{"topic":"bk.a","content":3},
		{"topic":"bk.a","content":4,"key":"k1"}]`)
	if rec.Code != http.StatusOK {
		t.Fatalf("batch: HTTP %d %s", rec.Code, rec.Body)
	}
	if got := fmt.Sprint(a.keysOf("bk.a"), a.keysOf("bk.b")); got != "[k1 - k1] [k2]" {
		t.Errorf("keys read back %s, want [k1 - k1] [k2]", got)
	}
	nd := "{\"topic\":\"bk.c\",\"content\":1,\"key\":\"n1\"}\n{\"topic\":\"bk.c\",\"content\":2}\n"
	if rec := a.call(http.MethodPost, "/messages/batch", "application/x-ndjson", nd); rec.Code != http.StatusOK {
		t.Fatalf("NDJSON batch: HTTP %d %s", rec.Code, rec.Body)
	}
	if got := fmt.Sprint(a.keysOf("bk.c")); got != "[n1 -]" {
		t.Errorf("NDJSON keys read back %s, want [n1 -]", got)
	}

	b := newAPI(t, Options{}, topicqueue.Options{})
	rec = b.call(http.MethodPost, "/messages/batch", "application/json",
		`[{"topic":"bk.a","content":1,"key":"k1"},{"topic":"bk.b","content":2,"key":" k2"},{"topic":"bk.a","content":3}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusBadRequest || resp.Acknowledgement != "NACK" || resp.Failed != 1 ||
		!strings.Contains(resp.Error, "nothing stored") || !strings.Contains(resp.Error, "message 1: "+contract.KeyRule) {
		t.Fatalf("HTTP %d %s, want 400 NACK naming message 1 and the rule", rec.Code, rec.Body)
	}
	if r := resp.Results[1]; r.Status != http.StatusBadRequest || !strings.HasPrefix(r.Error, "message 1: "+contract.KeyRule) {
		t.Errorf("result 1 = %+v", r)
	}
	b.noTopics()
}
