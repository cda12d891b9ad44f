package dispatcher

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// rawHeader is h[name] as the sender wrote it (raw lower-case names,
// which Header.Get would canonicalise and miss), "" when absent.
func rawHeader(r *http.Request, name string) string {
	if v := r.Header[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

const (
	traceP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceS = `rojo=00f067aa0ba902b7,congo=a"b\c`
)

func tracedBody(t *testing.T, h map[string]string) []byte {
	t.Helper()
	b, err := contract.EncodeMessage("t", []byte(`1`), "", h, time.UnixMilli(1))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A push of one message carries the stored traceparent and tracestate
// byte for byte (a tracestate with '"' and '\', escaped in the stored
// JSON); a batch push carries none (each message's are in its body).
func TestHTTPSenderTraceHeaders(t *testing.T) {
	s := NewHTTPSender(Options{})
	rt := &recordingTransport{}
	s.client.Transport = rt
	d := New("d", Host{HTTP, "consumer", 8081}, MustPattern("t"))
	body := tracedBody(t, map[string]string{"traceparent": traceP, "tracestate": traceS, "x": "y"})
	if _, err := s.Send(context.Background(), Delivery{Dispatcher: d, Topic: "t", Attempt: 1, Body: body}); err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1008 the sender writes the W3C names lower case, as the recommendation spells them
	tp, ts := rt.req.Header["traceparent"], rt.req.Header["tracestate"]
	if len(tp) != 1 || tp[0] != traceP || len(ts) != 1 || ts[0] != traceS {
		t.Fatalf("trace headers %q %q, want %q %q", tp, ts, traceP, traceS)
	}
	if v := rawHeader(rt.req, "x"); v != "" {
		t.Fatalf("an ordinary stored header was pushed: x = %q", v)
	}
	// No stored trace context: no trace headers.
	if _, err := s.Send(context.Background(), Delivery{Dispatcher: d, Topic: "t", Attempt: 1, Body: tracedBody(t, nil)}); err != nil {
		t.Fatal(err)
	}
	if v := rawHeader(rt.req, "traceparent"); v != "" {
		t.Fatalf("traceparent %q without a stored one", v)
	}
	// A batch: none in the headers, each in the body.
	bd := d.WithBatch(Batch{MaxMessages: 2})
	p := Push{Batch: true, Messages: []Delivery{{Dispatcher: bd, Topic: "t", Attempt: 1, Body: body}, {Dispatcher: bd, Topic: "t", Offset: 1, Attempt: 1, Body: body}}}
	if _, err := s.Push(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if v := rawHeader(rt.req, "traceparent"); v != "" {
		t.Fatalf("batch push has traceparent %q", v)
	}
}

// SetTrace is the seam: its function sees the stored values and decides
// what goes out.
func TestHTTPSenderSetTrace(t *testing.T) {
	s := NewHTTPSender(Options{})
	rt := &recordingTransport{}
	s.client.Transport = rt
	const child = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
	var saw string
	s.SetTrace(func(_ context.Context, d Delivery, p, st string) (string, string) {
		saw = p + "|" + st
		return child, ""
	})
	d := New("d", Host{HTTP, "consumer", 8081}, MustPattern("t"))
	body := tracedBody(t, map[string]string{"traceparent": traceP, "tracestate": traceS})
	if _, err := s.Send(context.Background(), Delivery{Dispatcher: d, Topic: "t", Attempt: 1, Body: body}); err != nil {
		t.Fatal(err)
	}
	if saw != traceP+"|"+traceS || rawHeader(rt.req, "traceparent") != child || rawHeader(rt.req, "tracestate") != "" {
		t.Fatalf("saw %q, sent %q %q", saw, rawHeader(rt.req, "traceparent"), rawHeader(rt.req, "tracestate"))
	}
}

// Static headers may not set traceparent or tracestate, in any case, in
// Go options and in settings (the configuration file, the admin API).
func TestStaticTraceHeadersReserved(t *testing.T) {
	for _, name := range []string{"traceparent", "Tracestate", "TRACEPARENT"} {
		d := New("d", Host{HTTP, "consumer", 8081}, MustPattern("t")).WithHeaders(map[string]string{name: traceP})
		err := d.Validate()
		if err == nil || !strings.Contains(err.Error(), "reserved") || !strings.Contains(err.Error(), name) {
			t.Fatalf("Validate with header %q = %v, want reserved", name, err)
		}
		st := Settings{Name: "d", Host: "http://consumer:8081", Patterns: []string{"t"}, Headers: map[string]string{name: traceP}}
		err = st.Validate("mmmq.broker.dispatchers[0]")
		if err == nil || !strings.Contains(err.Error(), "mmmq.broker.dispatchers[0].headers") || !strings.Contains(err.Error(), "reserved") {
			t.Fatalf("Settings.Validate with header %q = %v", name, err)
		}
	}
}
