package contract

import (
	"encoding/json"
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
// with valid UTF-8, up to the nesting limit.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{`{"topic":"a","content":{"x":[1,2,"y"]}}`, `[]`, `"\u00e9"`, `-1.5e3`, "\"\xff\"", `{"a":}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got := validJSON(b) == nil
		want := json.Valid(b) && utf8.Valid(b)
		if strings.Count(string(b), "[")+strings.Count(string(b), "{") > maxDepth {
			return // depth limit: we refuse some input encoding/json accepts
		}
		if got != want {
			t.Fatalf("validJSON(%q) = %v, encoding/json+utf8 says %v", b, got, want)
		}
	})
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
