package httpapi

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// send posts body to target with the request headers h (each value added
// in order, so a name may be given twice).
func (a *api) send(target, body string, h [][2]string) *httptest.ResponseRecorder {
	a.t.Helper()
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for _, kv := range h {
		req.Header.Add(kv[0], kv[1])
	}
	rec := httptest.NewRecorder()
	a.s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		a.t.Fatalf("POST %s: HTTP %d %s", target, rec.Code, rec.Body)
	}
	return rec
}

// storedTraces reads topic back over GET /topics/{topic}/messages and
// returns each message's stored traceparent and tracestate.
func (a *api) storedTraces(topic string) [][2]string {
	a.t.Helper()
	rec := a.call(http.MethodGet, "/topics/"+topic+"/messages", "", "")
	var page struct {
		Messages []struct {
			Message struct {
				Headers map[string]string `json:"headers"`
			} `json:"message"`
		} `json:"messages"`
	}
	decodeJSON(a.t, rec, &page)
	var out [][2]string
	for _, m := range page.Messages {
		out = append(out, [2]string{m.Message.Headers["traceparent"], m.Message.Headers["tracestate"]})
	}
	return out
}

// The traceparent/tracestate HTTP headers of a publish are stored as the
// message's headers (any case of the names), winning over the body's on
// a single publish and applying to the batch members without their own;
// invalid or repeated ones are dropped and counted, never refused.
func TestPublishTraceHeaders(t *testing.T) {
	const (
		tp1 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		tp2 = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	)
	a := newAPI(t, Options{}, topicqueue.Options{})
	body := `{"topic":"tr","content":1,"headers":{"traceparent":"` + tp2 + `","tracestate":"b=2"}}`
	a.send("/messages", body, [][2]string{{"TRACEPARENT", tp1}, {"tracestate", "a=1"}, {"Tracestate", "c=3"}})
	a.send("/messages", body, nil)
	a.send("/mmmq/messages", `{"topic":"tr","content":1}`, [][2]string{{"traceparent", tp1}})
	p0, s0 := contract.TraceDropped()
	a.send("/messages", body, [][2]string{{"traceparent", tp1}, {"traceparent", tp1}}) // two: invalid, the body's pair stays
	a.send("/messages", `{"topic":"tr","content":1}`, [][2]string{{"tracestate", "a=1"}})
	a.send("/messages?ack=written", `{"topic":"tr","content":1,"headers":{"traceparent":"00-`+strings.Repeat("0", 32)+`-b7ad6b7169203331-00","x":"y"}}`, nil)
	if p1, s1 := contract.TraceDropped(); p1-p0 != 2 || s1-s0 != 1 {
		t.Fatalf("dropped %d traceparent and %d tracestate values, want 2 and 1", p1-p0, s1-s0)
	}
	a.send("/messages/batch", `[{"topic":"trb","content":0,"headers":{"traceparent":"`+tp2+`"}},{"topic":"trb","content":1},{"topic":"trb","content":2,"headers":{"x":"y"}}]`,
		[][2]string{{"traceparent", tp1}, {"tracestate", "a=1"}})
	a.send("/messages/batch", `[{"topic":"trb","content":3}]`, nil)

	want := map[string][][2]string{
		"tr":  {{tp1, "a=1,c=3"}, {tp2, "b=2"}, {tp1, ""}, {tp2, "b=2"}, {"", ""}, {"", ""}},
		"trb": {{tp2, ""}, {tp1, "a=1"}, {tp1, "a=1"}, {"", ""}},
	}
	for topic, w := range want {
		got := a.storedTraces(topic)
		if len(got) != len(w) {
			t.Fatalf("%s: %d messages, want %d", topic, len(got), len(w))
		}
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("%s offset %d: stored trace %q, want %q", topic, i, got[i], w[i])
			}
		}
	}
}
