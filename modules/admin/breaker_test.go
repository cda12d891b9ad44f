package admin

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/dispatcher"
)

// A dispatcher's breaker-failures and breaker-cooloff go through the API
// as every key does (kept in dispatchers.json); GET shows its breaker:
// open with a next probe while the consumer is down, closed again once the
// probe is answered, with everything delivered; a cool-off without
// breaker-failures is a 400 naming breaker-cooloff.
func TestBreakerThroughTheAPI(t *testing.T) {
	srv, down := ackServer(t, func(w http.ResponseWriter) { w.WriteHeader(http.StatusServiceUnavailable) })
	down.Store(true)
	l := startAdmin(t, newRegistry(t), t.TempDir())
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"guarded","host":%q,"patterns":["s.*"],"breaker-failures":2,"breaker-cooloff":"200ms"}`, srv.URL), 201, nil)
	if f := l.fileText(); !strings.Contains(f, `"breaker-failures": 2`) || !strings.Contains(f, `"breaker-cooloff": "200ms"`) {
		t.Errorf("dispatchers.json: want breaker-failures 2 and breaker-cooloff 200ms:\n%s", f)
	}
	// Before any topic matched (no opening yet): closed, showing the
	// cool-off the first opening will take.
	st := l.waitStatus("guarded", func(st Status) bool { return st.Breaker != nil })
	if st.Breaker.State != dispatcher.BreakerClosed || st.Breaker.CooloffSeconds != 0.2 {
		t.Errorf("unused breaker %+v: want closed with cooloffSeconds 0.2 (its breaker-cooloff)", st.Breaker)
	}
	l.publish("s.a", 3)
	st = l.waitStatus("guarded", func(st Status) bool { return st.Breaker != nil && st.Breaker.State == dispatcher.BreakerOpen })
	if st.Breaker.NextProbe == nil || st.Breaker.Opened < 1 || st.Breaker.CooloffSeconds < 0.2 || st.Spec.BreakerFailures != 2 {
		t.Errorf("open breaker %+v, spec %d: want a next probe, an opening, a cool-off of at least 0.2 s", st.Breaker, st.Spec.BreakerFailures)
	}
	down.Store(false)
	st = l.waitStatus("guarded", func(st Status) bool { return len(st.Topics) == 1 && st.Topics[0].Committed == 3 })
	if st.Breaker == nil || st.Breaker.State != dispatcher.BreakerClosed || st.Breaker.NextProbe != nil {
		t.Errorf("after the consumer came back: breaker %+v, want closed without a next probe", st.Breaker)
	}
	code, body := l.call("PUT", "/mmmq/dispatchers/guarded", fmt.Sprintf(`{"name":"guarded","host":%q,"patterns":["s.*"],"breaker-cooloff":"1s"}`, srv.URL))
	if code != 400 || !strings.Contains(body, "breaker-cooloff") {
		t.Errorf("PUT a cool-off without breaker-failures: %d %s; want 400 naming breaker-cooloff", code, body)
	}
	l.must("PUT", "/mmmq/dispatchers/guarded", fmt.Sprintf(`{"name":"guarded","host":%q,"patterns":["s.*"]}`, srv.URL), 200, nil)
	l.waitStatus("guarded", func(st Status) bool { return st.Breaker == nil })
}
