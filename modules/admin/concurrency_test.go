package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// adaptive-concurrency goes through the API as every key does (kept in
// dispatchers.json); GET shows the dispatcher's concurrency (limit, max,
// in flight) and each topic's inFlight; a consumer answering 429 lowers
// the limit; a value other than off or aimd, and aimd with max-in-flight
// 1, are a 400 naming adaptive-concurrency; back to off, no concurrency.
func TestAdaptiveConcurrencyThroughTheAPI(t *testing.T) {
	srv, busy := ackServer(t, func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) })
	busy.Store(true)
	l := startAdmin(t, newRegistry(t), t.TempDir())
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"adaptive","host":%q,"patterns":["s.*"],"max-in-flight":4,"ordering":"none","adaptive-concurrency":"aimd"}`, srv.URL), 201, nil)
	if f := l.fileText(); !strings.Contains(f, `"adaptive-concurrency": "aimd"`) {
		t.Errorf("dispatchers.json: want adaptive-concurrency aimd:\n%s", f)
	}
	st := l.waitStatus("adaptive", func(st Status) bool { return st.Concurrency != nil })
	if c := st.Concurrency; c.Max != 4 || c.Limit != 4 || st.Spec.AdaptiveConcurrency != dispatcher.AdaptiveAIMD {
		t.Errorf("before any push: concurrency %+v, spec %q; want limit 4 of max 4, aimd", c, st.Spec.AdaptiveConcurrency)
	}
	l.publish("s.a", 3)
	st = l.waitStatus("adaptive", func(st Status) bool { return st.Concurrency.Decreases > 0 && len(st.Topics) == 1 })
	if st.Concurrency.Limit >= 4 || st.Topics[0].InFlight == nil {
		t.Errorf("after 429s: concurrency %+v, topic inFlight %v; want the limit under 4 and inFlight shown", st.Concurrency, st.Topics[0].InFlight)
	}
	for _, body := range []string{
		fmt.Sprintf(`{"name":"adaptive","host":%q,"patterns":["s.*"],"max-in-flight":4,"adaptive-concurrency":"vegas"}`, srv.URL),
		fmt.Sprintf(`{"name":"adaptive","host":%q,"patterns":["s.*"],"adaptive-concurrency":"aimd"}`, srv.URL),
	} {
		code, out := l.call("PUT", "/mmmq/dispatchers/adaptive", body)
		if code != 400 || !strings.Contains(out, "adaptive-concurrency") {
			t.Errorf("PUT %s: %d %s; want 400 naming adaptive-concurrency", body, code, out)
		}
	}
	l.must("PUT", "/mmmq/dispatchers/adaptive", fmt.Sprintf(`{"name":"adaptive","host":%q,"patterns":["s.*"],"max-in-flight":4,"ordering":"none"}`, srv.URL), 200, nil)
	st = l.waitStatus("adaptive", func(st Status) bool { return st.Concurrency == nil })
	if st.Spec.AdaptiveConcurrency != "" || len(st.Topics) == 1 && st.Topics[0].InFlight != nil {
		t.Errorf("after PUT without it: spec %q, topics %+v; want it left out (off) and no inFlight", st.Spec.AdaptiveConcurrency, st.Topics)
	}
}
