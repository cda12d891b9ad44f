package lineproto

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
)

// PUBX stores its key= and id= attributes, percent-decoded, as the
// message's "key" and producer id (deduplicated as PUBID's); without
// attributes it is PUB; an unknown attribute, one given twice or an
// invalid value is ERR BAD_REQUEST naming it, and nothing is stored.
func TestPubXAttributes(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUBX kx DURABLE key=customer%207%2F%C3%A9 id=evt%201 {"n":0}`), "OK 0 DURABLE")
	if got := c.do(`pubx kx DURABLE id=evt%201 key=customer%207%2F%C3%A9 {"n":0}`); got != "OK 0 DURABLE DUPLICATE" {
		t.Fatalf("the same id again: %q", got)
	}
	expectPrefix(t, c.do(`PUBX kx WRITTEN {"n":1}`), "OK 1 WRITTEN")
	expectPrefix(t, c.do(`PUBX kx DURABLE key=a+b=c null`), "OK 2 DURABLE")
	for _, tc := range []struct{ line, want string }{
		{`PUBX kx DURABLE color=red {"n":9}`, `ERR BAD_REQUEST unknown attribute "color"`},
		{`PUBX kx DURABLE KEY=k {"n":9}`, `ERR BAD_REQUEST unknown attribute "KEY"`},
		{`PUBX kx DURABLE key=a key=b {"n":9}`, "ERR BAD_REQUEST attribute key given twice"},
		{`PUBX kx DURABLE key=%20a {"n":9}`, "ERR BAD_REQUEST " + contract.KeyRule + "; this one starts with a space"},
		{`PUBX kx DURABLE key= {"n":9}`, "ERR BAD_REQUEST " + contract.KeyRule + "; this one is empty"},
		{`PUBX kx DURABLE key=a%07 {"n":9}`, "ERR BAD_REQUEST " + contract.KeyRule + "; this one has the control character U+0007"},
		{`PUBX kx DURABLE key=%zz {"n":9}`, "ERR BAD_REQUEST attribute key: the value is not percent-encoded"},
		{`PUBX kx DURABLE id= {"n":9}`, "ERR BAD_REQUEST attribute id: 1 to 256 bytes"},
		{`PUBX kx DURABLE id=%FF {"n":9}`, "ERR BAD_REQUEST attribute id: 1 to 256 bytes"},
		{`PUBX kx DURABLE key=k`, "ERR BAD_REQUEST usage: PUBX"},
		{`PUBX kx DURABLE key=k {"n":`, "ERR BAD_REQUEST payload is not valid JSON; usage: PUBX"},
		{`PUBX k..x DURABLE key=k {"n":9}`, "ERR BAD_REQUEST"},
	} {
		expectPrefix(t, c.do(tc.line), tc.want)
	}
	_, payloads := c.fetch("FETCH kx g 10 0")
	if len(payloads) != 3 {
		t.Fatalf("stored %d messages, want 3: %q", len(payloads), payloads)
	}
	type stored struct {
		Content        json.RawMessage `json:"content"`
		ID             string          `json:"id"`
		IDFromProducer bool            `json:"idFromProducer"`
		Key            *string         `json:"key"`
	}
	var ms []stored
	for _, p := range payloads {
		var m stored
		if err := json.Unmarshal([]byte(p), &m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	if m := ms[0]; m.Key == nil || *m.Key != "customer 7/é" || m.ID != "evt 1" || !m.IDFromProducer || string(m.Content) != `{"n":0}` {
		t.Errorf("PUBX with key= and id= stored %s", payloads[0])
	}
	if m := ms[1]; m.Key != nil || m.IDFromProducer || strings.Contains(payloads[1], `"key"`) {
		t.Errorf("PUBX without attributes stored %s, want PUB's shape", payloads[1])
	}
	if m := ms[2]; m.Key == nil || *m.Key != "a+b=c" || string(m.Content) != "null" {
		t.Errorf("PUBX key=a+b=c stored %s, want the key a+b=c ('+' is itself)", payloads[2])
	}
}

// PUBX lines sent together are pipelined like PUB's: one write, replies in
// line order, a refused line answered in its place.
func TestPubXPipelined(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	if _, err := c.nc.Write([]byte("PUBX px DURABLE key=a {\"n\":0}\nPUBX px DURABLE nope=1 {\"n\":1}\nPUB px DURABLE {\"n\":2}\nPUBX px DURABLE key=b id=i-3 {\"n\":3}\n")); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"OK 0 DURABLE", `ERR BAD_REQUEST unknown attribute "nope"`, "OK 1 DURABLE", "OK 2 DURABLE"} {
		expectPrefix(t, c.read(), want)
	}
	_, payloads := c.fetch("FETCH px g 10 0")
	var keys []string
	for _, p := range payloads {
		keys = append(keys, contract.MessageKey([]byte(p)))
	}
	if strings.Join(keys, ",") != "a,,b" {
		t.Fatalf("keys %q, want a, none, b", keys)
	}
}
