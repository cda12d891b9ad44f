package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// TestJSONStreamWritesTheDocument: small and large pieces, in order, make
// the same document as encoding/json would.
func TestJSONStreamWritesTheDocument(t *testing.T) {
	var out bytes.Buffer
	s := NewJSONStream(&out)
	big := `"` + strings.Repeat("y", 3*streamBufBytes) + `"`
	s.Text(`{"a":`)
	s.String("q\"<\n")
	s.Text(`,"n":`)
	s.Int(-42)
	s.Text(`,"list":[`)
	for i := 0; i < 2000; i++ { // more than one buffer of small pieces
		if i > 0 {
			s.Text(",")
		}
		s.Raw([]byte(`{"k":1}`))
	}
	s.Text(`],"big":`)
	s.Raw([]byte(big))
	s.Text("}")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var v struct {
		A    string
		N    int
		List []map[string]int
		Big  string
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%.200s: %v", out.Bytes(), err)
	}
	if v.A != "q\"<\n" || v.N != -42 || len(v.List) != 2000 || len(v.Big) != 3*streamBufBytes {
		t.Fatalf("decoded %q %d %d %d", v.A, v.N, len(v.List), len(v.Big))
	}
}

type failWriter struct{ calls int }

func (w *failWriter) Write(p []byte) (int, error) { w.calls++; return 0, errors.New("gone") }

// TestJSONStreamStopsAtTheFirstError: after a failed write nothing more is
// written and Close reports the error.
func TestJSONStreamStopsAtTheFirstError(t *testing.T) {
	w := &failWriter{}
	s := NewJSONStream(w)
	s.Raw(bytes.Repeat([]byte("1"), streamDirectBytes))
	s.Raw(bytes.Repeat([]byte("2"), streamDirectBytes))
	s.Text("x")
	if err := s.Close(); err == nil || w.calls != 1 || s.Err() == nil {
		t.Fatalf("Close = %v after %d writes", err, w.calls)
	}
}
