package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// InstrumentationName is the instrumentation scope of every span.
const InstrumentationName = "github.com/mmmq/mmmq"

// Tracer makes the broker's spans: one per publish (StartPublish), one per
// push attempt (StartPush) and one per consumer-group fetch (StartFetch).
// A nil *Tracer is tracing off: every method is then a no-op that
// allocates nothing, and callers check Enabled before doing any work of
// their own for a span.
type Tracer struct {
	tp      *sdktrace.TracerProvider
	tr      trace.Tracer
	sampler sampler
	proc    *boundedProcessor
	log     *zap.Logger
}

// Stats counts finished spans since the tracer started: Exported (the
// collector took them), Dropped (the queue was full: not exported) and
// Failed (an export request failed: lost). Exported+Dropped+Failed plus
// the spans still queued is every span that was sampled and ended.
type Stats struct {
	Exported, Dropped, Failed uint64
	// Queued is the spans waiting to be exported now.
	Queued int64
}

// New returns the tracer c asks for: nil (off) when c.Exporter is none,
// else one exporting over OTLP to c.Endpoint, with nodeName as
// service.instance.id ("" leaves it out). The exporter connects lazily:
// a collector that is down does not fail New, its spans are counted as
// failed or dropped. Errors: c invalid, or the exporter could not be built.
// Call Shutdown when done.
func New(c Config, nodeName string, log *zap.Logger) (*Tracer, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	if !c.Enabled() {
		return nil, nil
	}
	exp, err := newExporter(c)
	if err != nil {
		return nil, fmt.Errorf("tracing: %s exporter: %w", c.Exporter, err)
	}
	return NewWithExporter(c, nodeName, exp, log)
}

// NewWithExporter is New with the exporter given (tests: the SDK's
// tracetest.InMemoryExporter); c.Exporter and c.Endpoint are not read.
func NewWithExporter(c Config, nodeName string, exp sdktrace.SpanExporter, log *zap.Logger) (*Tracer, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultConfig().QueueSize
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultConfig().ServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", c.ServiceName)}
	if nodeName != "" {
		attrs = append(attrs, attribute.String("service.instance.id", nodeName))
	}
	res := resource.NewWithAttributes("", attrs...)
	proc := newBoundedProcessor(exp, c.QueueSize)
	s := sampler{ratio: sdktrace.TraceIDRatioBased(c.SamplingRatio)}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(s),
		sdktrace.WithIDGenerator(idGenerator{}),
		sdktrace.WithSpanProcessor(proc),
	)
	setErrorHandler(log)
	return &Tracer{tp: tp, tr: tp.Tracer(InstrumentationName), sampler: s, proc: proc, log: log}, nil
}

func newExporter(c Config) (sdktrace.SpanExporter, error) {
	ctx := context.Background()
	hasURL := strings.Contains(c.Endpoint, "://")
	switch c.Exporter {
	case ExporterOTLPGRPC:
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			ep := c.Endpoint
			if hasURL {
				u, _ := url.Parse(ep) // checked
				ep = u.Host
				if u.Scheme == "http" {
					opts = append(opts, otlptracegrpc.WithInsecure()) // the scheme decides
				}
			}
			opts = append(opts, otlptracegrpc.WithEndpoint(ep))
		}
		if c.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(c.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	case ExporterOTLPHTTP:
		var opts []otlptracehttp.Option
		switch {
		case hasURL:
			u, _ := url.Parse(c.Endpoint) // checked
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces" // a collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT is read
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		case c.Endpoint != "":
			opts = append(opts, otlptracehttp.WithEndpoint(c.Endpoint))
		}
		if c.Insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("unknown exporter %q", c.Exporter)
}

// Enabled reports whether t makes spans (t is not nil).
func (t *Tracer) Enabled() bool { return t != nil }

// Stats returns the span counts (zero for a nil Tracer).
func (t *Tracer) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	return t.proc.stats()
}

// ForceFlush exports every span ended so far, within ctx (tests; a
// no-op for a nil Tracer).
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Shutdown exports what is queued and stops, within ctx (spans still
// queued when ctx ends are lost and counted as failed).
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	err := t.tp.Shutdown(ctx)
	t.proc.abandon()
	return err
}

// RootTraceparent is the traceparent to store with a message published
// without one (contract.TraceContext.Root): the context of the publish
// span StartPublish will make for it, in a new trace sampled by
// mmmq.tracing.sampling-ratio. Nil for a nil Tracer.
func (t *Tracer) RootTraceparent() func(topic, id string, timestamp int64) string {
	if t == nil {
		return nil
	}
	return t.root
}

func (t *Tracer) root(topic, id string, timestamp int64) string {
	tid := randomTraceID()
	sid := publishSpanID(tid, trace.SpanID{}, Message{Topic: topic, ID: id, Timestamp: timestamp})
	var flags trace.TraceFlags
	if t.sampler.rootSampled(tid) {
		flags = trace.FlagsSampled
	}
	return formatTraceparent(trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags}))
}

// Span is one span in the making; the zero Span (tracing off, or not
// sampled) does nothing.
type Span struct{ s trace.Span }

// On reports whether s records anything (callers skip work that only
// feeds a span, such as reading the clock, when it does not).
func (s Span) On() bool { return s.s != nil }

// Transports of a publish span (AttrTransport).
const (
	TransportHTTP      = "http"
	TransportHTTPBatch = "http-batch"
	TransportLineProto = "lineproto"
)

// Attribute names the broker's spans carry, besides the OpenTelemetry
// messaging conventions' messaging.system, messaging.destination.name,
// messaging.operation.type, messaging.message.id and
// messaging.consumer.group.name.
const (
	AttrOffset     = "mmmq.offset"      // int: the message's offset (-1 at ACCEPTED)
	AttrAckLevel   = "mmmq.ack_level"   // ACCEPTED, WRITTEN or DURABLE
	AttrCommitWait = "mmmq.commit_wait" // float, seconds: from handing the message to its topic until the ack level was reached (the group commit's fsyncs included)
	AttrDuplicate  = "mmmq.duplicate"   // bool: an idempotent publish's repeat (nothing stored)
	AttrScheduled  = "mmmq.scheduled"   // bool: stored for later (deliverAt/delay); enters its topic when due
	AttrTransport  = "mmmq.transport"   // http, http-batch or lineproto
	AttrAttempt    = "mmmq.attempt"     // int: the push attempt, from 1
	AttrOutcome    = "mmmq.outcome"     // ACK, NACK or abnormal
	AttrBatchSize  = "mmmq.batch_size"  // int: messages in a batch push or a fetch
	AttrStatus     = "http.response.status_code"
)

// StartPublish starts the publish span of m (stored JSON already made: its
// id, timestamp and trace context are final), beginning at start. The span
// is a child of m's traceparent, or the root StartPublish's RootTraceparent
// made for it; its span id is derived from m (see PublishContext), so
// every later push names it as parent. End it with EndPublish.
func (t *Tracer) StartPublish(ctx context.Context, m Message, transport string, start time.Time) Span {
	if t == nil {
		return Span{}
	}
	stored, pub, own, ok := storedContext(m)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("messaging.system", "mmmq"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", m.Topic),
			attribute.String("messaging.message.id", m.ID),
			attribute.String(AttrTransport, transport))}
	switch {
	case ok && own:
		// The broker started this trace: the stored context is this
		// span's own, so it is a root with those ids.
		if !stored.IsSampled() {
			return Span{} // the root's sampling decision is in its flags
		}
		ctx = context.WithValue(ctx, wantKey{}, wantIDs{tid: stored.TraceID(), sid: pub})
		opts = append(opts, trace.WithNewRoot())
	case ok:
		ctx = context.WithValue(trace.ContextWithRemoteSpanContext(ctx, stored), wantKey{}, wantIDs{sid: pub})
	}
	_, s := t.tr.Start(ctx, "publish "+m.Topic, opts...)
	if !s.IsRecording() {
		return Span{} // not sampled
	}
	return Span{s}
}

// EndPublish ends a publish span with its outcome: the offset (-1 at
// ACCEPTED or for a scheduled message), the ack level reached, the time
// the topic took to reach it (commit wait), whether it was a duplicate,
// and err (non-nil: the publish failed and was not acknowledged).
func (s Span) EndPublish(offset int64, level contract.AckLevel, wait time.Duration, duplicate, scheduled bool, err error) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(attribute.Int64(AttrOffset, offset), attribute.String(AttrAckLevel, level.String()),
		attribute.Float64(AttrCommitWait, wait.Seconds()))
	if duplicate {
		s.s.SetAttributes(attribute.Bool(AttrDuplicate, true))
	}
	if scheduled {
		s.s.SetAttributes(attribute.Bool(AttrScheduled, true))
	}
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, contract.Classify(err).Code)
	}
	s.s.End()
}

// Push describes one push attempt for StartPush.
type Push struct {
	Dispatcher string
	Topic      string
	// Messages are the pushed messages in offset order, with their offsets.
	Messages []Message
	Offsets  []int64
	Attempt  int
	// Batch: the messages go as one batch request (span links, no parent).
	Batch bool
}

// StartPush starts the span of one push attempt and returns the context
// to send it with (its span's context is what the push's traceparent
// header carries: PushTrace). A push of one message is a child of that
// message's publish span (PublishContext); a batch push starts its own
// trace with a link to each message's publish span. End it with EndPush.
func (t *Tracer) StartPush(ctx context.Context, p Push) (context.Context, Span) {
	if t == nil {
		return ctx, Span{}
	}
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "mmmq"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.destination.name", p.Topic),
		attribute.String("messaging.consumer.group.name", p.Dispatcher),
		attribute.Int(AttrAttempt, p.Attempt),
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
	if p.Batch || len(p.Messages) != 1 {
		attrs = append(attrs, attribute.Int(AttrBatchSize, len(p.Messages)))
		if len(p.Offsets) > 0 {
			attrs = append(attrs, attribute.Int64(AttrOffset, p.Offsets[0]))
		}
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(links(p.Messages)...))
	} else {
		m := p.Messages[0]
		attrs = append(attrs, attribute.String("messaging.message.id", m.ID))
		if len(p.Offsets) > 0 {
			attrs = append(attrs, attribute.Int64(AttrOffset, p.Offsets[0]))
		}
		if sc, ok := PublishContext(m); ok {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		} else {
			opts = append(opts, trace.WithNewRoot())
		}
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, s := t.tr.Start(ctx, "push "+p.Topic, opts...)
	return ctx, Span{s}
}

func links(ms []Message) []trace.Link {
	ls := make([]trace.Link, 0, len(ms))
	for _, m := range ms {
		if sc, ok := PublishContext(m); ok {
			ls = append(ls, trace.Link{SpanContext: sc})
		}
	}
	return ls
}

// EndPush ends a push span: status is the HTTP status (0: none, the
// request failed), outcome ACK, NACK or "abnormal" (err says why; for a
// batch, ACK when every message was acknowledged, else NACK).
func (s Span) EndPush(status int, outcome string, err error) {
	if s.s == nil {
		return
	}
	if status > 0 {
		s.s.SetAttributes(attribute.Int(AttrStatus, status))
	}
	s.s.SetAttributes(attribute.String(AttrOutcome, outcome))
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, "abnormal answer")
	}
	s.s.End()
}

// Fetch is one consumer-group fetch for RecordFetch.
type Fetch struct {
	Topic, Group string
	// Traceparent and Tracestate are the fetch request's headers ("":
	// none); the span is their child.
	Traceparent, Tracestate string
	// Start is when the request began.
	Start time.Time
	// Messages are the fetched messages: a link to each one's publish span.
	Messages []Message
	// Err is the failure, if the fetch failed (nil: it answered).
	Err error
}

// RecordFetch makes the span of one finished consumer-group fetch, from
// f.Start to now: a child of the request's traceparent, or the root of a
// trace of its own, linked to every fetched message's publish span (and
// sampled when one of them is). An empty fetch that succeeded and has no
// traceparent makes no span: idle long polls would fill the export queue
// with traces that say nothing.
func (t *Tracer) RecordFetch(ctx context.Context, f Fetch) {
	if t == nil {
		return
	}
	parent, hasParent := remoteParent(f.Traceparent, f.Tracestate)
	if len(f.Messages) == 0 && f.Err == nil && !hasParent {
		return
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(f.Start),
		trace.WithLinks(links(f.Messages)...), trace.WithAttributes(
			attribute.String("messaging.system", "mmmq"),
			attribute.String("messaging.operation.type", "receive"),
			attribute.String("messaging.destination.name", f.Topic),
			attribute.String("messaging.consumer.group.name", f.Group),
			attribute.Int(AttrBatchSize, len(f.Messages)))}
	if hasParent {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	_, s := t.tr.Start(ctx, "fetch "+f.Topic, opts...)
	if f.Err != nil {
		s.RecordError(f.Err)
		s.SetStatus(codes.Error, contract.Classify(f.Err).Code)
	}
	s.End()
}

// remoteParent is the remote span context of a traceparent and
// tracestate (ok false for an invalid or empty traceparent).
func remoteParent(traceparent, tracestate string) (trace.SpanContext, bool) {
	tid, sid, flags, ok := parseTraceparent(traceparent)
	if !ok {
		return trace.SpanContext{}, false
	}
	ts, _ := trace.ParseTraceState(tracestate)
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: ts, Remote: true}), true
}

// PushTrace is the trace headers a push made under ctx sends: the context
// of ctx's push span (StartPush) when it has one, else the stored ones
// unchanged. Its shape is that of the dispatcher's TraceFunc.
func PushTrace(ctx context.Context, traceparent, tracestate string) (string, string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || sc.IsRemote() {
		return traceparent, tracestate
	}
	return formatTraceparent(sc), sc.TraceState().String()
}

// The OpenTelemetry SDK reports export failures through one process-wide
// error handler; it logs them, at most once per errorEvery.
const errorEvery = 30 * time.Second

var (
	handlerOnce sync.Once
	handlerLog  atomic.Pointer[zap.Logger]
	lastError   atomic.Int64
)

func setErrorHandler(log *zap.Logger) {
	handlerLog.Store(log)
	handlerOnce.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			now := time.Now().UnixNano()
			last := lastError.Load()
			if now-last < int64(errorEvery) || !lastError.CompareAndSwap(last, now) {
				return
			}
			if l := handlerLog.Load(); l != nil {
				l.Warn("span export failed (mmmq_tracing_spans_total counts the spans lost; logged at most every 30s)", zap.Error(err))
			}
		}))
	})
}
