package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// expiriesOf reads back topic through GET /topics/{topic}/messages and
// returns, for each message in offset order, its expiresAt minus its
// timestamp (the ttl in ms; -1 for none).
func (a *api) expiriesOf(topic string) []int64 {
	a.t.Helper()
	var out []int64
	for _, m := range a.read("/topics/" + topic + "/messages?limit=1000").Messages {
		exp, ok := m.Message[contract.ExpiresAtMember].(float64)
		ts, _ := m.Message["timestamp"].(float64)
		if !ok {
			out = append(out, -1)
			continue
		}
		out = append(out, int64(exp-ts))
	}
	return out
}

// A publish's "ttl", on both publish paths, is stored as expiresAt =
// timestamp + ttl and read back with the message (expired or not: the
// read-back route shows the log); absent or null stores none.
func TestPublishTTLIsStoredAndReadBack(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for _, c := range []struct{ path, body string }{
		{"/messages", `{"topic":"t.t","content":1,"ttl":"30s"}`},
		{"/mmmq/messages", `{"topic":{"name":"t.t"},"content":2,"ttl":"1ms"}`},
		{"/messages", `{"topic":"t.t","content":3}`},
		{"/mmmq/messages", `{"topic":"t.t","content":4,"ttl":null,"key":"k"}`},
		{"/messages", `{"topic":"t.t","content":5,"ttl":"1h30m","key":"k"}`},
	} {
		if rec := a.call(http.MethodPost, c.path, "application/json", c.body); rec.Code != http.StatusOK {
			t.Fatalf("POST %s %s: HTTP %d %s", c.path, c.body, rec.Code, rec.Body)
		}
	}
	got, want := a.expiriesOf("t.t"), []int64{30000, 1, -1, -1, 5400000}
	if len(got) != len(want) {
		t.Fatalf("read back %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("read back ttls %v, want %v", got, want)
		}
	}
}

// An invalid ttl, or an expiresAt set by the client, is a 400 NACK naming
// the rule, and nothing is stored (not even the topic is created).
func TestPublishInvalidTTLStoresNothing(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	for _, ttl := range []string{`30`, `true`, `{}`, `""`, `"30"`, `"0s"`, `"-1s"`, `"500us"`, `"87601h"`, `"forever"`} {
		for _, path := range []string{"/messages", "/mmmq/messages"} {
			rec := a.call(http.MethodPost, path, "application/json", `{"topic":"bad.ttl","content":1,"ttl":`+ttl+`}`)
			wantNACK(t, rec, http.StatusBadRequest, contract.CodeBadRequest, contract.TTLRule)
		}
	}
	rec := a.call(http.MethodPost, "/messages", "application/json", `{"topic":"bad.ttl","content":1,"expiresAt":1893456000000}`)
	wantNACK(t, rec, http.StatusBadRequest, contract.CodeBadRequest, `field "expiresAt" is set by the broker`)
	a.noTopics()
}

// In a batch each member has its own ttl; one member with an invalid ttl
// fails the whole batch with a 400 naming its index and the rule, and
// nothing of it is stored.
func TestBatchTTLs(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	rec := a.call(http.MethodPost, "/messages/batch", "application/json", `[
		{"topic":"bt.a","content":1,"ttl":"2s"},
		{"topic":"bt.a","content":2},
		{"topic":"bt.a","content":3,"ttl":"1m"}]`)
	if rec.Code != http.StatusOK {
		t.Fatalf("batch: HTTP %d %s", rec.Code, rec.Body)
	}
	if got := a.expiriesOf("bt.a"); len(got) != 3 || got[0] != 2000 || got[1] != -1 || got[2] != 60000 {
		t.Errorf("ttls read back %v, want [2000 -1 60000]", got)
	}
	nd := "{\"topic\":\"bt.c\",\"content\":1,\"ttl\":\"5ms\"}\n{\"topic\":\"bt.c\",\"content\":2}\n"
	if rec := a.call(http.MethodPost, "/messages/batch", "application/x-ndjson", nd); rec.Code != http.StatusOK {
		t.Fatalf("NDJSON batch: HTTP %d %s", rec.Code, rec.Body)
	}
	if got := a.expiriesOf("bt.c"); len(got) != 2 || got[0] != 5 || got[1] != -1 {
		t.Errorf("NDJSON ttls read back %v, want [5 -1]", got)
	}

	b := newAPI(t, Options{}, topicqueue.Options{})
	rec = b.call(http.MethodPost, "/messages/batch", "application/json",
		`[{"topic":"bt.a","content":1,"ttl":"1s"},{"topic":"bt.b","content":2,"ttl":"0s"},{"topic":"bt.a","content":3}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusBadRequest || resp.Acknowledgement != "NACK" || resp.Failed != 1 ||
		!strings.Contains(resp.Error, "nothing stored") || !strings.Contains(resp.Error, "message 1: "+contract.TTLRule) {
		t.Fatalf("HTTP %d %s, want 400 NACK naming message 1 and the rule", rec.Code, rec.Body)
	}
	b.noTopics()
}
