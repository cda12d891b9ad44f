package cli

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// --breaker-failures and --breaker-cooloff set the dispatcher's circuit
// breaker; get shows the setting and, with a consumer that is down, the
// open breaker; a cool-off without failures is the broker's 400.
func TestDispatchersBreaker(t *testing.T) {
	b := startCLIBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens: every push is refused
	requireLines(t, "create", b.ok("dispatchers", "create", "--name", "guarded", "--host", down, "--pattern", "guarded.*",
		"--breaker-failures", "1", "--breaker-cooloff", "1h"),
		"breaker: opens after 1 consecutive abnormal answers, cool-off 1h0m0s doubling to backoff-max")
	b.publish("guarded.a", 1)
	var st admin.Status
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		json.Unmarshal([]byte(b.ok("dispatchers", "get", "guarded", "--json")), &st)
		if st.Breaker != nil && st.Breaker.State == dispatcher.BreakerOpen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("breaker never open: %+v", st)
		}
	}
	out := b.ok("dispatchers", "get", "guarded")
	requireLines(t, "get", out, "breaker: open, 0 consecutive failures, cool-off 1h0m0s, opened 1 times, 0 probes, next probe "+
		st.Breaker.NextProbe.UTC().Format(time.RFC3339Nano))
	b.fails("mmmq: 400 BAD_REQUEST: invalid dispatcher: ", "dispatchers", "create", "--name", "x", "--host", b.consumer, "--pattern", "a", "--breaker-cooloff", "5s")
	// --breaker-failures 0 turns the breaker off, and its cool-off with it
	// (a cool-off without a breaker is refused).
	requireLines(t, "update --breaker-failures 0", b.ok("dispatchers", "update", "guarded", "--breaker-failures", "0"), "breaker: off")
}

// --pause-after sets the dispatcher's auto-pause; with a consumer that is
// down the dispatcher pauses itself and get says so; resume clears it.
func TestDispatchersPauseAfter(t *testing.T) {
	b := startCLIBroker(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	requireLines(t, "create", b.ok("dispatchers", "create", "--name", "gives-up", "--host", down, "--pattern", "gives.*", "--pause-after", "200ms"),
		"pause-after: 200ms of failures without a success")
	b.publish("gives.a", 1)
	var st admin.Status
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		json.Unmarshal([]byte(b.ok("dispatchers", "get", "gives-up", "--json")), &st)
		if st.Paused && st.PauseReason == dispatcher.PauseAuto {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("never paused itself: %+v", st)
		}
	}
	requireLines(t, "get", b.ok("dispatchers", "get", "gives-up"),
		"paused by: auto (pause-after: its endpoint kept failing; resume it to deliver again), at "+st.PausedAt.UTC().Format(time.RFC3339Nano))
	b.ok("dispatchers", "resume", "gives-up")
	st = admin.Status{}
	json.Unmarshal([]byte(b.ok("dispatchers", "get", "gives-up", "--json")), &st)
	if st.Paused || st.PauseReason != "" {
		t.Errorf("after resume: paused %v, reason %q", st.Paused, st.PauseReason)
	}
}
