package tracing

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mmmq/mmmq/modules/contract"
)

// Message is what the tracer needs of one stored message: its topic and
// the members of its stored JSON that name it (id, timestamp) and carry
// its trace context (headers.traceparent, headers.tracestate; "" when
// absent or invalid).
type Message struct {
	Topic       string
	ID          string
	Timestamp   int64 // Unix ms
	Traceparent string
	Tracestate  string
}

// MessageOf reads a Message out of a stored message JSON of topic.
func MessageOf(topic string, stored []byte) Message {
	id, _, ts, _ := contract.StoredMeta(stored)
	tp, st := contract.MessageTrace(stored)
	return Message{Topic: topic, ID: id, Timestamp: ts, Traceparent: tp, Tracestate: st}
}

// The publish span of a message has a span id derived from the message
// itself, so that a push or a fetch made later (after a restart, on
// another node of the same data) can name it as parent or link without
// anything more being stored than the producer's trace context:
//
//	publishSpanID = first 8 bytes of SHA-256(trace-id | parent | topic | 0x00 | id | 0x00 | timestamp)
//
// where parent is the stored traceparent's parent-id, or 8 zero bytes when
// the broker started the trace itself (then the stored traceparent is the
// publish span's own context, and its parent-id equals the id derived
// with zero bytes: that is how a reader tells the two apart).
func publishSpanID(tid trace.TraceID, parent trace.SpanID, m Message) trace.SpanID {
	h := sha256.New()
	h.Write(tid[:])
	h.Write(parent[:])
	h.Write([]byte(m.Topic))
	h.Write([]byte{0})
	h.Write([]byte(m.ID))
	h.Write([]byte{0})
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(m.Timestamp))
	h.Write(ts[:])
	var sum [sha256.Size]byte
	var sid trace.SpanID
	copy(sid[:], h.Sum(sum[:0]))
	if !sid.IsValid() {
		sid[7] = 1
	}
	return sid
}

// parseTraceparent splits a valid traceparent (contract.ValidTraceparent)
// into its ids and flags; ok is false for "" or an invalid one.
func parseTraceparent(tp string) (tid trace.TraceID, sid trace.SpanID, flags trace.TraceFlags, ok bool) {
	if !contract.ValidTraceparent(tp) {
		return tid, sid, 0, false
	}
	if _, err := hex.Decode(tid[:], []byte(tp[3:35])); err != nil {
		return tid, sid, 0, false
	}
	if _, err := hex.Decode(sid[:], []byte(tp[36:52])); err != nil {
		return tid, sid, 0, false
	}
	var f [1]byte
	if _, err := hex.Decode(f[:], []byte(tp[53:55])); err != nil {
		return tid, sid, 0, false
	}
	return tid, sid, trace.TraceFlags(f[0]) & trace.FlagsSampled, true
}

// formatTraceparent is the version 00 traceparent of sc.
func formatTraceparent(sc trace.SpanContext) string {
	tid, sid := sc.TraceID(), sc.SpanID()
	flags := "00"
	if sc.IsSampled() {
		flags = "01"
	}
	return "00-" + hex.EncodeToString(tid[:]) + "-" + hex.EncodeToString(sid[:]) + "-" + flags
}

// PublishContext is the span context of m's publish span, as a remote
// parent: what a push of m is a child of and a fetch or batch push links
// to. ok is false when m has no trace context (no span can be named).
func PublishContext(m Message) (trace.SpanContext, bool) {
	stored, pub, _, ok := storedContext(m)
	if !ok {
		return trace.SpanContext{}, false
	}
	return stored.WithSpanID(pub), true
}

// storedContext reads m's stored trace context (as a remote span
// context) and names m's publish span: pub is its id, and own says that
// the broker started the trace, so the stored context is the publish span
// itself (pub is then its span id). ok is false without a valid stored
// traceparent.
func storedContext(m Message) (stored trace.SpanContext, pub trace.SpanID, own, ok bool) {
	stored, ok = remoteParent(m.Traceparent, m.Tracestate)
	if !ok {
		return stored, pub, false, false
	}
	tid, sid := stored.TraceID(), stored.SpanID()
	if publishSpanID(tid, trace.SpanID{}, m) == sid {
		return stored, sid, true, true
	}
	return stored, publishSpanID(tid, sid, m), false, true
}

// wantIDs carries the ids the next span started with its context must get
// (the publish span's derived ids); the IDGenerator reads it.
type wantIDs struct {
	tid trace.TraceID
	sid trace.SpanID
}

type wantKey struct{}

// idGenerator gives a span the ids its context asks for (wantIDs), and
// random ones otherwise.
type idGenerator struct{}

var _ sdktrace.IDGenerator = idGenerator{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if w, ok := ctx.Value(wantKey{}).(wantIDs); ok && w.tid.IsValid() {
		return w.tid, w.sid
	}
	return randomTraceID(), randomSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if w, ok := ctx.Value(wantKey{}).(wantIDs); ok && w.sid.IsValid() {
		return w.sid
	}
	return randomSpanID()
}

func randomTraceID() (t trace.TraceID) {
	for !t.IsValid() {
		rand.Read(t[:])
	}
	return t
}

func randomSpanID() (s trace.SpanID) {
	for !s.IsValid() {
		rand.Read(s[:])
	}
	return s
}

// sampler is parent-based: a span with a parent follows the parent's
// sampled flag; one without a parent is sampled when any of its links is
// (a batch push or a fetch of sampled messages), else by the trace id
// ratio.
type sampler struct{ ratio sdktrace.Sampler }

func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	psc := trace.SpanContextFromContext(p.ParentContext)
	if psc.IsValid() {
		dec := sdktrace.Drop
		if psc.IsSampled() {
			dec = sdktrace.RecordAndSample
		}
		return sdktrace.SamplingResult{Decision: dec, Tracestate: psc.TraceState()}
	}
	for _, l := range p.Links {
		if l.SpanContext.IsSampled() {
			return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
		}
	}
	return s.ratio.ShouldSample(p)
}

func (s sampler) Description() string { return "mmmq{parent, links, " + s.ratio.Description() + "}" }

// rootSampled reports whether a trace the broker starts with id tid is
// sampled (the ratio's decision, as sampler makes it for a root).
func (s sampler) rootSampled(tid trace.TraceID) bool {
	return s.ratio.ShouldSample(sdktrace.SamplingParameters{ParentContext: context.Background(), TraceID: tid}).Decision == sdktrace.RecordAndSample
}
