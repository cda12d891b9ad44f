package cli

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// seek and redrive --rate set a replay rate: the answers and get show it
// (rate, from, until); a seek without --rate clears it; a rate the broker
// refuses is its 400 naming "rate".
func TestDispatchersReplayRate(t *testing.T) {
	b := startCLIBroker(t)
	var nack atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		if nack.Load() {
			io.WriteString(w, `{"acknowledgement":"NACK"}`)
			return
		}
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	defer srv.Close()
	b.publish("order.created", 3)
	b.ok("dispatchers", "create", "--name", "billing", "--host", srv.URL, "--pattern", "order.*")
	waitGet := func(line string) string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			out := b.ok("dispatchers", "get", "billing")
			if hasLine(out, line) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("get never showed %q:\n%s", line, out)
			}
		}
	}
	waitGet("order.created 3 3 0 idle")

	requireLines(t, "seek --rate", b.ok("dispatchers", "seek", "billing", "--to", "earliest", "--rate", "0.001"),
		"TOPIC PREVIOUS OFFSET REPLAY", "order.created 3 0 at 0.001 messages/s, offsets 0 until 3")
	waitGet("replay: order.created at 0.001 messages/s, offsets 0 until 3")
	b.fails(`mmmq: 400 BAD_REQUEST: invalid seek: field "rate" must be a number of messages per second > 0`, "dispatchers", "seek", "billing", "--to", "0", "--rate", "0")
	b.fails(`mmmq: 400 BAD_REQUEST: invalid redrive: field "rate"`, "dispatchers", "redrive", "billing", "--rate", "-2")
	requireLines(t, "seek without --rate", b.ok("dispatchers", "seek", "billing", "--to", "latest"), "order.created 1 3 -")
	if out := b.ok("dispatchers", "get", "billing"); hasLine(out, "replay:") {
		t.Errorf("get after a seek without --rate still shows a replay:\n%s", out)
	}

	nack.Store(true)
	for i := range 2 {
		b.post("/messages", fmt.Sprintf(`{"topic":"order.created","content":{"again":%d}}`, i), 200)
	}
	waitGet("order.created 5 5 0 idle")
	b.ok("dispatchers", "pause", "billing") // the redriven messages stay: so does the replay
	requireLines(t, "redrive --rate", b.ok("dispatchers", "redrive", "billing", "--rate", "2.5"),
		"redriven: 2", "replay: order.created at 2.5 messages/s, offsets 5 until 7")
	waitGet("replay: order.created at 2.5 messages/s, offsets 5 until 7")
}

// hasLine reports whether out has a line that, its runs of spaces made
// one, starts with prefix.
func hasLine(out, prefix string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.Join(strings.Fields(l), " "), prefix) {
			return true
		}
	}
	return false
}
