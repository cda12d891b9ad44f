package admin

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A dispatcher's rate-limit and rate-burst go through the API as every
// key does (kept in dispatchers.json, the burst only as set), GET shows
// its rateLimit (the effective burst, the workers waiting for tokens),
// and a burst without a limit is a 400 naming rate-burst.
func TestRateLimitThroughTheAPI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(srv.Close)
	l := startAdmin(t, newRegistry(t), t.TempDir())
	// One token per 1000 s: the first message goes, the second waits.
	l.must("POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"slow","host":%q,"patterns":["s.*"],"rate-limit":0.001}`, srv.URL), 201, nil)
	if f := l.fileText(); !strings.Contains(f, `"rate-limit": 0.001`) || strings.Contains(f, "rate-burst") {
		t.Errorf("dispatchers.json: want rate-limit 0.001 and no rate-burst (the default):\n%s", f)
	}
	l.publish("s.a", 2)
	st := l.waitStatus("slow", func(st Status) bool { return st.RateLimit != nil && st.RateLimit.Waiting == 1 })
	if *st.RateLimit != (RateLimitStatus{Limit: 0.001, Burst: 1, Waiting: 1}) || st.Spec.RateLimit != 0.001 || st.Spec.RateBurst != 0 {
		t.Errorf("status: rateLimit %+v, spec rate-limit %v rate-burst %d; want limit 0.001, burst 1, 1 waiting, the burst as set (0)",
			st.RateLimit, st.Spec.RateLimit, st.Spec.RateBurst)
	}
	if len(st.Topics) != 1 || st.Topics[0].Delivered != 1 {
		t.Errorf("topics %+v: want s.a with 1 delivered", st.Topics)
	}

	code, body := l.call("PUT", "/mmmq/dispatchers/slow", fmt.Sprintf(`{"name":"slow","host":%q,"patterns":["s.*"],"rate-burst":5}`, srv.URL))
	if code != 400 || !strings.Contains(body, "rate-burst") {
		t.Errorf("PUT a burst without a limit: %d %s; want 400 naming rate-burst", code, body)
	}
	l.must("PUT", "/mmmq/dispatchers/slow", fmt.Sprintf(`{"name":"slow","host":%q,"patterns":["s.*"]}`, srv.URL), 200, nil)
	st = l.waitStatus("slow", func(st Status) bool { return len(st.Topics) == 1 && st.Topics[0].Committed == 2 })
	if st.RateLimit != nil {
		t.Errorf("limit off: rateLimit %+v, want none", st.RateLimit)
	}
}
