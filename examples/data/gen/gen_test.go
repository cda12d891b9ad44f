package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// committed is the generated file, relative to this package directory.
const committed = "../orders-events.jsonl"

// TestCommittedFileUpToDate regenerates the data into a temporary file and
// compares it byte for byte with the committed file. On failure run
// `go run ./examples/data/gen` from the repository root and commit the result.
func TestCommittedFileUpToDate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orders-events.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Generate(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Fatalf("%s differs from the generator output at byte %d (got %d bytes, committed %d); "+
			"run `go run ./examples/data/gen` and commit the file", committed, i, len(got), len(want))
	}
}

// TestGenerateDeterministic checks that two runs in one process agree.
func TestGenerateDeterministic(t *testing.T) {
	var a, b bytes.Buffer
	if err := Generate(&a); err != nil {
		t.Fatal(err)
	}
	if err := Generate(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two runs of Generate differ")
	}
}

// TestCommittedFileContent checks the shape of every line of the committed file.
func TestCommittedFileContent(t *testing.T) {
	data, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 || data[len(data)-1] != '\n' {
		t.Fatal("file must end with a newline")
	}
	type line struct {
		Topic   string          `json:"topic"`
		Content json.RawMessage `json:"content"`
		ID      string          `json:"id"`
	}
	type orderRef struct {
		OrderID int64 `json:"orderId"`
	}
	ids := map[string]bool{}
	topics := map[string]int{}
	// Per order, the topics in file order.
	seq := map[int64][]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	n := 0
	for sc.Scan() {
		n++
		raw := sc.Bytes()
		if !json.Valid(raw) {
			t.Fatalf("line %d: invalid JSON", n)
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if !slices.Contains(Topics, l.Topic) {
			t.Fatalf("line %d: unexpected topic %q", n, l.Topic)
		}
		topics[l.Topic]++
		if l.ID == "" || ids[l.ID] {
			t.Fatalf("line %d: empty or duplicate id %q", n, l.ID)
		}
		ids[l.ID] = true
		var ref orderRef
		if err := json.Unmarshal(l.Content, &ref); err != nil || ref.OrderID == 0 {
			t.Fatalf("line %d: content without orderId: %s", n, l.Content)
		}
		seq[ref.OrderID] = append(seq[ref.OrderID], l.Topic)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if n != Lines {
		t.Fatalf("got %d lines, want %d", n, Lines)
	}
	for _, topic := range Topics {
		if topics[topic] == 0 {
			t.Errorf("topic %s never used", topic)
		}
	}
	// Every order is complete and in life-cycle order.
	rank := map[string]int{"order.created": 0, "payment.authorized": 1, "order.paid": 2, "payment.captured": 3, "order.shipped": 4}
	for id, s := range seq {
		var core []string
		for _, topic := range s {
			if _, ok := rank[topic]; ok {
				core = append(core, topic)
			}
		}
		want := []string{"order.created", "payment.authorized", "order.paid", "payment.captured", "order.shipped"}
		if !slices.Equal(core, want) {
			t.Errorf("order %d: sequence %v", id, s)
		}
		if s[0] != "order.created" {
			t.Errorf("order %d: does not start with order.created: %v", id, s)
		}
	}
}
