package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mmmq/mmmq/modules/tracing"
)

var (
	tracingSpans = prometheus.NewDesc("mmmq_tracing_spans_total",
		"Spans the broker finished with tracing on (mmmq.tracing), by what became of them: outcome=\"exported\" taken by the collector, \"dropped\" the export queue was full (mmmq.tracing.queue-size), \"failed\" an export request failed or the spans were still queued at shutdown.",
		[]string{"outcome"}, nil)
	tracingQueued = prometheus.NewDesc("mmmq_tracing_spans_queued",
		"Spans waiting to be exported now (at most mmmq.tracing.queue-size).", nil, nil)
)

// tracingCollector reads the tracer's span counts at scrape time.
type tracingCollector struct{ stats func() tracing.Stats }

func (c tracingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tracingSpans
	ch <- tracingQueued
}

func (c tracingCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(tracingSpans, prometheus.CounterValue, float64(st.Exported), "exported")
	ch <- prometheus.MustNewConstMetric(tracingSpans, prometheus.CounterValue, float64(st.Dropped), "dropped")
	ch <- prometheus.MustNewConstMetric(tracingSpans, prometheus.CounterValue, float64(st.Failed), "failed")
	ch <- prometheus.MustNewConstMetric(tracingQueued, prometheus.GaugeValue, float64(st.Queued))
}

// WatchTracing adds, read at scrape time from t (nothing when t is nil:
// tracing off),
//
//	mmmq_tracing_spans_total{outcome="exported"|"dropped"|"failed"}  finished spans by fate
//	mmmq_tracing_spans_queued                                         spans waiting for export
func (m *Metrics) WatchTracing(t *tracing.Tracer) {
	if t == nil {
		return
	}
	m.reg.MustRegister(tracingCollector{stats: t.Stats})
}
