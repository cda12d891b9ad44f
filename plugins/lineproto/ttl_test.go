package lineproto

import (
	"encoding/json"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
)

// PUBX's ttl= attribute, percent-decoded, is stored as the message's
// expiresAt (timestamp + ttl, Unix ms), with key= and id= or alone; an
// invalid ttl, or one given twice, is ERR BAD_REQUEST stating the rule,
// and nothing is stored.
func TestPubXTTL(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUBX tx DURABLE ttl=1h {"n":0}`), "OK 0 DURABLE")
	expectPrefix(t, c.do(`PUBX tx DURABLE key=k ttl=1m30s id=i-1 {"n":1}`), "OK 1 DURABLE")
	expectPrefix(t, c.do(`PUBX tx DURABLE ttl=1500%6Ds {"n":2}`), "OK 2 DURABLE") // 1500ms
	expectPrefix(t, c.do(`PUBX tx DURABLE key=k {"n":3}`), "OK 3 DURABLE")
	for _, tc := range []struct{ line, want string }{
		{`PUBX tx DURABLE ttl=0s {"n":9}`, "ERR BAD_REQUEST " + contract.TTLRule + `; "0s" is under 1ms`},
		{`PUBX tx DURABLE ttl=-1m {"n":9}`, "ERR BAD_REQUEST " + contract.TTLRule},
		{`PUBX tx DURABLE ttl=30 {"n":9}`, "ERR BAD_REQUEST " + contract.TTLRule + `; "30" is not a duration`},
		{`PUBX tx DURABLE ttl= {"n":9}`, "ERR BAD_REQUEST " + contract.TTLRule + "; this one is empty"},
		{`PUBX tx DURABLE ttl=87601h {"n":9}`, "ERR BAD_REQUEST " + contract.TTLRule + `; "87601h" is over 87600h`},
		{`PUBX tx DURABLE ttl=1s ttl=2s {"n":9}`, "ERR BAD_REQUEST attribute ttl given twice"},
		{`PUBX tx DURABLE ttl=%zz {"n":9}`, "ERR BAD_REQUEST attribute ttl: the value is not percent-encoded"},
	} {
		expectPrefix(t, c.do(tc.line), tc.want)
	}
	_, payloads := c.fetch("FETCH tx g 10 0")
	if len(payloads) != 4 {
		t.Fatalf("stored %d messages, want 4: %q", len(payloads), payloads)
	}
	for i, want := range []int64{3600000, 90000, 1500, -1} {
		var m struct {
			Timestamp int64  `json:"timestamp"`
			ExpiresAt *int64 `json:"expiresAt"`
		}
		if err := json.Unmarshal([]byte(payloads[i]), &m); err != nil {
			t.Fatal(err)
		}
		got := int64(-1)
		if m.ExpiresAt != nil {
			got = *m.ExpiresAt - m.Timestamp
		}
		if got != want {
			t.Errorf("message %d: expiresAt - timestamp = %d, want %d: %s", i, got, want, payloads[i])
		}
	}
}
