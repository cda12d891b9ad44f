package contract

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

const (
	tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
)

func TestValidTraceparent(t *testing.T) {
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{tp1, true},
		{tp2, true},
		{"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},                 // a later version
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-what-the-future", true}, // its fields after a "-"
		{"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09x", false},               // not after a "-"
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", false},              // version 00 is 55 characters
		{"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},                // version ff
		{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", false},                // upper case
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},                // zero trace id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false},                // zero parent id
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", false},                // flags not hex
		{"00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01", false},                // dashes misplaced
		{"00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", false},
		{"0-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
		{"", false},
		{tp1 + "," + tp2, false}, // two fields joined
	} {
		if got := ValidTraceparent(c.v); got != c.ok {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", c.v, got, c.ok)
		}
	}
}

func TestValidTracestate(t *testing.T) {
	many := func(n int) string {
		var m []string
		for i := range n {
			m = append(m, "k"+strings.Repeat("a", i%3)+string(rune('a'+i%26))+string(rune('a'+i/26))+"=v")
		}
		return strings.Join(m, ",")
	}
	for _, c := range []struct {
		v  string
		ok bool
	}{
		{"rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", true},
		{"", true},
		{" rojo=1 ,\tcongo=2 ,, ", true},
		{"tenant1@vendor=x", true},
		{`k=a"b\c`, true}, // '"' and '\' are value characters
		{many(32), true},
		{many(33), false},
		{"k=" + strings.Repeat("v", 256), true},
		{"k=" + strings.Repeat("v", 257), false},
		{"a=1,b=" + strings.Repeat("v", 255) + ",c=" + strings.Repeat("v", 255), false}, // over 512 bytes
		{"Rojo=1", false}, // key upper case
		{"1abc=1", false}, // simple key starts with a letter
		{"rojo=1,rojo=2", false},
		{"rojo", false},
		{"rojo=", false},
		{"rojo=a=b", false},
		{"rojo=a b", true},
		{"rojo=\x01", false},
		{"t@" + strings.Repeat("s", 15) + "=1", false}, // system id over 14
	} {
		if got := ValidTracestate(c.v); got != c.ok {
			t.Errorf("ValidTracestate(%q) = %v, want %v", c.v, got, c.ok)
		}
	}
}

// decodeHeaders publishes body with tc and returns the stored headers and
// how many traceparent and tracestate values were dropped meanwhile.
func decodeHeaders(t *testing.T, body string, tc TraceContext) (map[string]string, uint64, uint64) {
	t.Helper()
	p0, s0 := TraceDropped()
	d, err := DecodeMessageTrace([]byte(body), time.UnixMilli(1), nil, tc)
	if err != nil {
		t.Fatalf("DecodeMessageTrace(%s): %v", body, err)
	}
	var m struct{ Headers map[string]string }
	if err := json.Unmarshal(d.Stored, &m); err != nil {
		t.Fatal(err)
	}
	p1, s1 := TraceDropped()
	return m.Headers, p1 - p0, s1 - s0
}

func TestDecodeMessageTrace(t *testing.T) {
	body := func(h string) string { return `{"topic":"t","content":1,"headers":` + h + `}` }
	for _, c := range []struct {
		name       string
		body       string
		tc         TraceContext
		want       map[string]string
		dropP, drS uint64
	}{
		{"json only", body(`{"traceparent":"` + tp1 + `","tracestate":"a=1","x":"y"}`), TraceContext{},
			map[string]string{"traceparent": tp1, "tracestate": "a=1", "x": "y"}, 0, 0},
		{"http wins", body(`{"traceparent":"` + tp1 + `","tracestate":"a=1"}`), TraceContext{Parent: tp2, HasParent: true},
			map[string]string{"traceparent": tp2}, 0, 0},
		{"http pair", `{"topic":"t","content":1}`, TraceContext{Parent: tp2, HasParent: true, State: "b=2", HasState: true},
			map[string]string{"traceparent": tp2, "tracestate": "b=2"}, 0, 0},
		{"invalid http dropped, the body's pair stays", body(`{"traceparent":"` + tp1 + `","tracestate":"a=1"}`), TraceContext{Parent: "00-zz", HasParent: true, State: "b=2", HasState: true},
			map[string]string{"traceparent": tp1, "tracestate": "a=1"}, 1, 1},
		{"invalid http, none in the body", `{"topic":"t","content":1}`, TraceContext{Parent: "00-zz", HasParent: true}, nil, 1, 0},
		{"batch member's own invalid: the request's applies", body(`{"traceparent":"bad","tracestate":"a=1"}`), TraceContext{Parent: tp2, HasParent: true, State: "b=2", HasState: true, Fallback: true},
			map[string]string{"traceparent": tp2, "tracestate": "b=2"}, 1, 1},
		{"batch member's own and an invalid request's", body(`{"traceparent":"` + tp1 + `"}`), TraceContext{Parent: "bad", HasParent: true, State: "b=2", HasState: true, Fallback: true},
			map[string]string{"traceparent": tp1}, 0, 0},
		{"batch member without, an invalid request's", body(`{"x":"y"}`), TraceContext{Parent: "bad", HasParent: true, Fallback: true},
			map[string]string{"x": "y"}, 1, 0},
		{"batch member's own, the request's tracestate alone", body(`{"traceparent":"` + tp1 + `"}`), TraceContext{State: "b=2", HasState: true, Fallback: true},
			map[string]string{"traceparent": tp1}, 0, 0},
		{"http tracestate alone", body(`{"traceparent":"` + tp1 + `"}`), TraceContext{State: "b=2", HasState: true},
			map[string]string{"traceparent": tp1}, 0, 1},
		{"batch member's own", body(`{"traceparent":"` + tp1 + `"}`), TraceContext{Parent: tp2, HasParent: true, Fallback: true},
			map[string]string{"traceparent": tp1}, 0, 0},
		{"batch member without", body(`{"x":"y"}`), TraceContext{Parent: tp2, HasParent: true, Fallback: true},
			map[string]string{"traceparent": tp2, "x": "y"}, 0, 0},
		{"invalid json traceparent", body(`{"traceparent":"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01","tracestate":"a=1","x":"y"}`), TraceContext{},
			map[string]string{"x": "y"}, 1, 1},
		{"invalid tracestate", body(`{"traceparent":"` + tp1 + `","tracestate":"A=1"}`), TraceContext{},
			map[string]string{"traceparent": tp1}, 0, 1},
		{"empty http value", `{"topic":"t","content":1}`, TraceContext{HasParent: true}, nil, 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, dp, ds := decodeHeaders(t, c.body, c.tc)
			if len(h) != len(c.want) {
				t.Fatalf("headers %v, want %v", h, c.want)
			}
			for k, v := range c.want {
				if h[k] != v {
					t.Fatalf("headers %v, want %v", h, c.want)
				}
			}
			if dp != c.dropP || ds != c.drS {
				t.Fatalf("dropped traceparent %d tracestate %d, want %d %d", dp, ds, c.dropP, c.drS)
			}
		})
	}
}

func TestTraceFromHTTP(t *testing.T) {
	h := http.Header{}
	h.Add("traceparent", tp1)
	h.Add("Tracestate", "a=1")
	h.Add("TRACESTATE", "b=2")
	tc := TraceFromHTTP(h)
	if !tc.HasParent || tc.Parent != tp1 || !tc.HasState || tc.State != "a=1,b=2" {
		t.Fatalf("TraceFromHTTP = %+v", tc)
	}
	h.Add("traceparent", tp2)
	if tc := TraceFromHTTP(h); ValidTraceparent(tc.Parent) {
		t.Fatalf("two traceparent fields read as valid %q", tc.Parent)
	}
	if tc := TraceFromHTTP(http.Header{}); tc.Given() {
		t.Fatalf("no headers read as %+v", tc)
	}
}

func TestMessageTrace(t *testing.T) {
	state := `k=a"b\c,z=1`
	b, err := EncodeMessage("t", []byte(`{"headers":{"traceparent":"`+tp2+`"}}`), "", map[string]string{"traceparent": tp1, "tracestate": state}, time.UnixMilli(1))
	if err != nil {
		t.Fatal(err)
	}
	if p, s := MessageTrace(b); p != tp1 || s != state {
		t.Fatalf("MessageTrace = %q %q, want %q %q (from %s)", p, s, tp1, state, b)
	}
	for _, body := range []string{
		`{"topic":{"name":"t"},"content":{"headers":{"traceparent":"` + tp1 + `"}}}`, // inside content
		`{"headers":{"traceparent":"00-00000000000000000000000000000000-00f067aa0ba902b7-01","tracestate":"a=1"}}`,
		`{"headers":{"traceparent":1}}`,
		`{"headers":"x"}`,
		`not json`,
	} {
		if p, s := MessageTrace([]byte(body)); p != "" || s != "" {
			t.Errorf("MessageTrace(%s) = %q %q, want none", body, p, s)
		}
	}
}

// BenchmarkMessageTrace is the sender's per-attempt cost of reading the
// trace context back from a stored message of about 300 bytes, without
// headers and with a traceparent and tracestate.
//
//	go test -run '^$' -bench MessageTrace ./modules/contract/
func BenchmarkMessageTrace(b *testing.B) {
	content := []byte(`{"p":"` + strings.Repeat("x", 200) + `"}`)
	for _, c := range []struct {
		name string
		h    map[string]string
	}{{"none", nil}, {"traced", map[string]string{"traceparent": tp1, "tracestate": "rojo=00f067aa0ba902b7"}}} {
		body, err := EncodeMessage("bench.t", content, "", c.h, time.UnixMilli(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				MessageTrace(body)
			}
		})
	}
}
