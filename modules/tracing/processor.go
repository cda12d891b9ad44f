package tracing

import (
	"context"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// boundedProcessor is the SDK's batch span processor behind an admission
// count that makes its drops visible. The batch processor drops a span
// silently when its queue is full; here every span that ends takes a
// place first (queued) and gives it back when its export request
// returns, so the batch processor's queue, sized the same, never fills:
// a span that finds no place is dropped and counted here instead. Export
// failures (the collector down or refusing) are counted by the exporter
// wrapper. Nothing here blocks the caller of End.
type boundedProcessor struct {
	sdktrace.SpanProcessor                   // the batch span processor
	max                    int64             // places
	queued                 atomic.Int64      // spans ended and not yet through an export
	dropped                atomic.Uint64     // no place
	counts                 *countingExporter // exported, failed
}

func newBoundedProcessor(exp sdktrace.SpanExporter, size int) *boundedProcessor {
	p := &boundedProcessor{max: int64(size)}
	p.counts = &countingExporter{SpanExporter: exp, queued: &p.queued}
	p.SpanProcessor = sdktrace.NewBatchSpanProcessor(p.counts, sdktrace.WithMaxQueueSize(size))
	return p
}

// OnEnd queues s for export, or drops and counts it when size spans are
// already waiting.
func (p *boundedProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	if p.queued.Add(1) > p.max {
		p.queued.Add(-1)
		p.dropped.Add(1)
		return
	}
	p.SpanProcessor.OnEnd(s)
}

func (p *boundedProcessor) stats() Stats {
	return Stats{Exported: p.counts.exported.Load(), Dropped: p.dropped.Load(), Failed: p.counts.failed.Load(), Queued: p.queued.Load()}
}

// abandon counts the spans still queued after shutdown as failed.
func (p *boundedProcessor) abandon() {
	if n := p.queued.Swap(0); n > 0 {
		p.counts.failed.Add(uint64(n))
	}
}

// countingExporter counts what each export request did with its spans
// and gives their places back.
type countingExporter struct {
	sdktrace.SpanExporter
	queued           *atomic.Int64
	exported, failed atomic.Uint64
}

func (e *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	n := len(spans)
	e.queued.Add(-int64(n))
	if err != nil {
		e.failed.Add(uint64(n))
	} else {
		e.exported.Add(uint64(n))
	}
	return err
}
