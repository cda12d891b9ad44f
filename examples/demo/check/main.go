// Command check verifies a `make demo` run: every event of the input file
// was delivered to the consumer responsible for its topic, in file order per
// topic (duplicates from at-least-once redelivery are counted, not failed).
//
//	go run ./examples/demo/check -data examples/data/orders-events.jsonl rec1.jsonl rec2.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
)

type event struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
}

type record struct {
	Topic  string          `json:"topic"`
	Offset int64           `json:"offset"`
	Answer string          `json:"answer"`
	Body   json.RawMessage `json:"body"`
}

func main() {
	data := flag.String("data", "examples/data/orders-events.jsonl", "the published JSONL file")
	flag.Parse()
	want := map[string][]string{}
	if err := eachLine(*data, func(b []byte) error {
		var e event
		if err := json.Unmarshal(b, &e); err != nil {
			return err
		}
		want[e.Topic] = append(want[e.Topic], e.ID)
		return nil
	}); err != nil {
		fail("read %s: %v", *data, err)
	}
	got := map[string][]string{}
	dups := 0
	for _, f := range flag.Args() {
		if err := eachLine(f, func(b []byte) error {
			var r record
			if err := json.Unmarshal(b, &r); err != nil {
				return err
			}
			if r.Answer != "" && r.Answer != "ACK" {
				return nil
			}
			var body struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				return err
			}
			ids := got[r.Topic]
			if n := len(ids); n > 0 && ids[n-1] == body.ID {
				dups++
				return nil
			}
			got[r.Topic] = append(ids, body.ID)
			return nil
		}); err != nil {
			fail("read %s: %v", f, err)
		}
	}
	topics := make([]string, 0, len(want))
	for t := range want {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	total, bad := 0, 0
	for _, t := range topics {
		w, g := want[t], got[t]
		ok := len(w) == len(g)
		for i := 0; ok && i < len(w); i++ {
			ok = w[i] == g[i]
		}
		status := "OK (all delivered, in order)"
		if !ok {
			status = fmt.Sprintf("MISMATCH: want %d, got %d", len(w), len(g))
			bad++
		}
		fmt.Printf("%-22s published=%-5d delivered=%-5d %s\n", t, len(w), len(g), status)
		total += len(g)
	}
	fmt.Printf("total delivered=%d duplicates=%d topics=%d mismatched=%d\n", total, dups, len(topics), bad)
	if bad > 0 {
		os.Exit(1)
	}
}

func eachLine(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue
		}
		if err := fn(sc.Bytes()); err != nil {
			return err
		}
	}
	return sc.Err()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "check: "+format+"\n", args...)
	os.Exit(1)
}
