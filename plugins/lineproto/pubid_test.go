package lineproto

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
)

// stored is the part of a stored message JSON the PUBID tests look at.
type stored struct {
	Content      json.RawMessage `json:"content"`
	ID           string          `json:"id"`
	FromProducer *bool           `json:"idFromProducer"`
}

func decodeStored(t *testing.T, payload string) stored {
	t.Helper()
	var m stored
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		t.Fatalf("stored message %s: %v", payload, err)
	}
	return m
}

// next is the topic's high watermark: how many entries it stored.
func (e *testEnv) next(t *testing.T, topic string) int64 {
	t.Helper()
	q, ok := e.reg.Get(topic)
	if !ok {
		t.Fatalf("topic %s does not exist", topic)
	}
	return q.Stats().NextOffset
}

// TestPubIDDeduplicates: the same id published again to the same topic is
// answered with the first offset and DUPLICATE and stores nothing; another
// id, or the same id on another topic, is a new message.
func TestPubIDDeduplicates(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	for _, step := range []struct{ line, want string }{
		{`PUBID t DURABLE order-42 {"orderId":42}`, "OK 0 DURABLE"},
		{`PUBID t DURABLE order-42 {"orderId":42}`, "OK 0 DURABLE DUPLICATE"},
		{`pubid t written order-42 {"orderId":"other content, same id"}`, "OK 0 WRITTEN DUPLICATE"},
		{`PUBID t DURABLE order-43 {"orderId":43}`, "OK 1 DURABLE"},
		{`PUBID u DURABLE order-42 {"orderId":42}`, "OK 0 DURABLE"},
		{`PUBID u DURABLE order-42 {"orderId":42}`, "OK 0 DURABLE DUPLICATE"},
		{`PUBID t DURABLE order-43 {"orderId":43}`, "OK 1 DURABLE DUPLICATE"},
	} {
		if got := c.do(step.line); got != step.want {
			t.Fatalf("%q: %q, want %q", step.line, got, step.want)
		}
	}
	if n := e.next(t, "t"); n != 2 {
		t.Fatalf("topic t stored %d entries, want 2", n)
	}
	if n := e.next(t, "u"); n != 1 {
		t.Fatalf("topic u stored %d entries, want 1", n)
	}
	offs, payloads := c.fetch("FETCH t g 10 0")
	if fmt.Sprint(offs) != "[0 1]" {
		t.Fatalf("offsets %v", offs)
	}
	for i, want := range []struct{ id, content string }{{"order-42", `{"orderId":42}`}, {"order-43", `{"orderId":43}`}} {
		m := decodeStored(t, payloads[i])
		if m.ID != want.id || string(m.Content) != want.content || m.FromProducer == nil || !*m.FromProducer {
			t.Fatalf("stored message %d: %s; want id %s, content %s, %q:true", i, payloads[i], want.id, want.content, contract.IDFromProducerMember)
		}
	}
	if _, payloads := c.fetch("FETCH u g 10 0"); len(payloads) != 1 || decodeStored(t, payloads[0]).ID != "order-42" {
		t.Fatalf("topic u: %v", payloads)
	}
}

// TestPubIDAccepted: an ACCEPTED duplicate answers at once with
// "OK - ACCEPTED DUPLICATE"; a later DURABLE publish of the same id waits
// for the first one and answers its offset.
func TestPubIDAccepted(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	for _, step := range []struct{ line, want string }{
		{`PUBID t ACCEPTED a {"n":1}`, "OK - ACCEPTED"},
		{`PUBID t ACCEPTED a {"n":1}`, "OK - ACCEPTED DUPLICATE"},
		{`PUBID t DURABLE a {"n":1}`, "OK 0 DURABLE DUPLICATE"},
		{`PUBID t ACCEPTED b {"n":2}`, "OK - ACCEPTED"},
		{`PUBID t DURABLE b {"n":2}`, "OK 1 DURABLE DUPLICATE"},
	} {
		if got := c.do(step.line); got != step.want {
			t.Fatalf("%q: %q, want %q", step.line, got, step.want)
		}
	}
	if offs, _ := c.fetch("FETCH t g 10 0"); fmt.Sprint(offs) != "[0 1]" {
		t.Fatalf("offsets %v, want [0 1]", offs)
	}
}

// TestPubNeverDeduplicates: PUB generates an id per message, never
// deduplicated and not marked as the producer's.
func TestPubNeverDeduplicates(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	for i, want := range []string{"OK 0 DURABLE", "OK 1 DURABLE"} {
		if got := c.do(`PUB t DURABLE {"same":true}`); got != want {
			t.Fatalf("PUB %d: %q, want %q", i, got, want)
		}
	}
	if got := c.do(`PUB t ACCEPTED {"same":true}`); got != "OK - ACCEPTED" {
		t.Fatalf("PUB ACCEPTED: %q", got)
	}
	// Durable at offset 3: the ACCEPTED one before it is durable too.
	if got := c.do(`PUB t DURABLE {"same":true}`); got != "OK 3 DURABLE" {
		t.Fatalf("PUB after ACCEPTED: %q", got)
	}
	offs, payloads := c.fetch("FETCH t g 10 0")
	if fmt.Sprint(offs) != "[0 1 2 3]" {
		t.Fatalf("offsets %v", offs)
	}
	ids := map[string]bool{}
	for _, p := range payloads {
		m := decodeStored(t, p)
		if m.ID == "" || m.FromProducer != nil || strings.Contains(p, contract.IDFromProducerMember) {
			t.Fatalf("PUB stored %s", p)
		}
		ids[m.ID] = true
	}
	if len(ids) != 4 {
		t.Fatalf("PUB ids not distinct: %v", payloads)
	}
}

// TestPubIDBadID: an id that is empty, too long, not UTF-8 or has a
// control character, and a PUBID without a payload, are ERR BAD_REQUEST
// and store nothing (not even the topic); an id of exactly the maximum
// length is accepted.
func TestPubIDBadID(t *testing.T) {
	e := start(t, Options{MaxLineBytes: 2048}, groups.Options{})
	c := e.dial(t)
	for _, tc := range []struct{ line, text string }{
		{"PUBID bad DURABLE " + strings.Repeat("i", contract.MaxIDBytes+1) + " {}", "over 256"},
		{"PUBID bad DURABLE " + strings.Repeat("é", contract.MaxIDBytes/2) + "x {}", "over 256"},
		{"PUBID bad DURABLE a\x01b {}", "control character"},
		{"PUBID bad DURABLE a\tb {}", "control character"},
		{"PUBID bad DURABLE a\x7fb {}", "control character"},
		{"PUBID bad DURABLE a\u0085b {}", "control character"},
		{"PUBID bad DURABLE a\xffb {}", "UTF-8"},
		{"PUBID bad DURABLE  {}", "empty"},
		{"PUBID bad DURABLE id", "usage: PUBID"},
		{"PUBID bad DURABLE id ", "usage: PUBID"},
		{"PUBID bad DURABLE", "usage: PUBID"},
		{"PUBID bad", "usage: PUBID"},
		{"PUBID", "usage: PUBID"},
	} {
		got := c.do(tc.line)
		if !strings.HasPrefix(got, "ERR BAD_REQUEST ") || !strings.Contains(got, tc.text) {
			t.Errorf("%q: %q, want ERR BAD_REQUEST mentioning %q", tc.line, got, tc.text)
		}
	}
	if _, ok := e.reg.Get("bad"); ok {
		t.Fatalf("a refused PUBID created topic bad (next=%d)", e.next(t, "bad"))
	}
	longest := strings.Repeat("é", contract.MaxIDBytes/2)
	if got := c.do("PUBID good DURABLE " + longest + " {}"); got != "OK 0 DURABLE" {
		t.Fatalf("id of %d bytes: %q", len(longest), got)
	}
	if got := c.do("PUBID good DURABLE " + longest + " {}"); got != "OK 0 DURABLE DUPLICATE" {
		t.Fatalf("id of %d bytes again: %q", len(longest), got)
	}
	if _, payloads := c.fetch("FETCH good g 10 0"); len(payloads) != 1 || decodeStored(t, payloads[0]).ID != longest {
		t.Fatalf("stored %v", payloads)
	}
}
