package tracing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
)

const publisher = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func newTestTracer(t *testing.T, c Config) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tr, err := NewWithExporter(c, "node-1", exp, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

// flushed returns the spans exported so far, after a flush.
func flushed(t *testing.T, tr *Tracer, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	require.NoError(t, tr.tp.ForceFlush(context.Background()))
	return exp.GetSpans()
}

func byName(spans tracetest.SpanStubs, prefix string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// A message published with the publisher's traceparent: its publish span
// is the publisher's child, a push of it is the publish span's child
// (named from the stored message alone), and the push's traceparent
// header is the push span's context.
func TestPublishThenPushParentOrder(t *testing.T) {
	tr, exp := newTestTracer(t, DefaultConfig())
	m := Message{Topic: "order.created", ID: "m-1", Timestamp: 1700000000000, Traceparent: publisher, Tracestate: "vendor=x"}
	tr.StartPublish(context.Background(), m, TransportHTTP, time.Now()).EndPublish(17, contract.Durable, 3*time.Millisecond, false, false, nil)

	ctx, push := tr.StartPush(context.Background(), Push{Dispatcher: "d", Topic: m.Topic, Messages: []Message{m}, Offsets: []int64{17}, Attempt: 2})
	header, state := PushTrace(ctx, m.Traceparent, m.Tracestate)
	push.EndPush(200, "ACK", nil)

	spans := flushed(t, tr, exp)
	require.Len(t, spans, 2)
	pub, pu := byName(spans, "publish ")[0], byName(spans, "push ")[0]
	_, pubParent, _, _ := parseTraceparent(publisher)
	assert.Equal(t, pubParent, pub.Parent.SpanID(), "publish span is the publisher's child")
	assert.Equal(t, pub.SpanContext.TraceID(), pub.Parent.TraceID())
	assert.Equal(t, pub.SpanContext.SpanID(), pu.Parent.SpanID(), "push span is the publish span's child")
	assert.Equal(t, pub.SpanContext.TraceID(), pu.SpanContext.TraceID(), "one trace")
	assert.Equal(t, formatTraceparent(pu.SpanContext), header, "the push carries its own span's context")
	assert.Equal(t, "vendor=x", state, "tracestate travels on")
	assert.NotEqual(t, publisher, header)

	sc, ok := PublishContext(m)
	require.True(t, ok)
	assert.Equal(t, pub.SpanContext.SpanID(), sc.SpanID(), "PublishContext names the publish span")
	attrs := map[string]any{}
	for _, a := range pub.Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	assert.Equal(t, int64(17), attrs[AttrOffset])
	assert.Equal(t, "DURABLE", attrs[AttrAckLevel])
	assert.InDelta(t, 0.003, attrs[AttrCommitWait], 1e-9)
	assert.Equal(t, "order.created", attrs["messaging.destination.name"])
	for _, a := range pu.Attributes {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	assert.Equal(t, int64(2), attrs[AttrAttempt])
	assert.Equal(t, "ACK", attrs[AttrOutcome])
	assert.Equal(t, int64(200), attrs[AttrStatus])
}

// A message published without a traceparent starts its trace at the
// broker: RootTraceparent is what is stored, the publish span is that
// context itself (a root), and the push is its child.
func TestPublishWithoutTraceparentStartsTheTrace(t *testing.T) {
	tr, exp := newTestTracer(t, DefaultConfig())
	stored := tr.RootTraceparent()("t", "gen-1", 1700000000001)
	require.True(t, contract.ValidTraceparent(stored), stored)
	m := Message{Topic: "t", ID: "gen-1", Timestamp: 1700000000001, Traceparent: stored}
	tr.StartPublish(context.Background(), m, TransportHTTP, time.Now()).EndPublish(0, contract.Durable, 0, false, false, nil)
	_, push := tr.StartPush(context.Background(), Push{Dispatcher: "d", Topic: "t", Messages: []Message{m}, Offsets: []int64{0}, Attempt: 1})
	push.EndPush(0, "abnormal", errors.New("connection refused"))

	spans := flushed(t, tr, exp)
	pub, pu := byName(spans, "publish ")[0], byName(spans, "push ")[0]
	assert.False(t, pub.Parent.IsValid(), "a root")
	assert.Equal(t, stored, formatTraceparent(pub.SpanContext), "the stored traceparent is the publish span's own context")
	assert.Equal(t, pub.SpanContext.SpanID(), pu.Parent.SpanID())
	assert.Equal(t, "Error", pu.Status.Code.String())
}

// Sampling: a ratio of 0 samples no trace the broker starts, but follows a
// publisher's sampled flag (parent-based); a publisher's unsampled flag
// is followed too, and the push still carries a context (unsampled).
func TestSamplingFollowsTheParent(t *testing.T) {
	c := DefaultConfig()
	c.SamplingRatio = 0
	tr, exp := newTestTracer(t, c)
	root := tr.RootTraceparent()("t", "a", 1)
	assert.True(t, strings.HasSuffix(root, "-00"), "ratio 0: the trace it starts is not sampled: %s", root)
	tr.StartPublish(context.Background(), Message{Topic: "t", ID: "a", Timestamp: 1, Traceparent: root}, TransportHTTP, time.Now()).EndPublish(0, contract.Durable, 0, false, false, nil)
	unsampled := strings.TrimSuffix(publisher, "01") + "00"
	tr.StartPublish(context.Background(), Message{Topic: "t", ID: "b", Timestamp: 1, Traceparent: unsampled}, TransportHTTP, time.Now()).EndPublish(1, contract.Durable, 0, false, false, nil)
	ctx, push := tr.StartPush(context.Background(), Push{Dispatcher: "d", Topic: "t", Messages: []Message{{Topic: "t", ID: "b", Timestamp: 1, Traceparent: unsampled}}, Attempt: 1})
	h, _ := PushTrace(ctx, unsampled, "")
	push.EndPush(200, "ACK", nil)
	assert.True(t, strings.HasSuffix(h, "-00") && h != unsampled, "an unsampled push still sends its own context: %s", h)
	assert.Empty(t, flushed(t, tr, exp))

	tr.StartPublish(context.Background(), Message{Topic: "t", ID: "c", Timestamp: 1, Traceparent: publisher}, TransportHTTP, time.Now()).EndPublish(2, contract.Durable, 0, false, false, nil)
	assert.Len(t, flushed(t, tr, exp), 1, "a sampled publisher is followed whatever the ratio")
}

// A batch push is a root with a link to each message's publish span, and
// it is sampled when one of them is (even at ratio 0).
func TestBatchPushLinksEveryMessage(t *testing.T) {
	c := DefaultConfig()
	c.SamplingRatio = 0
	tr, exp := newTestTracer(t, c)
	ms := []Message{
		{Topic: "t", ID: "1", Timestamp: 5, Traceparent: publisher},
		{Topic: "t", ID: "2", Timestamp: 5}, // no trace context: no link
		{Topic: "t", ID: "3", Timestamp: 6, Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
	}
	_, push := tr.StartPush(context.Background(), Push{Dispatcher: "d", Topic: "t", Messages: ms, Offsets: []int64{4, 5, 6}, Attempt: 1, Batch: true})
	push.EndPush(200, "NACK", nil)
	spans := flushed(t, tr, exp)
	require.Len(t, spans, 1)
	s := spans[0]
	assert.False(t, s.Parent.IsValid())
	require.Len(t, s.Links, 2)
	for i, m := range []Message{ms[0], ms[2]} {
		sc, _ := PublishContext(m)
		assert.Equal(t, sc.SpanID(), s.Links[i].SpanContext.SpanID())
		assert.Equal(t, sc.TraceID(), s.Links[i].SpanContext.TraceID())
	}
}

// A fetch span is a child of the request's traceparent and links the
// publish spans of what it fetched.
func TestFetchSpan(t *testing.T) {
	tr, exp := newTestTracer(t, DefaultConfig())
	m := Message{Topic: "t", ID: "1", Timestamp: 5, Traceparent: publisher}
	tr.RecordFetch(context.Background(), Fetch{Topic: "t", Group: "g", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Start: time.Now(), Messages: []Message{m}})
	// An idle poll (nothing fetched, no traceparent) makes no span; a
	// failed one does.
	tr.RecordFetch(context.Background(), Fetch{Topic: "t", Group: "g", Start: time.Now()})
	tr.RecordFetch(context.Background(), Fetch{Topic: "t", Group: "g", Start: time.Now(), Err: errors.New("409")})
	spans := flushed(t, tr, exp)
	require.Len(t, spans, 2)
	assert.Equal(t, "Error", spans[1].Status.Code.String())
	assert.Equal(t, "b7ad6b7169203331", spans[0].Parent.SpanID().String())
	require.Len(t, spans[0].Links, 1)
	sc, _ := PublishContext(m)
	assert.Equal(t, sc.SpanID(), spans[0].Links[0].SpanContext.SpanID())
}

// The derived publish span id depends on every part of the message's
// name: two messages of one trace never share a publish span.
func TestPublishSpanIDsDiffer(t *testing.T) {
	base := Message{Topic: "t", ID: "1", Timestamp: 5, Traceparent: publisher}
	seen := map[trace.SpanID]string{}
	for name, m := range map[string]Message{
		"base": base, "topic": {Topic: "u", ID: "1", Timestamp: 5, Traceparent: publisher},
		"id": {Topic: "t", ID: "2", Timestamp: 5, Traceparent: publisher}, "timestamp": {Topic: "t", ID: "1", Timestamp: 6, Traceparent: publisher},
		"parent": {Topic: "t", ID: "1", Timestamp: 5, Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b8-01"},
		"split":  {Topic: "t1", ID: "", Timestamp: 5, Traceparent: publisher}, // "t"+"1" must not equal "t1"+""
	} {
		sc, ok := PublishContext(m)
		require.True(t, ok, name)
		if other, dup := seen[sc.SpanID()]; dup {
			t.Errorf("%s and %s share a publish span id", name, other)
		}
		seen[sc.SpanID()] = name
	}
	_, ok := PublishContext(Message{Topic: "t", ID: "1"})
	assert.False(t, ok, "no trace context, no publish span")
}

// blockingExporter holds every export until released.
type blockingExporter struct {
	release chan struct{}
	once    sync.Once
	got     chan int
}

func (e *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.got <- len(spans)
	select {
	case <-e.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *blockingExporter) Shutdown(context.Context) error {
	e.once.Do(func() { close(e.release) })
	return nil
}

// A collector that does not answer never holds up the broker: spans past
// the queue are dropped and counted, and ending a span stays quick.
func TestFullQueueDropsAndCounts(t *testing.T) {
	exp := &blockingExporter{release: make(chan struct{}), got: make(chan int, 100)}
	c := DefaultConfig()
	c.QueueSize = 16
	tr, err := NewWithExporter(c, "", exp, zaptest.NewLogger(t))
	require.NoError(t, err)
	m := Message{Topic: "t", ID: "1", Timestamp: 5, Traceparent: publisher}
	const n = 200
	for i := range n {
		m.Timestamp = int64(i)
		tr.StartPublish(context.Background(), m, TransportHTTP, time.Now()).EndPublish(int64(i), contract.Durable, 0, false, false, nil)
	}
	st := tr.Stats()
	assert.Equal(t, uint64(n-16), st.Dropped, "all but a queue's worth dropped: %+v", st)
	assert.Equal(t, int64(16), st.Queued)
	exp.Shutdown(context.Background())
	require.NoError(t, tr.Shutdown(context.Background()))
	st = tr.Stats()
	assert.Equal(t, uint64(16), st.Exported+st.Failed, "%+v", st)
	assert.Equal(t, uint64(n), st.Exported+st.Failed+st.Dropped)
	assert.Zero(t, st.Queued)
}

// A nil Tracer is tracing off: nothing happens, nothing is allocated.
func TestNilTracerIsOff(t *testing.T) {
	var tr *Tracer
	assert.False(t, tr.Enabled())
	assert.Nil(t, tr.RootTraceparent())
	m := Message{Topic: "t", ID: "1", Traceparent: publisher}
	allocs := testing.AllocsPerRun(100, func() {
		s := tr.StartPublish(context.Background(), m, TransportHTTP, time.Time{})
		s.EndPublish(1, contract.Durable, 0, false, false, nil)
		_, p := tr.StartPush(context.Background(), Push{})
		p.EndPush(200, "ACK", nil)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, Stats{}, tr.Stats())
	assert.NoError(t, tr.Shutdown(context.Background()))
	tracer, err := New(DefaultConfig(), "", nil)
	assert.NoError(t, err)
	assert.Nil(t, tracer, "exporter none: no tracer")
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		mod func(*Config)
	}{
		{"mmmq.tracing.exporter", func(c *Config) { c.Exporter = "zipkin" }},
		{"mmmq.tracing.sampling-ratio", func(c *Config) { c.SamplingRatio = 1.5 }},
		{"mmmq.tracing.sampling-ratio", func(c *Config) { c.SamplingRatio = -0.1 }},
		{"mmmq.tracing.service-name", func(c *Config) { c.ServiceName = " " }},
		{"mmmq.tracing.queue-size", func(c *Config) { c.QueueSize = 0 }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "ftp://x:1" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "collector" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = ":4317" }},
		{"mmmq.tracing.headers", func(c *Config) { c.Headers = map[string]string{"bad name": "x"} }},
		{"mmmq.tracing.headers", func(c *Config) { c.Headers = map[string]string{"authorization": "Bearer x\n"} }},
		{"mmmq.tracing.insecure", func(c *Config) { c.Endpoint, c.Insecure = "https://c.example:4318", true }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "http://user:pw@c.example:4318" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "http://c.example" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "http://c.example:4318/v1/traces?api_key=SECRET" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "http://c.example:4318/v1/traces?" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Endpoint = "http://c.example:4318/v1/traces#k" }},
		{"mmmq.tracing.endpoint", func(c *Config) { c.Exporter, c.Endpoint = ExporterOTLPGRPC, "http://c.example:4317/v1/traces" }},
	} {
		c := DefaultConfig()
		c.Exporter = ExporterOTLPHTTP
		tc.mod(&c)
		err := c.check()
		if assert.Error(t, err, tc.key) {
			assert.Contains(t, err.Error(), tc.key)
		}
	}
	for _, ep := range []string{"", "localhost:4318", "http://collector:4318/", "https://c.example:443", "http://[::1]:4317"} {
		c := DefaultConfig()
		c.Exporter, c.Endpoint = ExporterOTLPGRPC, ep
		assert.NoError(t, c.check(), ep)
	}
	for _, ep := range []string{"http://collector:4318/v1/traces", "https://c.example:443/otlp/v1/traces"} {
		c := DefaultConfig()
		c.Exporter, c.Endpoint = ExporterOTLPHTTP, ep
		assert.NoError(t, c.check(), ep)
	}
	c := DefaultConfig()
	c.Exporter, c.Endpoint = ExporterOTLPHTTP, "http://c.example:4318/v1/traces?api_key=SECRET"
	assert.NotContains(t, c.check().Error(), "SECRET", "the error must not show the query")
}

// The startup log names the endpoint the exporter uses and where it came
// from, the OTLP SDK's variables included, without a password or query.
func TestEffectiveEndpoint(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		exporter, endpoint string
		getenv             func(string) string
		want, from         string
	}{
		{ExporterOTLPHTTP, "http://c:4318/x", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://e:1"), "http://c:4318/x", "mmmq.tracing.endpoint"},
		{ExporterOTLPHTTP, "", env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/p", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://e:1"), "http://t:1/p", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{ExporterOTLPHTTP, "", env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://u:pw@e:1/base/?k=SECRET"), "https://u:xxxxx@e:1/base/v1/traces?redacted", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{ExporterOTLPGRPC, "", env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://e:4317"), "http://e:4317", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{ExporterOTLPGRPC, "", env(), "localhost:4317", "the otlp-grpc default"},
		{ExporterOTLPHTTP, "", env(), "http://localhost:4318/v1/traces", "the otlp-http default"},
	} {
		c := DefaultConfig()
		c.Exporter, c.Endpoint = tc.exporter, tc.endpoint
		got, from := effectiveEndpoint(c, tc.getenv)
		assert.Equal(t, tc.want, got, tc)
		assert.Equal(t, tc.from, from, tc)
	}
}
