package contract

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

// TestDecodeMessageKey: a publish request's "key" is stored as "key"
// after the id and before the timestamp; absent or null stores nothing
// (the bytes of a message without a key); every other value, and every
// string that breaks the rule, is a 400 stating the rule and storing
// nothing.
func TestDecodeMessageKey(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	const noKey = `{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"timestamp":1700000000123}`
	withKey := func(k string) string {
		return `{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"key":` + k + `,"timestamp":1700000000123}`
	}
	longest := strings.Repeat("é", MaxKeyBytes/2)
	ok := []struct{ name, key, wantKey, want string }{
		{"absent", ``, "", noKey},
		{"null", `,"key":null`, "", noKey},
		{"plain", `,"key":"order-42"`, "order-42", withKey(`"order-42"`)},
		{"inner spaces", `,"key":"a b  c"`, "a b  c", withKey(`"a b  c"`)},
		{"escapes decoded, stored plainly", `,"key":"\u0041\"\\\/x"`, `A"\/x`, withKey(`"A\"\\/x"`)},
		{"unicode, surrogate pair", `,"key":"é\ud83d\ude00"`, "é😀", withKey(`"é😀"`)},
		{"256 bytes", `,"key":"` + longest + `"`, longest, withKey(`"` + longest + `"`)},
		{"U+00A0 at the ends is not a space", `,"key":"\u00a0k\u00a0"`, "\u00a0k\u00a0", withKey("\"\u00a0k\u00a0\"")},
		{"after headers, escaped member name", `,"headers":{"h":"v"},"k\u0065y":"k"`, "k",
			`{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"key":"k","timestamp":1700000000123,"headers":{"h":"v"}}`},
	}
	for _, c := range ok {
		d, err := DecodeMessage([]byte(`{"topic":"a","content":1,"id":"i"`+c.key+`}`), now, nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if d.Key != c.wantKey || string(d.Stored) != c.want {
			t.Errorf("%s: key %q, stored\n %s\nwant key %q, stored\n %s", c.name, d.Key, d.Stored, c.wantKey, c.want)
		}
		if got := MessageKey(d.Stored); got != c.wantKey {
			t.Errorf("%s: MessageKey(stored) = %q, want %q", c.name, got, c.wantKey)
		}
	}
	bad := map[string]string{
		`1`:                                  "a JSON number, not a string",
		`-0.5`:                               "a JSON number",
		`true`:                               "a JSON boolean",
		`{"k":"v"}`:                          "a JSON object",
		`["k"]`:                              "a JSON array",
		`""`:                                 "empty",
		`" k"`:                               "starts with a space",
		`"k "`:                               "ends with a space",
		`" "`:                                "starts with a space",
		`"` + longest + `x"`:                 "257 bytes",
		`"a\tb"`:                             "control character U+0009 at byte 1",
		`"a\u0000"`:                          "control character U+0000",
		`"a\u007f"`:                          "control character U+007F",
		"\"a\x7f\"":                          "control character U+007F",
		`"a\u0085"`:                          "control character U+0085",
		"\"a\u009f\"":                        "control character U+009F",
		`"\ud800"`:                           "lone UTF-16 surrogate",
		`"x\udc00y"`:                         "lone UTF-16 surrogate",
		`"k","key":"k"`:                      `field "key" is given more than once`,
		`null,"k\u0065y":"k"`:                `field "key" is given more than once`,
		`"k","content":2`:                    `field "content" is given more than once`,
		`"` + strings.Repeat("k", 300) + `"`: "300 bytes",
	}
	for key, want := range bad {
		in := `{"topic":"a","content":1,"key":` + key + `}`
		d, err := DecodeMessage([]byte(in), now, nil)
		if err == nil || d.Stored != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeMessage(%.60q) = %q, %v; want error containing %q", in, d.Stored, err, want)
			continue
		}
		if _, ok := err.(*InputError); !ok {
			t.Errorf("DecodeMessage(%.60q): error %T is not a client error", in, err)
		}
		if !strings.Contains(want, "given more than once") && !strings.HasPrefix(err.Error(), KeyRule+"; ") {
			t.Errorf("DecodeMessage(%.60q): error %q does not state the rule", in, err)
		}
	}
}

// TestEncodeKeyedMessage: EncodeKeyedMessage stores what DecodeMessage
// stores for the same key; "" is no key (EncodeMessage's bytes); an
// invalid key is refused with ValidateKey's error; AppendKeyedMessage
// writes in place like AppendMessage.
func TestEncodeKeyedMessage(t *testing.T) {
	now := time.UnixMilli(42)
	a, err := EncodeKeyedMessage("t", json.RawMessage(`{ "a" : 1 }`), "id1", "k-1", map[string]string{"h": "v"}, now)
	if err != nil {
		t.Fatal(err)
	}
	d, err := DecodeMessage([]byte(`{"topic":"t","content":{ "a" : 1 },"id":"id1","key":"k-1","headers":{"h":"v"}}`), now, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(d.Stored) || d.Key != "k-1" {
		t.Fatalf("EncodeKeyedMessage %s != DecodeMessage %s (key %q)", a, d.Stored, d.Key)
	}
	plain, _ := EncodeMessage("t", json.RawMessage(`1`), "id1", nil, now)
	unkeyed, err := EncodeKeyedMessage("t", json.RawMessage(`1`), "id1", "", nil, now)
	if err != nil || string(plain) != string(unkeyed) || strings.Contains(string(unkeyed), `"key"`) {
		t.Fatalf("no key: %s, %v; EncodeMessage gives %s", unkeyed, err, plain)
	}
	for _, k := range []string{" k", "k\n", "\xff", strings.Repeat("k", MaxKeyBytes+1)} {
		if b, err := EncodeKeyedMessage("t", json.RawMessage(`1`), "", k, nil, now); err == nil || b != nil || !strings.Contains(err.Error(), KeyRule) {
			t.Errorf("EncodeKeyedMessage(key %q) = %s, %v; want the rule's error", k, b, err)
		}
	}
	dst := make([]byte, 0, 256)
	b, err := AppendKeyedMessage(dst, "t", json.RawMessage(`1`), "", "k", nil, now)
	if err != nil || MessageKey(b) != "k" {
		t.Fatalf("AppendKeyedMessage = %s, %v", b, err)
	}
	if &b[0] != &dst[:1][0] {
		t.Fatal("AppendKeyedMessage did not write in dst")
	}
}

// TestMessageKey: the stored message's top-level "key", as encoding/json
// would read it; nothing for a key that is not a string, not a valid key
// (another tool's log) or not at the top level.
func TestMessageKey(t *testing.T) {
	tests := map[string]string{
		`{"topic":{"name":"t"},"content":{"key":"inner"},"id":"m-1","key":"k-1","timestamp":1,"headers":{"key":"h"}}`: "k-1",
		` { "key" : "x" } `:                          "x",
		`{"key":"a","key":"b"}`:                      "b",
		`{"k\u0065y":"esc"}`:                         "esc",
		`{"key":"\u00e9\n"}`:                         "",
		`{"key":" lead"}`:                            "",
		`{"key":""}`:                                 "",
		`{"key":7}`:                                  "",
		`{"key":"a","key":null}`:                     "",
		`{"content":{"key":"z"}}`:                    "",
		`{"headers":{"key":"z"}}`:                    "",
		`{"key":"x"`:                                 "",
		`["key","x"]`:                                "",
		`{"key":"` + strings.Repeat("k", 257) + `"}`: "",
	}
	for in, want := range tests {
		if got := MessageKey([]byte(in)); got != want {
			t.Errorf("MessageKey(%.60q) = %q, want %q", in, got, want)
		}
	}
	if id, key := MessageIDKey([]byte(`{"key":"k","id":"i"}`)); id != "i" || key != "k" {
		t.Errorf("MessageIDKey = %q, %q", id, key)
	}
}

// validKeyByTheRule is KeyRule written out with the unicode tables, for
// the fuzz tests to hold ValidateKey to.
func validKeyByTheRule(k string) bool {
	if len(k) == 0 || len(k) > MaxKeyBytes || !utf8.ValidString(k) || k[0] == ' ' || k[len(k)-1] == ' ' {
		return false
	}
	for _, r := range k {
		if unicode.Is(unicode.Cc, r) {
			return false
		}
	}
	return true
}

// FuzzKeyRoundTrip: ValidateKey is the written rule; a valid key survives
// every encoder and decoder unchanged (decode(encode(m)).Key == m.Key):
// EncodeKeyedMessage → MessageKey and encoding/json, and a publish
// request carrying it (escaped by encoding/json, or as plain as JSON
// allows) → DecodeMessage → Decoded.Key and MessageKey of the stored JSON;
// an invalid one is refused by both encoders. A valid key is an HTTP
// header value as it stands.
func FuzzKeyRoundTrip(f *testing.F) {
	for _, k := range []string{"order-42", "", " ", "a b", " a", "a ", "é", "\u0085", "\x7f", "\xff", "\"\\", "<&>", "\u2028", strings.Repeat("k", 256), strings.Repeat("k", 257)} {
		f.Add(k)
	}
	now := time.UnixMilli(7)
	f.Fuzz(func(t *testing.T, key string) {
		valid := validKeyByTheRule(key)
		if err := ValidateKey(key); (err == nil) != valid {
			t.Fatalf("ValidateKey(%q) = %v, the rule says valid=%t", key, err, valid)
		}
		stored, err := EncodeKeyedMessage("t", json.RawMessage(`{"key":"inner"}`), "", key, map[string]string{"key": "hdr"}, now)
		switch {
		case key == "":
			if err != nil || MessageKey(stored) != "" {
				t.Fatalf("no key: %s, %v", stored, err)
			}
		case !valid:
			if err == nil {
				t.Fatalf("EncodeKeyedMessage accepted the invalid key %q: %s", key, stored)
			}
		default:
			var m struct {
				Key string `json:"key"`
			}
			if err != nil || json.Unmarshal(stored, &m) != nil || m.Key != key || MessageKey(stored) != key {
				t.Fatalf("EncodeKeyedMessage(key %q) = %s, %v; encoding/json reads key %q, MessageKey %q", key, stored, err, m.Key, MessageKey(stored))
			}
			if !ValidHeaderValue(key) || strings.Trim(key, " \t") != key {
				t.Fatalf("valid key %q is not a header value as it stands", key)
			}
		}
		if !utf8.ValidString(key) {
			return // a JSON request cannot carry it as it is
		}
		escaped, _ := json.Marshal(key)
		for _, lit := range [][]byte{escaped, AppendJSONString(nil, key)} {
			req := `{"topic":"t","content":1,"key":` + string(lit) + `}`
			d, err := DecodeMessage([]byte(req), now, nil)
			switch {
			case valid && (err != nil || d.Key != key || MessageKey(d.Stored) != key):
				t.Fatalf("DecodeMessage(%q) = key %q, stored %s, %v; want key %q", req, d.Key, d.Stored, err, key)
			case !valid && err == nil:
				t.Fatalf("DecodeMessage(%q) accepted the invalid key: %s", req, d.Stored)
			}
		}
	})
}

// FuzzMessageKey: MessageKey reads what encoding/json reads as the
// top-level "key" string, when that is a valid key, and never panics.
func FuzzMessageKey(f *testing.F) {
	f.Add(`{"topic":{"name":"t"},"content":{"key":"inner"},"id":"m","key":"k-1","timestamp":1,"headers":{"key":"h"}}`)
	f.Add(`{"key":"a\"b"}`)
	f.Add(`{"x":[{"key":1}],"key":"\u00e9"}`)
	f.Add(`{"key":" x"}`)
	f.Fuzz(func(t *testing.T, s string) {
		got := MessageKey([]byte(s))
		if !json.Valid([]byte(s)) {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &m) != nil {
			if got != "" {
				t.Fatalf("MessageKey(%q) = %q for a non-object", s, got)
			}
			return
		}
		want := ""
		var k string
		if raw, ok := m["key"]; ok && json.Unmarshal(raw, &k) == nil && ValidateKey(k) == nil {
			want = k
		}
		if got != want {
			t.Fatalf("MessageKey(%q) = %q, want %q", s, got, want)
		}
	})
}
