package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidJSON(t *testing.T) {
	good := []string{`{}`, `[]`, `null`, `true`, ` 0 `, `-0.5e+10`, `"a\u00e9\n"`, `{"a":[1,{"b":null}],"c":"é"}`, "\"\u2028\""}
	for _, g := range good {
		if err := validJSON([]byte(g)); err != nil {
			t.Errorf("validJSON(%q) = %v", g, err)
		}
	}
	bad := map[string]string{
		``:                       "end of input",
		`{`:                      "string key",
		`{"a" 1}`:                "':'",
		`{"a":1,}`:               "string key",
		`[1,]`:                   "unexpected character",
		`01`:                     "data after",
		`1.`:                     "after '.'",
		`"\x"`:                   "invalid escape",
		"\"\x01\"":               "control character",
		"\"\xff\"":               "invalid UTF-8",
		`tru`:                    "literal",
		`{} {}`:                  "data after",
		strings.Repeat("[", 600): "nested deeper",
	}
	for in, want := range bad {
		err := validJSON([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validJSON(%.30q) = %v, want error containing %q", in, err, want)
		}
	}
}

// FuzzValidJSON: the scanner accepts exactly what encoding/json accepts
// with valid UTF-8 and nesting of at most maxDepth, and refuses valid JSON
// nested deeper because of its depth. The seeds include input at and just
// over the limit, and brackets inside strings, which do not nest.
func FuzzValidJSON(f *testing.F) {
	deepArray := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	deepObject := func(n int) string { return strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n) }
	for _, s := range []string{
		`{"topic":"a","content":{"x":[1,2,"y"]}}`, `[]`, `"\u00e9"`, `-1.5e3`, "\"\xff\"", `{"a":}`,
		deepArray(maxDepth), deepArray(maxDepth + 1), deepObject(maxDepth), deepObject(maxDepth + 1),
		`"` + strings.Repeat("[{", maxDepth) + `"`, `[` + strings.Repeat(`"[",`, maxDepth) + `1]`,
		strings.Repeat("[", maxDepth+1), deepArray(maxDepth+1) + "x",
	} {
		f.Add([]byte(s))
	}
	f.Add([]byte(`[1E1000]`))
	f.Add([]byte(`{"a":-2e308,"b":1e-999}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		err := validJSON(b)
		valid := json.Valid(b) && utf8.Valid(b)
		tooDeep := valid && nestingDepth(t, b) > maxDepth
		huge := valid && !tooDeep && beyondFloat64(b)
		if want := valid && !tooDeep && !huge; (err == nil) != want {
			t.Fatalf("validJSON(%.80q) = %v; encoding/json+utf8 says valid=%v, nested over %d: %v, a number beyond float64: %v", b, err, valid, maxDepth, tooDeep, huge)
		}
		if tooDeep && !strings.Contains(err.Error(), "nested deeper") {
			t.Fatalf("validJSON(%.80q) = %v, want the nesting error", b, err)
		}
		if huge && !strings.Contains(err.Error(), "beyond the range of a 64-bit float") {
			t.Fatalf("validJSON(%.80q) = %v, want the range error", b, err)
		}
	})
}

// beyondFloat64 says whether the valid JSON b holds a number that a
// 64-bit float cannot hold (strconv.ParseFloat gives ±Inf).
func beyondFloat64(b []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n, ok := tok.(json.Number); ok {
			if f, err := strconv.ParseFloat(string(n), 64); err != nil && math.IsInf(f, 0) {
				return true
			}
		}
	}
}

// nestingDepth is the deepest nesting of arrays and objects in b, as
// encoding/json's tokenizer reports it; b must be valid JSON.
func nestingDepth(t *testing.T, b []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // numbers as text: 1E1000 is valid JSON, not a float64
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return deepest
		}
		if err != nil {
			t.Fatalf("tokens of valid JSON %.80q: %v", b, err)
		}
		switch tok {
		case json.Delim('['), json.Delim('{'):
			depth++
			deepest = max(deepest, depth)
		case json.Delim(']'), json.Delim('}'):
			depth--
		}
	}
}

// FuzzValidStoredJSON: the lenient check for stored messages accepts
// exactly what encoding/json's json.Valid accepts.
func FuzzValidStoredJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":null}]}`, "\"\xff\"", `[`, `{"a":1}x`, `  7 `, strings.Repeat("[", 600) + strings.Repeat("]", 600)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := ValidStoredJSON(b), json.Valid(b); got != want {
			t.Fatalf("ValidStoredJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}

// BenchmarkValidJSONMessage: the scan of a publish body with a 200-byte
// string, the shape the line protocol and HTTP publish check per message.
//
//	go test -run '^$' -bench ValidJSONMessage ./modules/contract/
func BenchmarkValidJSONMessage(b *testing.B) {
	body := []byte(`{"topic":"bench.t","content":{"p":"` + strings.Repeat("abcdefghij", 20) + `"},"headers":{"k":"v"}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := validJSON(body); err != nil {
			b.Fatal(err)
		}
	}
}
