package contract

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestDecodeMessage(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	ok := []struct{ name, in, want string }{
		{"string topic", `{"topic":"a.b","content":{"x":1},"id":"m1"}`,
			`{"topic":{"name":"a.b"},"content":{"x":1},"id":"m1","idFromProducer":true,"timestamp":1700000000123}`},
		{"object topic, whitespace compacted, headers sorted", " {\n \"topic\": {\"name\": \"a\"} , \"content\" : { \"x\" : [1, 2], \"s\": \"a b\" }, \"headers\": {\"z\":\"1\",\"a\":\"2\"}, \"id\": \"m\\n\" }\n",
			`{"topic":{"name":"a"},"content":{"x":[1,2],"s":"a b"},"id":"m\n","idFromProducer":true,"timestamp":1700000000123,"headers":{"a":"2","z":"1"}}`},
		{"null content kept", `{"topic":"a","content":null,"id":"i"}`,
			`{"topic":{"name":"a"},"content":null,"id":"i","idFromProducer":true,"timestamp":1700000000123}`},
		{"escaped key", `{"topic":"a","cont\u0065nt":"v","id":"i"}`,
			`{"topic":{"name":"a"},"content":"v","id":"i","idFromProducer":true,"timestamp":1700000000123}`},
		{"unknown fields ignored", `{"topic":"a","content":1,"id":"i","extra":{"deep":[true]}}`,
			`{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"timestamp":1700000000123}`},
		{"surrogate pair and an escaped backslash in the id", `{"topic":"a","content":1,"id":"\ud83d\ude00\\udc00"}`,
			`{"topic":{"name":"a"},"content":1,"id":"😀\\udc00","idFromProducer":true,"timestamp":1700000000123}`},
		{"unicode content", `{"topic":"a","content":"é\u2028","id":"i"}`,
			`{"topic":{"name":"a"},"content":"é\u2028","id":"i","idFromProducer":true,"timestamp":1700000000123}`},
	}
	for _, c := range ok {
		d, err := DecodeMessage([]byte(c.in), now, nil)
		topic, id, stored := d.Topic, d.ID, d.Stored
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if string(stored) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, stored, c.want)
		}
		if !json.Valid(stored) || strings.Contains(string(stored), "\n") {
			t.Errorf("%s: stored is not single-line valid JSON: %q", c.name, stored)
		}
		var m struct {
			ID string `json:"id"`
		}
		json.Unmarshal(stored, &m)
		if m.ID != id || topic == "" || !d.FromProducer {
			t.Errorf("%s: id %q (from producer %t) topic %q, stored id %q", c.name, id, d.FromProducer, topic, m.ID)
		}
		sid, fromProducer, ts, ok := StoredMeta(stored)
		if !ok || sid != id || !fromProducer || ts != now.UnixMilli() {
			t.Errorf("%s: StoredMeta = %q %t %d %t", c.name, sid, fromProducer, ts, ok)
		}
	}
	bad := map[string]string{
		`[1]`:                                                 "must be a JSON object",
		`"x"`:                                                 "must be a JSON object",
		`{"topic":"a","content":1} x`:                         "data after",
		`{"topic":"a","content":}`:                            "invalid JSON",
		`{"content":1}`:                                       `"topic" is required`,
		`{"topic":"a"}`:                                       `"content" is required`,
		`{"topic":5,"content":1}`:                             `"topic" must be a string`,
		`{"topic":{"nom":"a"},"content":1}`:                   `{"name": "<topic>"}`,
		`{"topic":"a..b","content":1}`:                        "empty segment",
		`{"topic":"a","content":1,"id":5}`:                    `"id" must be a string`,
		`{"topic":"a","content":1,"id":""}`:                   `"id" must be 1-256 bytes`,
		`{"topic":"a","content":1,"headers":{"k":1}}`:         `"headers" must be an object of strings`,
		`{"topic":"a","content":1,"headers":[]}`:              `"headers" must be an object of strings`,
		"{\"topic\":\"a\",\"content\":\"\xff\"}":              "invalid UTF-8",
		`{"topic":"a","content":` + strings.Repeat("[", 1000): "nested deeper",
		`{"topic":"a","content":1,"topic":"b"}`:               `field "topic" is given more than once`,
		`{"topic":"a","content":1,"cont\u0065nt":2}`:          `field "content" is given more than once`,
		`{"topic":"a","content":1,"id":"x","id":"y"}`:         `field "id" is given more than once`,
		`{"topic":"a","content":1,"id":"\udc00"}`:             `lone UTF-16 surrogate`,
		`{"topic":"a","content":1,"id":"a\ud800"}`:            `lone UTF-16 surrogate`,
		`{"topic":"a","content":1,"id":"\ud800\u0041"}`:       `lone UTF-16 surrogate`,
	}
	for in, want := range bad {
		d, err := DecodeMessage([]byte(in), now, nil)
		stored := d.Stored
		if err == nil || stored != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeMessage(%.40q) = %q, %v; want error containing %q", in, stored, err, want)
		}
		if _, ok := err.(*InputError); err != nil && !ok {
			t.Errorf("DecodeMessage(%.40q): error %T is not a client error", in, err)
		}
	}
}

func TestEncodeMessageMatchesDecode(t *testing.T) {
	now := time.UnixMilli(42)
	a, err := EncodeMessage("t", json.RawMessage(`{ "a" : [1, 2] }`), "id1", map[string]string{"k": "v"}, now)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeMessage([]byte(`{"topic":"t","content":{ "a" : [1, 2] },"id":"id1","headers":{"k":"v"}}`), now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b := d.Stored; string(a) != string(b) {
		t.Fatalf("EncodeMessage %s != decodeMessage %s", a, b)
	}
	if _, err := EncodeMessage("t", json.RawMessage(`{`), "", nil, now); err == nil {
		t.Fatal("invalid content accepted")
	}
}

// TestAppendMessageReusesDst: AppendMessage writes over dst[:0] in place
// when it is large enough and gives what EncodeMessage gives (the ids
// aside: generated ones differ; they have the same shape).
func TestAppendMessageReusesDst(t *testing.T) {
	now := time.UnixMilli(42)
	dst := make([]byte, 0, 256)
	for _, id := range []string{"id1", ""} {
		a, err := AppendMessage(append(dst, "old bytes"...), "t", json.RawMessage(`{ "a" : [1, 2] }`), id, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		e, err := EncodeMessage("t", json.RawMessage(`{ "a" : [1, 2] }`), id, nil, now)
		if err != nil {
			t.Fatal(err)
		}
		if &a[0] != &dst[:1][0] {
			t.Fatalf("id %q: not written in dst", id)
		}
		gen := regexp.MustCompile(`"id":"[0-9a-f]+-[0-9a-f]+"`)
		if id == "" && (!gen.Match(a) || !gen.Match(e)) {
			t.Fatalf("generated ids: %s, %s", a, e)
		}
		if x, y := gen.ReplaceAllString(string(a), ""), gen.ReplaceAllString(string(e), ""); x != y {
			t.Fatalf("id %q: AppendMessage %s != EncodeMessage %s", id, a, e)
		}
	}
	content := json.RawMessage(`{"a":1}`)
	if got := testing.AllocsPerRun(100, func() {
		dst, _ = AppendMessage(dst, "t", content, "", nil, now)
	}); got != 0 {
		t.Fatalf("AppendMessage into a large enough dst: %v allocations", got)
	}
}

// TestGeneratedIDNotFromProducer: an id the broker generates is stored
// without idFromProducer, by both encoders, and StoredMeta reports it so.
func TestGeneratedIDNotFromProducer(t *testing.T) {
	now := time.UnixMilli(42)
	d, err := DecodeMessage([]byte(`{"topic":"t","content":1}`), now, nil)
	if err != nil || d.FromProducer || d.ID == "" || strings.Contains(string(d.Stored), IDFromProducerMember) {
		t.Fatalf("decode without id: %+v %v", d, err)
	}
	e, err := EncodeMessage("t", json.RawMessage(`1`), "", nil, now)
	if err != nil || strings.Contains(string(e), IDFromProducerMember) {
		t.Fatalf("encode without id: %s %v", e, err)
	}
	for _, stored := range [][]byte{d.Stored, e} {
		if id, fromProducer, ts, ok := StoredMeta(stored); !ok || id == "" || fromProducer || ts != 42 {
			t.Fatalf("StoredMeta(%s) = %q %t %d %t", stored, id, fromProducer, ts, ok)
		}
	}
	for _, bad := range []string{``, `[]`, `{"id":5}`, `{"content":1}`, `{"id":"x"`} {
		if _, _, _, ok := StoredMeta([]byte(bad)); ok {
			t.Errorf("StoredMeta(%q) ok", bad)
		}
	}
}

// An unknown member is ignored, but a near miss of a member of a message
// (another case or '-'/'_': "Delay", "deliver_at", "TTL"; one typing slip
// from an optional member of 5 letters or more: "dealy", "header") is a
// 400 naming both: ignored, it would publish at once what was meant for
// later, or keep for ever what was meant to expire. Members a slip away
// from topic or content ("context", "topics") are still ignored.
func TestDecodeMessageRefusesNearMisses(t *testing.T) {
	now := time.UnixMilli(1767225600000)
	for member, want := range map[string]string{
		`"Delay":"1h"`:   "delay",
		`"deliver_at":1`: "deliverAt",
		`"deliver-at":1`: "deliverAt",
		`"DeliverAt":1`:  "deliverAt",
		`"TTL":"1h"`:     "ttl",
		`"Headers":{}`:   "headers",
		`"ID":"x"`:       "id",
		`"Key":"k"`:      "key",
		`"expires_at":1`: "expiresAt",
		`"Topic":"b"`:    "topic",
		`"header":{}`:    "headers",
		`"dealy":"1h"`:   "delay",
		`"delays":"1h"`:  "delay",
		`"delivreAt":1`:  "deliverAt",
		`"expiresat":1`:  "expiresAt",
	} {
		_, err := DecodeMessage([]byte(`{"topic":"a","content":1,`+member+`}`), now, nil)
		name := member[1 : strings.IndexByte(member[1:], '"')+1]
		says := fmt.Sprintf(`field %q is not a member of a message; did you mean %q?`, name, want)
		if err == nil || Classify(err).Status != 400 || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v, want a 400 saying %s", member, err, says)
		}
	}
	// Other unknown members are still ignored (the Java clients' and
	// stored messages' members among them).
	for _, member := range []string{`"idFromProducer":true`, `"timestamp":1`, `"x":1`, `"topicName":"b"`, `"ids":"x"`, `"keys":"k"`, `"tl":"1h"`, `"dl":1`, `"type":"t"`, `"context":{"a":1}`, `"topics":["x"]`, `"contents":1`, `"delayMs":5`} {
		if _, err := DecodeMessage([]byte(`{"topic":"a","content":1,`+member+`}`), now, nil); err != nil {
			t.Errorf("%s: %v, want it ignored", member, err)
		}
	}
}
