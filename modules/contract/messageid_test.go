package contract

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestMessageID(t *testing.T) {
	tests := map[string]string{
		`{"topic":{"name":"t"},"content":{"id":"inner"},"id":"m-1","timestamp":1,"headers":{"id":"h"}}`: "m-1",
		` { "id" : "x" } `:                     "x",
		`{"content":"\"id\":\"no\"","id":"y"}`: "y",
		`{"id":"a","id":"b"}`:                  "b",
		`{"\u0069d":"esc"}`:                    "esc",
		`{"id":"tab\there"}`:                   "tab\there",
		`{"id":"nl\nhere"}`:                    "",
		`{"id":42}`:                            "",
		`{"id":"a","id":null}`:                 "",
		`{"content":[1,{"id":"z"}]}`:           "",
		`{}`:                                   "",
		`[]`:                                   "",
		``:                                     "",
		`{"id":"unterminated}`:                 "",
		`{"id":"` + strings.Repeat("x", MaxMessageIDBytes+1) + `"}`: "",
		`{"a":true,"b":-1.5e3,"c":null,"id":"ok"}`:                  "ok",
	}
	for in, want := range tests {
		if got := MessageID([]byte(in)); got != want {
			t.Errorf("MessageID(%.60q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzMessageID(f *testing.F) {
	f.Add(`{"topic":{"name":"t"},"content":{"id":"inner"},"id":"m-1","timestamp":1,"headers":{"id":"h"}}`)
	f.Add(`{"id":"a\"b"}`)
	f.Add(`{"x":[{"id":1}],"id":"\u00e9"}`)
	f.Fuzz(func(t *testing.T, s string) {
		got := MessageID([]byte(s)) // must not panic on anything
		if !json.Valid([]byte(s)) {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal([]byte(s), &m) != nil {
			if got != "" {
				t.Fatalf("MessageID(%q) = %q for a non-object", s, got)
			}
			return
		}
		want := ""
		var id string
		if raw, ok := m["id"]; ok && json.Unmarshal(raw, &id) == nil && len(id) <= MaxMessageIDBytes && ValidHeaderValue(id) {
			want = id
		}
		if got != want {
			t.Fatalf("MessageID(%q) = %q, want %q", s, got, want)
		}
	})
}
