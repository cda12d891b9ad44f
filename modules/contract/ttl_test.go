package contract

import (
	"strings"
	"testing"
	"time"
)

// TestDecodeMessageTTL: a publish request's "ttl" is stored as
// "expiresAt" (timestamp + ttl, Unix ms) after the timestamp; absent or
// null stores nothing (the bytes of a message without one); every other
// value, every string that breaks the rule and a request that sets
// "expiresAt" itself are 400s stating the rule and storing nothing.
func TestDecodeMessageTTL(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	const none = `{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"timestamp":1700000000123}`
	with := func(exp string) string {
		return `{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"timestamp":1700000000123,"expiresAt":` + exp + `}`
	}
	ok := []struct {
		name, ttl string
		wantTTL   time.Duration
		want      string
	}{
		{"absent", ``, 0, none},
		{"null", `,"ttl":null`, 0, none},
		{"1ms", `,"ttl":"1ms"`, time.Millisecond, with("1700000000124")},
		{"30s", `,"ttl":"30s"`, 30 * time.Second, with("1700000030123")},
		{"sub-millisecond part dropped", `,"ttl":"1.9ms"`, time.Millisecond, with("1700000000124")},
		{"escaped", `,"ttl":"1\u0068"`, time.Hour, with("1700003600123")},
		{"10 years", `,"ttl":"87600h"`, MaxTTL, with("2015360000123")},
	}
	for _, c := range ok {
		d, err := DecodeMessage([]byte(`{"topic":"a","content":1,"id":"i"`+c.ttl+`}`), now, nil)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if d.TTL != c.wantTTL || string(d.Stored) != c.want {
			t.Errorf("%s: ttl %v, stored\n %s\nwant ttl %v, stored\n %s", c.name, d.TTL, d.Stored, c.wantTTL, c.want)
		}
		wantExp := int64(0)
		if c.wantTTL > 0 {
			wantExp = now.UnixMilli() + c.wantTTL.Milliseconds()
		}
		if got := MessageExpiresAt(d.Stored); got != wantExp || d.ExpiresAt != wantExp {
			t.Errorf("%s: MessageExpiresAt(stored) = %d, Decoded.ExpiresAt %d, want %d", c.name, got, d.ExpiresAt, wantExp)
		}
	}
	bad := map[string]string{
		`"ttl":30`:                    "a JSON number, not a string",
		`"ttl":true`:                  "a JSON boolean",
		`"ttl":{}`:                    "a JSON object",
		`"ttl":""`:                    "empty",
		`"ttl":"30"`:                  `"30" is not a duration`,
		`"ttl":"soon"`:                "not a duration",
		`"ttl":"0s"`:                  "under 1ms",
		`"ttl":"-5s"`:                 "under 1ms",
		`"ttl":"999us"`:               "under 1ms",
		`"ttl":"87600h1ms"`:           "over 87600h",
		`"ttl":"9999999h"`:            `"9999999h" is over 87600h`,
		`"ttl":"1.5h99999999999m"`:    `"1.5h99999999999m" is over 87600h`,
		`"ttl":"h"`:                   `"h" is not a duration`,
		`"ttl":"1s","ttl":"2s"`:       `field "ttl" is given more than once`,
		`"expiresAt":1800000000000`:   `field "expiresAt" is set by the broker`,
		`"ttl":"1s","expiresAt":null`: `field "expiresAt" is set by the broker`,
	}
	for member, want := range bad {
		in := `{"topic":"a","content":1,` + member + `}`
		d, err := DecodeMessage([]byte(in), now, nil)
		if err == nil || d.Stored != nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeMessage(%s) = %q, %v; want error containing %q", in, d.Stored, err, want)
			continue
		}
		if _, ok := err.(*InputError); !ok {
			t.Errorf("DecodeMessage(%s): error %T, want *InputError", in, err)
		}
		if !strings.Contains(want, "expiresAt") && !strings.Contains(want, "more than once") && !strings.Contains(err.Error(), TTLRule) {
			t.Errorf("DecodeMessage(%s): %q does not state the rule", in, err)
		}
	}
}

// TestAppendTTLMessage: the encoder every other producer path uses stores
// the ttl as DecodeMessage does, 0 is none, and a ttl outside the bounds
// is refused.
func TestAppendTTLMessage(t *testing.T) {
	now := time.UnixMilli(1700000000123)
	b, err := AppendTTLMessage(nil, "a", []byte(`1`), "i", "k", 2*time.Second, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"topic":{"name":"a"},"content":1,"id":"i","idFromProducer":true,"key":"k","timestamp":1700000000123,"expiresAt":1700000002123}`
	if string(b) != want {
		t.Errorf("stored %s\nwant    %s", b, want)
	}
	plain, _ := AppendKeyedMessage(nil, "a", []byte(`1`), "i", "k", nil, now)
	none, _ := AppendTTLMessage(nil, "a", []byte(`1`), "i", "k", 0, nil, now)
	if string(plain) != string(none) {
		t.Errorf("ttl 0 stored %s, want the bytes without a ttl %s", none, plain)
	}
	for _, ttl := range []time.Duration{-time.Second, time.Microsecond, MaxTTL + time.Millisecond} {
		if b, err := AppendTTLMessage(nil, "a", []byte(`1`), "", "", ttl, nil, now); err == nil || !strings.Contains(err.Error(), TTLRule) {
			t.Errorf("ttl %v: %s, %v; want the rule", ttl, b, err)
		}
	}
}

// TestMessageExpiresAt: read back as one integer member at the top level;
// anything else (nested, not a positive integer, invalid JSON) is none,
// and Expired compares at or past it.
func TestMessageExpiresAt(t *testing.T) {
	for body, want := range map[string]int64{
		`{"expiresAt":5}`:                    5,
		`{"expiresAt":5,"expiresAt":7}`:      7,
		`{"content":{"expiresAt":5}}`:        0,
		`{"headers":{"expiresAt":"5"}}`:      0,
		`{"expiresAt":"5"}`:                  0,
		`{"expiresAt":-5}`:                   0,
		`{"expiresAt":1.5}`:                  0,
		`{"expiresAt":5`:                     0,
		`{"id":"x","key":"k","expiresAt":9}`: 9,
	} {
		if got := MessageExpiresAt([]byte(body)); got != want {
			t.Errorf("MessageExpiresAt(%s) = %d, want %d", body, got, want)
		}
	}
	id, key, exp := MessageMeta([]byte(`{"id":"x","key":"k","expiresAt":9}`))
	if id != "x" || key != "k" || exp != 9 {
		t.Errorf("MessageMeta = %q %q %d", id, key, exp)
	}
	at := time.UnixMilli(1000)
	for _, c := range []struct {
		exp  int64
		want bool
	}{{0, false}, {999, true}, {1000, true}, {1001, false}} {
		if got := Expired(c.exp, at); got != c.want {
			t.Errorf("Expired(%d, 1000ms) = %v, want %v", c.exp, got, c.want)
		}
	}
}
