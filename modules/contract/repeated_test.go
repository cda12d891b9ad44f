package contract

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestFindRepeatedMember(t *testing.T) {
	for body, want := range map[string]string{
		`{"offset":0,"offset":3}`:                         "offset",
		`{"to":"earliest","to":"latest"}`:                 "to",
		`{"commit":{"interval":"1s","interval":"2s"}}`:    "commit.interval",
		`{"a":[{"x":1},{"y":1,"y":2}]}`:                   "a[1].y",
		`[{"k":1,"k":1}]`:                                 "[0].k",
		`{"topic":{"name":"q1","name":"q2"},"content":1}`: "topic.name",
		`{"a":{"b":1},"b":{"b":1},"a":2}`:                 "a",
	} {
		if got, ok := FindRepeatedMember([]byte(body)); !ok || got != want {
			t.Errorf("FindRepeatedMember(%s) = %q, %v; want %q", body, got, ok, want)
		}
	}
	for _, body := range []string{``, `{}`, `{"a":1,"A":2}`, `{"a":{"a":{"a":1}}}`, `[{"a":1},{"a":2}]`, `{"a":1,`, `"s"`, `{"a":"{\"a\":1,\"a\":2}"}`} {
		if got, ok := FindRepeatedMember([]byte(body)); ok {
			t.Errorf("FindRepeatedMember(%s) = %q; want none", body, got)
		}
	}
}

func TestObjectMembers(t *testing.T) {
	for body, want := range map[string]int{
		`{}`: 0, `{"a":"1"}`: 1, `{"a":"1","a":"2"}`: 2, `{"a:b":"c:d","e":"\":"}`: 2, `{"a":{"b":"c"},"d":["e:"]}`: 2,
	} {
		if got := objectMembers([]byte(body)); got != want {
			t.Errorf("objectMembers(%s) = %d, want %d", body, got, want)
		}
	}
}

// A publish refuses a repeated member in the topic's object form and in
// headers (encoding/json would keep the last silently), and a topic
// object whose one member is not spelt "name".
func TestPublishRefusesRepeatedMembers(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for body, want := range map[string]string{
		`{"topic":{"name":"q1","name":"q2"},"content":1}`:       `must be {"name": "<topic>"}, with that one member`,
		`{"topic":{"Name":"q1"},"content":1}`:                   `must be {"name": "<topic>"}, with that one member`,
		`{"topic":{"name":"q1","x":1},"content":1}`:             `with that one member`,
		`{"topic":"t","content":1,"headers":{"a":"1","a":"2"}}`: `the header "a" is given more than once`,
	} {
		d, err := DecodeMessage([]byte(body), now, nil)
		if err == nil || d.Stored != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeMessage(%s) = %v; want an error containing %q", body, err, want)
		}
	}
	for _, body := range []string{`{"topic":{"name":"q1"},"content":1}`, `{"topic":"t","content":1,"headers":{"a":"1","A":"2","b:":"c:"}}`} {
		if _, err := DecodeMessage([]byte(body), now, nil); err != nil {
			t.Errorf("DecodeMessage(%s): %v", body, err)
		}
	}
}

// A ttl 1ms longer than the delay ends after the due time, whatever the
// publish time's sub-milliseconds (both count from the stored timestamp);
// "id": null is absent, as the other optional members' null is.
func TestDelayTTLRoundingAndNullID(t *testing.T) {
	for _, ns := range []int64{0, 1, 400_000, 999_999} {
		now := time.UnixMilli(1_800_000_000_000).Add(time.Duration(ns))
		d, err := DecodeMessage([]byte(`{"topic":"t","content":1,"delay":"3s","ttl":"3001ms"}`), now, nil)
		if err != nil || d.DeliverAt != 1_800_000_003_000 || d.ExpiresAt != 1_800_000_003_001 {
			t.Errorf("publish at +%dns: due %d, expiresAt %d, %v; want 1800000003000 and 1800000003001", ns, d.DeliverAt, d.ExpiresAt, err)
		}
	}
	d, err := DecodeMessage([]byte(`{"topic":"t","content":1,"id":null}`), time.UnixMilli(1_800_000_000_000), nil)
	if err != nil || d.FromProducer || d.ID == "" {
		t.Errorf(`"id": null: %+v, %v; want a generated id`, d, err)
	}
}

// A number beyond a 64-bit float's range is refused at publish (Go's
// encoding/json, the generated client's, could not read the message back);
// large but representable ones, and tiny ones that round to 0, are taken.
func TestPublishRefusesNumbersBeyondFloat64(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	for _, c := range []string{`1e400`, `-1E+309`, `{"a":[2e308]}`, `1` + strings.Repeat("0", 309)} {
		d, err := DecodeMessage([]byte(`{"topic":"t","content":`+c+`}`), now, nil)
		if err == nil || d.Stored != nil || !strings.Contains(err.Error(), "beyond the range of a 64-bit float") {
			t.Errorf("content %.40s: %v; want refused", c, err)
		}
	}
	for _, c := range []string{`1e308`, `-1.7976931348623157e308`, `1e-400`, `123456789012345678901234567890`, `1` + strings.Repeat("0", 300)} {
		if _, err := DecodeMessage([]byte(`{"topic":"t","content":`+c+`}`), now, nil); err != nil {
			t.Errorf("content %.40s: %v", c, err)
		}
	}
}

// Decode errors of request bodies are worded for the API: no "json:"
// prefix, no Go type names.
func TestJSONDecodeText(t *testing.T) {
	var v struct {
		A int `json:"a"`
	}
	for body, want := range map[string]string{
		``:          "the body is empty: send a JSON object",
		`not json`:  "not valid JSON at byte 2 (invalid character 'o' in literal null (expecting 'u'))",
		`[]`:        "the body must be a JSON object, not a JSON array",
		`{"a":"x"}`: `field "a" must be a JSON number, not a JSON string`,
		`{"b":1}`:   `unknown field "b"`,
		`{"a":1`:    "the body ends inside its JSON value",
	} {
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		if got := JSONDecodeText(dec.Decode(&v)); got != want {
			t.Errorf("%q: %q, want %q", body, got, want)
		}
	}
}
