package lineproto

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/tracing"
)

// PUBX traceparent= and tracestate= are stored, percent-decoded, as the
// message's headers of those names, byte for byte; an invalid one is
// dropped and counted and the publish still succeeds.
func TestPubXTraceContext(t *testing.T) {
	const (
		tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		ts = "rojo=00f067aa0ba902b7, congo=t61rcWkgMzE"
	)
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUBX tr DURABLE traceparent=`+tp+` tracestate=rojo=00f067aa0ba902b7,%20congo=t61rcWkgMzE {"n":0}`), "OK 0 DURABLE")
	p0, s0 := contract.TraceDropped()
	expectPrefix(t, c.do(`PUBX tr DURABLE traceparent=00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01 tracestate=a=1 {"n":1}`), "OK 1 DURABLE")
	expectPrefix(t, c.do(`PUBX tr DURABLE tracestate=a=1 {"n":2}`), "OK 2 DURABLE")
	expectPrefix(t, c.do(`PUBX tr DURABLE traceparent=`+tp+` tracestate=A=1 {"n":3}`), "OK 3 DURABLE")
	if p1, s1 := contract.TraceDropped(); p1-p0 != 1 || s1-s0 != 3 {
		t.Fatalf("dropped %d traceparent, %d tracestate values; want 1 and 3", p1-p0, s1-s0)
	}
	expectPrefix(t, c.do(`PUBX tr DURABLE traceparent=`+tp+` traceparent=`+tp+` {"n":9}`), "ERR BAD_REQUEST attribute traceparent given twice")
	_, payloads := c.fetch("FETCH tr g 10 0")
	if len(payloads) != 4 {
		t.Fatalf("stored %d messages, want 4: %q", len(payloads), payloads)
	}
	want := []map[string]string{{"traceparent": tp, "tracestate": ts}, nil, nil, {"traceparent": tp}}
	for i, p := range payloads {
		var m struct{ Headers map[string]string }
		if err := json.Unmarshal([]byte(p), &m); err != nil {
			t.Fatal(err)
		}
		if len(m.Headers) != len(want[i]) || m.Headers["traceparent"] != want[i]["traceparent"] || m.Headers["tracestate"] != want[i]["tracestate"] {
			t.Errorf("message %d stored headers %v, want %v", i, m.Headers, want[i])
		}
	}
	if gp, gs := contract.MessageTrace([]byte(payloads[0])); gp != tp || gs != ts {
		t.Errorf("read back %q %q", gp, gs)
	}
}

// With a tracer, every PUB and PUBX makes a publish span with its offset
// and level; PUBX's traceparent= is its parent, and a push of the stored
// message names that span (tracing.PublishContext).
func TestPubSpans(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.NewWithExporter(tracing.DefaultConfig(), "", exp, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, Options{Tracer: tr}, groups.Options{})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUBX sp DURABLE traceparent=`+tp+` {"n":0}`), "OK 0 DURABLE")
	expectPrefix(t, c.do(`PUB sp DURABLE {"n":1}`), "OK 1 DURABLE")
	defer tr.Shutdown(context.Background())
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2: %v", len(spans), spans)
	}
	_, payloads := c.fetch("FETCH sp g 10 0")
	if len(payloads) != 2 {
		t.Fatalf("stored %d messages", len(payloads))
	}
	want, ok := tracing.PublishContext(tracing.MessageOf("sp", []byte(payloads[0])))
	if !ok {
		t.Fatal("no publish context for a message with a traceparent")
	}
	for i, s := range spans {
		attrs := map[string]string{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.String()
		}
		if attrs[tracing.AttrOffset] != strconv.Itoa(i) || attrs[tracing.AttrTransport] != tracing.TransportLineProto {
			t.Errorf("span %d attributes %v", i, attrs)
		}
	}
	if got := spans[0]; got.SpanContext.SpanID() != want.SpanID() || got.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("PUBX span %s parent %s; want %s, parent 00f067aa0ba902b7", got.SpanContext.SpanID(), got.Parent.SpanID(), want.SpanID())
	}
	if lvl := spans[1].Attributes; len(lvl) == 0 {
		t.Error("PUB span without attributes")
	}
}
