package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/tracing"
)

// With a tracer, a push of one message sends its push span's context as
// traceparent (a child of the message's publish span), a batch push sends
// the batch span's (linked to every message's publish span), and each
// attempt's span records its outcome; the stored headers are unchanged.
func TestPushSpans(t *testing.T) {
	const producer = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.NewWithExporter(tracing.DefaultConfig(), "", exp, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Shutdown(context.Background())

	root := t.TempDir()
	single, batch := newMemTopic(t, root, "tr.single"), newMemTopic(t, root, "tr.batch")
	for _, tp := range []*memTopic{single, batch} {
		tp.mu.Lock()
		for i := range 2 {
			tp.payloads = append(tp.payloads, fmt.Appendf(nil, `{"topic":{"name":%q},"content":%d,"id":"m-%d","timestamp":1700000000000,"headers":{"traceparent":%q}}`, tp.name, i, i, producer))
		}
		tp.mu.Unlock()
	}
	var mu sync.Mutex
	headers := map[string][]string{} // by topic: the traceparent header of each push, in order
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		headers[r.Topic+"/"+r.ConsumerID] = append(headers[r.Topic+"/"+r.ConsumerID], req.Header.Get("traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"acknowledgement":"ACK"}`)
	})
	ds := New("ds", c.host(t), MustPattern("tr.single"))
	db := New("db", c.host(t), MustPattern("tr.batch")).WithBatch(Batch{MaxMessages: 10, MaxWait: 50 * time.Millisecond})
	set, err := SetOf(ds, db)
	if err != nil {
		t.Fatal(err)
	}
	opts := testOptions()
	m := NewManager(set, newMemSource(single, batch), NewHTTPSender(opts), opts, zaptest.NewLogger(t))
	m.SetTracer(tr)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitCommitted(t, m, "ds", "tr.single", 2)
	waitCommitted(t, m, "db", "tr.batch", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		spans[s.SpanContext.SpanID().String()] = s
	}
	mu.Lock()
	defer mu.Unlock()
	for i, h := range headers["tr.single/ds"] {
		if h == producer || len(h) != 55 {
			t.Fatalf("single push %d traceparent %q: want the push span's own", i, h)
		}
		s, ok := spans[h[36:52]]
		if !ok {
			t.Fatalf("single push %d: traceparent %s names no span", i, h)
		}
		want, _ := tracing.PublishContext(tracing.MessageOf("tr.single", single.payloads[i]))
		if s.Parent.SpanID() != want.SpanID() || s.SpanContext.TraceID() != want.TraceID() {
			t.Errorf("push span parent %s, want the publish span %s", s.Parent.SpanID(), want.SpanID())
		}
	}
	bh := headers["tr.batch/db"]
	if len(bh) == 0 {
		t.Fatal("no batch push")
	}
	s, ok := spans[bh[0][36:52]]
	if !ok {
		t.Fatalf("batch push traceparent %q names no span", bh[0])
	}
	if s.Parent.IsValid() || len(s.Links) == 0 {
		t.Errorf("batch push span: parent %v, %d links; want a root with links", s.Parent.SpanID(), len(s.Links))
	}
	for _, st := range spans {
		var outcome string
		for _, a := range st.Attributes {
			if a.Key == tracing.AttrOutcome {
				outcome = a.Value.AsString()
			}
		}
		if outcome != "ACK" {
			t.Errorf("span %s outcome %q, want ACK", st.Name, outcome)
		}
	}
	for _, r := range c.requests() {
		if r.Topic == "tr.single" && !strings.Contains(r.Body, producer) {
			t.Errorf("pushed body lost the stored traceparent: %s", r.Body)
		}
	}
}
