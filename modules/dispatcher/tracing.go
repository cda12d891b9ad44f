package dispatcher

import (
	"context"
	"errors"

	"github.com/mmmq/mmmq/modules/tracing"
)

// SetTracer makes the Manager's workers start a span per push attempt
// (modules/tracing: a child of the message's publish span; a batch push
// links every message's), and, when its Sender is the *HTTPSender, send
// that span's context as the push's traceparent and tracestate instead of
// the stored ones (the stored headers keep the publisher's value). A
// Sender of another type gets the span in the context of Send or Push.
// Nil: tracing off. Call it before Start.
func (m *Manager) SetTracer(t *tracing.Tracer) {
	m.tracer = t
	if h, ok := m.sender.(*HTTPSender); ok && t != nil {
		h.SetTrace(pushSpanTrace)
	}
}

// pushSpanTrace is the TraceFunc of a traced HTTPSender: the push span's
// context when the attempt has one.
func pushSpanTrace(ctx context.Context, _ Delivery, traceparent, tracestate string) (string, string) {
	return tracing.PushTrace(ctx, traceparent, tracestate)
}

// startPushSpan starts the span of one attempt of p (tracing on only).
func (w *worker) startPushSpan(ctx context.Context, p Push) (context.Context, tracing.Span) {
	tp := tracing.Push{Dispatcher: w.d.name, Topic: w.topicName, Batch: p.Batch,
		Messages: make([]tracing.Message, len(p.Messages)), Offsets: make([]int64, len(p.Messages))}
	for i, d := range p.Messages {
		tp.Messages[i] = tracing.MessageOf(d.Topic, d.Body)
		tp.Offsets[i] = d.Offset
		tp.Attempt = max(tp.Attempt, d.Attempt)
	}
	return w.m.tracer.StartPush(ctx, tp)
}

// endPushSpan ends an attempt's span with its answer.
func endPushSpan(s tracing.Span, a Answer, err error) {
	if !s.On() {
		return
	}
	status := a.Status
	var ab *AbnormalError
	if err != nil {
		if errors.As(err, &ab) {
			status = ab.StatusCode
		}
		s.EndPush(status, "abnormal", err)
		return
	}
	outcome := string(ACK)
	for _, o := range a.Outcomes {
		if o != ACK {
			outcome = string(NACK)
		}
	}
	s.EndPush(status, outcome, nil)
}
