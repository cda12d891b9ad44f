package groups

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/tracing"
)

// With a tracer, an HTTP fetch is a span, a child of the request's
// traceparent, linked to the publish span of each message it returned; a
// refused fetch is a span with an error status.
func TestHTTPFetchSpan(t *testing.T) {
	const (
		producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		consumer = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	)
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.NewWithExporter(tracing.DefaultConfig(), "", exp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	e := newEnv(t, Options{})
	srv := httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{Tracer: tr}))
	ts := httptest.NewServer(srv.Handler())
	defer ts.Close()
	var payloads [][]byte
	for i := range 2 {
		b, err := contract.EncodeMessage(testTopic, json.RawMessage(`{"n":1}`), "", map[string]string{"traceparent": producer}, time.Now().Add(time.Duration(i)*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, b)
	}
	if _, _, err := e.reg.Publish(context.Background(), testTopic, payloads, contract.Durable); err != nil {
		t.Fatal(err)
	}
	base := ts.URL + "/topics/" + testTopic + "/groups/g"
	req, _ := http.NewRequest("POST", base+"/fetch?max=10", nil)
	req.Header.Set("traceparent", consumer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("fetch: HTTP %d", resp.StatusCode)
	}
	if r := do(t, "POST", base+"/fetch?max=0", "", ""); r.status != 400 {
		t.Fatalf("fetch max=0: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch?max=10", "no-such-session", ""); r.status < 400 {
		t.Fatalf("fetch with an unknown session: %d %s", r.status, r.raw)
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2 (the fetch and the refused one; max=0 is refused before a span): %v", len(spans), spans)
	}
	ok := spans[0]
	if ok.Parent.SpanID().String() != "b7ad6b7169203331" || ok.Status.Code.String() != "Unset" {
		t.Errorf("fetch span parent %s status %s", ok.Parent.SpanID(), ok.Status.Code)
	}
	if len(ok.Links) != 2 {
		t.Fatalf("fetch span has %d links, want 2", len(ok.Links))
	}
	for i, p := range payloads {
		want, _ := tracing.PublishContext(tracing.MessageOf(testTopic, p))
		if ok.Links[i].SpanContext.SpanID() != want.SpanID() {
			t.Errorf("link %d names %s, want the publish span %s", i, ok.Links[i].SpanContext.SpanID(), want.SpanID())
		}
	}
	if bad := spans[1]; bad.Status.Code.String() != "Error" || len(bad.Links) != 0 {
		t.Errorf("refused fetch span: status %s, %d links", bad.Status.Code, len(bad.Links))
	}
}
