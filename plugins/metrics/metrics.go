// Package metrics serves Prometheus metrics at GET /metrics: the write path
// (fsync latency, group-commit batch sizes), every topic (high watermark,
// bytes, segments) and every dispatch worker (committed offset, lag,
// deliveries, NACKs, abnormal answers, skips). It is a plugin: the default
// application includes it, and mmmq.metrics.enabled: false removes the route.
package metrics

import (
	"math"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Metrics owns a Prometheus registry. It implements storage.Observer and
// topicqueue.PublishObserver.
type Metrics struct {
	reg     *prometheus.Registry
	fsync   prometheus.Histogram
	batch   prometheus.Histogram
	fsyncs  *prometheus.CounterVec
	entries prometheus.Counter
	// publish is mmmq_publish_duration_seconds by ack level, indexed by
	// contract.AckLevel - 1 (accepted, written, durable).
	publish [3]publishHistogram
}

// New creates the registry with Go runtime and process collectors, and the
// write-path metrics:
//
//	mmmq_fsync_seconds           histogram of segment and index fsyncs
//	mmmq_group_commit_entries    histogram of entries per group commit
//	mmmq_fsyncs_total{file}      fsyncs of segment (file="segment") and
//	                             offset index (file="index") files
//	mmmq_appended_entries_total  entries made durable
//	mmmq_publish_duration_seconds{level="accepted"|"written"|"durable"}
//	                             histogram of publish latency, one
//	                             observation per message (ObservePublish)
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.fsync = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mmmq_fsync_seconds",
		Help:    "Duration of fsyncs of segment (.mmm) and offset index (.idx) files.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16), // 50µs .. ~1.6s
	})
	m.batch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "mmmq_group_commit_entries",
		Help:    "Entries written by one group commit (one fsync pair).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 14), // 1 .. 8192
	})
	m.fsyncs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mmmq_fsyncs_total",
		Help: "Fsyncs of segment (file=\"segment\") and offset index (file=\"index\") files."}, []string{"file"})
	m.entries = prometheus.NewCounter(prometheus.CounterOpts{Name: "mmmq_appended_entries_total", Help: "Entries committed to topic logs."})
	for _, f := range []storage.FileKind{storage.FileSegment, storage.FileIndex} {
		m.fsyncs.WithLabelValues(string(f)) // both series exist from the start, at 0
	}
	for i := range m.publish {
		m.publish[i].counts = make([]atomic.Uint64, len(publishBuckets)+1)
	}
	m.reg.MustRegister(m.fsync, m.batch, m.fsyncs, m.entries, publishCollector{m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the Prometheus registry, for plugins that add their own metrics.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// ObserveFsync implements storage.Observer.
func (m *Metrics) ObserveFsync(_ string, file storage.FileKind, d time.Duration) {
	m.fsync.Observe(d.Seconds())
	m.fsyncs.WithLabelValues(string(file)).Inc()
}

// ObserveBatch implements storage.Observer.
func (m *Metrics) ObserveBatch(_ string, entries int) {
	m.batch.Observe(float64(entries))
	m.entries.Add(float64(entries))
}

// publishBuckets are the upper bounds, in seconds, of
// mmmq_publish_duration_seconds: 10µs doubling to about 1.3s (an accepted
// publish is answered in microseconds, a durable one after its group
// commit's fsync).
var publishBuckets = prometheus.ExponentialBuckets(10e-6, 2, 18)

var publishDuration = prometheus.NewDesc("mmmq_publish_duration_seconds",
	"Publish latency by the ack level asked for: from the call into the topic registry (every transport: HTTP, batches, line protocol; and at durable scheduled messages entering their topic, dead letters and redrives) until the answer at that level was ready. One observation per message, duplicates of the idempotent-publish window included: a batch of n is observed n times with the call's duration. Failed or refused publishes are not observed.",
	[]string{"level"}, nil)

// publishHistogram is one level's mmmq_publish_duration_seconds. Unlike a
// prometheus.Histogram it adds n observations of one duration at once
// (a batch's messages), in constant time and without allocating.
type publishHistogram struct {
	counts []atomic.Uint64 // per bucket of publishBuckets, not cumulative; the last one is +Inf
	sum    atomic.Uint64   // math.Float64bits of the seconds observed, summed
}

// add observes n messages of sec seconds each.
func (h *publishHistogram) add(n uint64, sec float64) {
	h.counts[sort.SearchFloat64s(publishBuckets, sec)].Add(n)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+float64(n)*sec)) {
			return
		}
	}
}

// publishCollector exports Metrics.publish at scrape time.
type publishCollector struct{ m *Metrics }

func (c publishCollector) Describe(ch chan<- *prometheus.Desc) { ch <- publishDuration }

func (c publishCollector) Collect(ch chan<- prometheus.Metric) {
	for i := range c.m.publish {
		h := &c.m.publish[i]
		buckets := make(map[float64]uint64, len(publishBuckets))
		var count uint64
		for j, le := range publishBuckets {
			count += h.counts[j].Load()
			buckets[le] = count
		}
		count += h.counts[len(publishBuckets)].Load()
		level := strings.ToLower(contract.AckLevel(i + 1).String())
		ch <- prometheus.MustNewConstHistogram(publishDuration, count, math.Float64frombits(h.sum.Load()), buckets, level)
	}
}

// ObservePublish implements topicqueue.PublishObserver: messages
// observations of d in mmmq_publish_duration_seconds{level}. Levels other
// than accepted, written and durable, and messages < 1, are ignored. It
// allocates nothing.
func (m *Metrics) ObservePublish(level contract.AckLevel, messages int, d time.Duration) {
	if level < contract.Accepted || level > contract.Durable || messages < 1 {
		return
	}
	m.publish[level-1].add(uint64(messages), d.Seconds())
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Register implements contract.Route: GET /metrics.
func (m *Metrics) Register(r *mux.Router) {
	h := m.Handler()
	r.HandleFunc("/metrics", func(w http.ResponseWriter, req *http.Request) {
		// The metrics action, when authentication is on and /metrics is
		// protected (mmmq.auth.protect-metrics; the HTTP server lets an
		// unprotected /metrics through without a principal).
		if err := contract.Authorize(req.Context(), contract.ActionMetrics, "", ""); err != nil {
			contract.WriteErr(w, err)
			return
		}
		h.ServeHTTP(w, req)
	}).Methods(http.MethodGet)
}

var (
	topicNext     = prometheus.NewDesc("mmmq_topic_next_offset", "High watermark: the next offset to become visible.", []string{"topic"}, nil)
	topicBytes    = prometheus.NewDesc("mmmq_topic_bytes", "Bytes in the topic's segment files.", []string{"topic"}, nil)
	topicSegments = prometheus.NewDesc("mmmq_topic_segments", "Segments of the topic.", []string{"topic"}, nil)
	topicFailed   = prometheus.NewDesc("mmmq_topic_failed", "1 when the topic's log failed (write or fsync error) and refuses writes.", []string{"topic"}, nil)
	quarantined   = prometheus.NewDesc("mmmq_topics_quarantined", "Topics refused by startup recovery and excluded.", nil, nil)
	deadBytes     = prometheus.NewDesc("mmmq_dead_letter_bytes", "Bytes in the segment files of the dead-letter topics (dead-letter.*), which retention keeps unless an override names them.", nil, nil)

	recReindexed = prometheus.NewDesc("mmmq_recovery_reindexed_entries_total",
		"Entries startup recovery indexed again from the last segment of a topic (valid in the segment, missing from its offset index).", nil, nil)
	recCutIndex = prometheus.NewDesc("mmmq_recovery_cut_index_entries_total",
		"Offset index entries startup recovery removed: torn, zero or garbage ones (rebuilt when their entries are valid) and those of torn entries.", nil, nil)
	recCutValid = prometheus.NewDesc("mmmq_recovery_cut_valid_entries_total",
		"CRC-valid entries startup recovery cut with a torn group commit: after a hole, within one group commit (1 MiB) of it; not acknowledged unless acknowledged bytes were damaged there.", nil, nil)
	recCutBytes = prometheus.NewDesc("mmmq_recovery_cut_bytes_total",
		"Bytes startup recovery cut from segment (file=\"segment\") and offset index (file=\"index\") files.", []string{"file"}, nil)
	recZeroTail = prometheus.NewDesc("mmmq_recovery_zero_tail_bytes_total",
		"Zero bytes startup recovery cut from the ends of last segments' files (preallocated tails of a broker that did not close cleanly); not part of mmmq_recovery_cut_bytes_total.", nil, nil)
)

// topicCollector reads the registry at scrape time.
type topicCollector struct{ reg *topicqueue.Registry }

func (c topicCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- topicNext
	ch <- topicBytes
	ch <- topicSegments
	ch <- topicFailed
	ch <- quarantined
	ch <- deadBytes
	ch <- recReindexed
	ch <- recCutIndex
	ch <- recCutValid
	ch <- recCutBytes
	ch <- recZeroTail
}

func (c topicCollector) Collect(ch chan<- prometheus.Metric) {
	var dead int64
	for _, q := range c.reg.List() {
		st := q.Stats()
		if contract.ReservedPrefix(st.Topic) == contract.DeadLetterPrefix {
			dead += st.Bytes
		}
		ch <- prometheus.MustNewConstMetric(topicNext, prometheus.GaugeValue, float64(st.NextOffset), st.Topic)
		ch <- prometheus.MustNewConstMetric(topicBytes, prometheus.GaugeValue, float64(st.Bytes), st.Topic)
		ch <- prometheus.MustNewConstMetric(topicSegments, prometheus.GaugeValue, float64(st.Segments), st.Topic)
		failed := 0.0
		if st.Failed != "" {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(topicFailed, prometheus.GaugeValue, failed, st.Topic)
	}
	ch <- prometheus.MustNewConstMetric(quarantined, prometheus.GaugeValue, float64(len(c.reg.Quarantined())))
	ch <- prometheus.MustNewConstMetric(deadBytes, prometheus.GaugeValue, float64(dead))
	cuts := c.reg.RecoveryCuts()
	ch <- prometheus.MustNewConstMetric(recReindexed, prometheus.CounterValue, float64(cuts.ReindexedEntries))
	ch <- prometheus.MustNewConstMetric(recCutIndex, prometheus.CounterValue, float64(cuts.CutIndexEntries))
	ch <- prometheus.MustNewConstMetric(recCutValid, prometheus.CounterValue, float64(cuts.CutValidEntries))
	ch <- prometheus.MustNewConstMetric(recCutBytes, prometheus.CounterValue, float64(cuts.CutSegmentBytes), "segment")
	ch <- prometheus.MustNewConstMetric(recCutBytes, prometheus.CounterValue, float64(cuts.CutIndexBytes), "index")
	ch <- prometheus.MustNewConstMetric(recZeroTail, prometheus.CounterValue, float64(cuts.ZeroTailBytes))
}

var (
	dLabels    = []string{"dispatcher", "topic"}
	dCommitted = prometheus.NewDesc("mmmq_dispatch_committed_offset", "Checkpoint of a dispatch worker: the next offset it will deliver after a restart.", dLabels, nil)
	dLag       = prometheus.NewDesc("mmmq_dispatch_lag", "Messages between the worker's next offset and the topic's high watermark.", dLabels, nil)
	dDelivered = prometheus.NewDesc("mmmq_dispatch_delivered_total", "Messages ACKed by the consumer.", dLabels, nil)
	dNacked    = prometheus.NewDesc("mmmq_dispatch_nacks_total", "NACK answers.", dLabels, nil)
	dExhausted = prometheus.NewDesc("mmmq_dispatch_exhausted_total", "Messages given up on: NACKed on every attempt (1 + mmmq.broker.dispatch.max-resends, by default 4) or past the abnormal limit; dead-lettered unless dead letters are off.", dLabels, nil)
	dDead      = prometheus.NewDesc("mmmq_dispatch_dead_lettered_total", "Exhausted messages appended to the dispatcher's dead-letter topic (the others were logged and skipped: dead letters off).", dLabels, nil)
	dAbnormal  = prometheus.NewDesc("mmmq_dispatch_abnormal_total", "Abnormal answers (errors, timeouts, non-2xx, other bodies).", dLabels, nil)
	dSkipped   = prometheus.NewDesc("mmmq_dispatch_corrupt_skipped_total", "Corrupt entries (CRC mismatch at read) logged and skipped, not delivered (the original Java mmmq's integrity check).", dLabels, nil)
	dBackoff   = prometheus.NewDesc("mmmq_dispatch_backoff", "1 while the worker waits in backoff after an abnormal answer.", dLabels, nil)
	dOldest    = prometheus.NewDesc("mmmq_dispatch_oldest_unacked_age_seconds", "Age of the oldest message the worker has not had acknowledged (from its stored timestamp); 0 when it is idle: how far behind the consumer is in time.", dLabels, nil)
	// Ordering "key" only; never labelled by key (keys are unbounded).
	dKeysInFlight = prometheus.NewDesc("mmmq_dispatch_keys_in_flight", "Ordering key: keys with a push outstanding.", dLabels, nil)
	dParkedKeys   = prometheus.NewDesc("mmmq_dispatch_parked_keys", "Ordering key: messages waiting out a backoff after a NACK or an abnormal answer, each holding back its key.", dLabels, nil)
	dUnacked      = prometheus.NewDesc("mmmq_dispatch_unacked_messages", "Ordering key: messages past the checkpoint read so far, finished or not (at most mmmq_dispatch_max_unacked).", dLabels, nil)
	dMaxUnacked   = prometheus.NewDesc("mmmq_dispatch_max_unacked", "Ordering key: the dispatcher's max-unacked, the most messages past the checkpoint.", dLabels, nil)
	// While a seek or redrive with a rate replays the worker's backlog.
	dReplayRate   = prometheus.NewDesc("mmmq_dispatch_replay_rate", "Replay rate of a seek or redrive with a rate: messages per second for the worker's backlog, shared by the topics of that call; present until the checkpoint reaches the target.", dLabels, nil)
	dReplayRemain = prometheus.NewDesc("mmmq_dispatch_replay_remaining", "Replay rate: messages between the checkpoint and the replay's target offset (the high watermark as of the seek, or as the redrive ended).", dLabels, nil)
	// Per dispatcher (one token bucket over all its topics), for
	// dispatchers with a rate-limit.
	rLabels      = []string{"dispatcher"}
	dRateLimit   = prometheus.NewDesc("mmmq_dispatch_rate_limit", "Rate limit: the dispatcher's rate-limit, in messages per second over all its topics on this node.", rLabels, nil)
	dRateWaiting = prometheus.NewDesc("mmmq_dispatch_rate_limited_workers", "Rate limit: the dispatcher's topic workers waiting for tokens before their next push now.", rLabels, nil)
	dRateDelayed = prometheus.NewDesc("mmmq_dispatch_rate_limited_pushes_total", "Rate limit: pushes held until their tokens were there.", rLabels, nil)
	dRateSeconds = prometheus.NewDesc("mmmq_dispatch_rate_limited_seconds_total", "Rate limit: time pushes were held for tokens, summed over the dispatcher's workers; a wait is counted when it ends.", rLabels, nil)
	// Per dispatcher (one breaker per host), for dispatchers with
	// breaker-failures.
	dBreakerState  = prometheus.NewDesc("mmmq_dispatch_breaker_state", "Circuit breaker: 0 closed (pushes go), 1 open (no push to the host until the probe), 2 half-open (one probe push).", rLabels, nil)
	dBreakerOpened = prometheus.NewDesc("mmmq_dispatch_breaker_opened_total", "Circuit breaker: openings, from closed or after a failed probe.", rLabels, nil)
	dPaused        = prometheus.NewDesc("mmmq_dispatch_paused", "1 for a paused dispatcher, by who paused it: reason admin (the API, the CLI, the status page) or auto (pause-after: its endpoint kept failing).", []string{"dispatcher", "reason"}, nil)
	dBreakerProbes = prometheus.NewDesc("mmmq_dispatch_breaker_probes_total", "Circuit breaker: probe pushes sent while half-open.", rLabels, nil)
	// Per dispatcher (one limit over all its topics), for dispatchers with
	// adaptive-concurrency aimd.
	dConcLimit     = prometheus.NewDesc("mmmq_dispatch_concurrency_limit", "Adaptive concurrency: the most pushes the dispatcher may have outstanding now over all its topics on this node (1..max-in-flight).", rLabels, nil)
	dConcInFlight  = prometheus.NewDesc("mmmq_dispatch_concurrency_in_flight", "Adaptive concurrency: the dispatcher's pushes outstanding now over all its topics on this node.", rLabels, nil)
	dConcDecreases = prometheus.NewDesc("mmmq_dispatch_concurrency_decreases_total", "Adaptive concurrency: times the limit went down (429, 503, timeout, latency rise).", rLabels, nil)
	dispatchAll    = []*prometheus.Desc{dCommitted, dLag, dDelivered, dNacked, dExhausted, dDead, dAbnormal, dSkipped, dBackoff, dOldest,
		dKeysInFlight, dParkedKeys, dUnacked, dMaxUnacked, dReplayRate, dReplayRemain, dRateLimit, dRateWaiting, dRateDelayed, dRateSeconds,
		dBreakerState, dBreakerOpened, dBreakerProbes, dPaused, dConcLimit, dConcInFlight, dConcDecreases}
)

// dispatchCollector reads the dispatch workers at scrape time.
type dispatchCollector struct {
	m   *dispatcher.Manager
	reg *topicqueue.Registry
}

// breakerValue is the mmmq_dispatch_breaker_state of s.
func breakerValue(s dispatcher.BreakerState) float64 {
	switch s {
	case dispatcher.BreakerOpen:
		return 1
	case dispatcher.BreakerHalfOpen:
		return 2
	}
	return 0
}

func (c dispatchCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range dispatchAll {
		ch <- d
	}
}

func (c dispatchCollector) Collect(ch chan<- prometheus.Metric) {
	// Per dispatcher, every topic it matches: a paused dispatcher (no
	// worker) still shows its lag and the age of its oldest message.
	var all []dispatcher.WorkerStatus
	for _, d := range c.m.Dispatchers() {
		st, err := c.m.DispatcherStatus(d.Name())
		if err == nil {
			all = append(all, st...)
		}
		if d.RateLimit() > 0 {
			rs, _ := c.m.RateStatus(d.Name())
			ch <- prometheus.MustNewConstMetric(dRateLimit, prometheus.GaugeValue, d.RateLimit(), d.Name())
			ch <- prometheus.MustNewConstMetric(dRateWaiting, prometheus.GaugeValue, float64(rs.Waiting), d.Name())
			ch <- prometheus.MustNewConstMetric(dRateDelayed, prometheus.CounterValue, float64(rs.Delayed), d.Name())
			ch <- prometheus.MustNewConstMetric(dRateSeconds, prometheus.CounterValue, rs.Waited.Seconds(), d.Name())
		}
		if info, paused := c.m.PauseInfo(d.Name()); paused {
			ch <- prometheus.MustNewConstMetric(dPaused, prometheus.GaugeValue, 1, d.Name(), string(info.Reason))
		}
		if d.BreakerFailures() > 0 {
			bs, _ := c.m.BreakerStatus(d.Name()) // zero before any worker used it: closed
			ch <- prometheus.MustNewConstMetric(dBreakerState, prometheus.GaugeValue, breakerValue(bs.State), d.Name())
			ch <- prometheus.MustNewConstMetric(dBreakerOpened, prometheus.CounterValue, float64(bs.Opened), d.Name())
			ch <- prometheus.MustNewConstMetric(dBreakerProbes, prometheus.CounterValue, float64(bs.Probes), d.Name())
		}
		if d.AdaptiveConcurrency() == dispatcher.AdaptiveAIMD {
			cs, on := c.m.ConcurrencyStatus(d.Name())
			if !on {
				cs.Limit = d.MaxInFlight() // no worker used it yet: at its max
			}
			ch <- prometheus.MustNewConstMetric(dConcLimit, prometheus.GaugeValue, float64(cs.Limit), d.Name())
			ch <- prometheus.MustNewConstMetric(dConcInFlight, prometheus.GaugeValue, float64(cs.InFlight), d.Name())
			ch <- prometheus.MustNewConstMetric(dConcDecreases, prometheus.CounterValue, float64(cs.Decreases), d.Name())
		}
	}
	for _, s := range all {
		lv := []string{s.Dispatcher, s.Topic}
		lag := 0.0
		if q, ok := c.reg.Get(s.Topic); ok {
			lag = float64(q.HighWatermark() - s.Next)
		}
		backoff := 0.0
		if s.Backoff {
			backoff = 1
		}
		ch <- prometheus.MustNewConstMetric(dCommitted, prometheus.GaugeValue, float64(s.Committed), lv...)
		ch <- prometheus.MustNewConstMetric(dLag, prometheus.GaugeValue, lag, lv...)
		ch <- prometheus.MustNewConstMetric(dDelivered, prometheus.CounterValue, float64(s.Delivered), lv...)
		ch <- prometheus.MustNewConstMetric(dNacked, prometheus.CounterValue, float64(s.Nacked), lv...)
		ch <- prometheus.MustNewConstMetric(dExhausted, prometheus.CounterValue, float64(s.Exhausted), lv...)
		ch <- prometheus.MustNewConstMetric(dDead, prometheus.CounterValue, float64(s.DeadLettered), lv...)
		ch <- prometheus.MustNewConstMetric(dAbnormal, prometheus.CounterValue, float64(s.Abnormal), lv...)
		ch <- prometheus.MustNewConstMetric(dSkipped, prometheus.CounterValue, float64(s.Skipped), lv...)
		ch <- prometheus.MustNewConstMetric(dBackoff, prometheus.GaugeValue, backoff, lv...)
		age := 0.0
		if !s.OldestUnacked.IsZero() {
			age = max(0, time.Since(s.OldestUnacked).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(dOldest, prometheus.GaugeValue, age, lv...)
		if r := s.Replay; r != nil {
			ch <- prometheus.MustNewConstMetric(dReplayRate, prometheus.GaugeValue, r.Rate, lv...)
			if r.Until != math.MaxInt64 { // known once the redrive has ended
				ch <- prometheus.MustNewConstMetric(dReplayRemain, prometheus.GaugeValue, float64(max(0, r.Until-s.Committed)), lv...)
			}
		}
		if s.Ordering == dispatcher.OrderKey {
			ch <- prometheus.MustNewConstMetric(dKeysInFlight, prometheus.GaugeValue, float64(s.KeysInFlight), lv...)
			ch <- prometheus.MustNewConstMetric(dParkedKeys, prometheus.GaugeValue, float64(s.ParkedKeys), lv...)
			ch <- prometheus.MustNewConstMetric(dUnacked, prometheus.GaugeValue, float64(s.Unacked), lv...)
			ch <- prometheus.MustNewConstMetric(dMaxUnacked, prometheus.GaugeValue, float64(s.MaxUnacked), lv...)
		}
	}
}

// WatchTopics adds per-topic gauges read from reg at scrape time.
func (m *Metrics) WatchTopics(reg *topicqueue.Registry) { m.reg.MustRegister(topicCollector{reg}) }

// WatchBudget adds the in-flight memory budget's use and cap, in bytes
// (mmmq.broker.memory.max-inflight-bytes), read at scrape time: what fetch
// replies, read-back pages and pending ACCEPTED publishes hold right now.
// A nil budget adds nothing.
func (m *Metrics) WatchBudget(b *contract.Budget) {
	if b == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_memory_inflight_bytes",
			Help: "Bytes held by in-flight fetch replies, read-back pages and pending ACCEPTED publishes."},
			func() float64 { return float64(b.InUse()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_memory_inflight_max_bytes",
			Help: "The in-flight budget (mmmq.broker.memory.max-inflight-bytes); 0 means unlimited."},
			func() float64 { return float64(b.Max()) }),
	)
}

// WatchSegmentCache adds the storage segment cache's gauges and counters,
// read at scrape time: pairs of segment files open now (2 descriptors
// each) against the cap (mmmq.broker.storage.max-open-segments), and how
// often a miss opened a pair or a full cache evicted one. Opens climbing
// with the publish rate mean more busy topics (or replayed segments) than
// the cap: raise it, or the open-file limit with it. A nil cache adds
// nothing.
func (m *Metrics) WatchSegmentCache(c *storage.SegmentCache) {
	if c == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_segment_cache_open_segments",
			Help: "Segments whose .mmm and .idx files are open in the segment cache (2 descriptors each)."},
			func() float64 { return float64(c.Stats().Open) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_segment_cache_capacity",
			Help: "The segment cache's cap (mmmq.broker.storage.max-open-segments)."},
			func() float64 { return float64(c.Stats().Capacity) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_segment_cache_opens_total",
			Help: "Segment file pairs opened because they were not in the cache."},
			func() float64 { return float64(c.Stats().Opens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_segment_cache_evictions_total",
			Help: "Segment file pairs closed to make room in the cache."},
			func() float64 { return float64(c.Stats().Evictions) }),
	)
}

// WatchSpaceGuard adds the disk guard's figures
// (mmmq.broker.storage.min-free-bytes), read at scrape time: the free
// bytes of the data filesystem (sampled at most once a second, also while
// idle), the minimum, whether publishes are refused now and how many were
// (507 NO_SPACE). A nil guard (min-free-bytes: 0) adds nothing.
func (m *Metrics) WatchSpaceGuard(g *storage.SpaceGuard) {
	if g == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_storage_free_bytes",
			Help: "Bytes free on the data filesystem (statfs, available to non-root) at the disk guard's last sample; -1 before the first."},
			func() float64 { return float64(g.FreeBytes()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_storage_min_free_bytes",
			Help: "The disk guard's minimum (mmmq.broker.storage.min-free-bytes): publishes are refused below it."},
			func() float64 { return float64(g.Stats().MinFree) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_storage_space_refusing",
			Help: "1 while the disk guard refuses publishes (507 NO_SPACE)."},
			func() float64 {
				if g.Stats().Refusing {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_storage_space_refused_total",
			Help: "Publishes (and new topics) refused by the disk guard with 507 NO_SPACE; nothing of them was stored."},
			func() float64 { return float64(g.Stats().Refused) }),
	)
}

// WatchPrealloc adds the broker-wide preallocation budget's figures
// (mmmq.broker.storage.preallocate and preallocate-max-bytes), read at
// scrape time: the zero bytes the active segments' and indexes'
// preallocated tails hold now, the cap, and the chunks not written, by
// reason ("budget": the cap would be passed, raise preallocate-max-bytes
// if it climbs with the publish rate; "disk": the disk guard would go
// under min-free-bytes; "concurrency": four chunks were being written).
// A nil budget (preallocation off) shows every series at 0, so a
// dashboard tells "off" (cap 0) from "nothing held now".
func (m *Metrics) WatchPrealloc(b *storage.PreallocBudget) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_storage_preallocated_bytes",
			Help: "Zero bytes preallocated ahead of the writers in active segment and offset index files now, over all topics (not counted in mmmq_topic_bytes)."},
			func() float64 { return float64(b.Stats().Used) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_storage_preallocate_max_bytes",
			Help: "The cap of preallocated zero bytes over all topics (mmmq.broker.storage.preallocate-max-bytes); 0 when preallocation is off."},
			func() float64 { return float64(b.Stats().Max) }),
	)
	for _, r := range []struct {
		reason string
		n      func(storage.PreallocStats) int64
	}{
		{"budget", func(st storage.PreallocStats) int64 { return st.OverCap }},
		{"disk", func(st storage.PreallocStats) int64 { return st.LowSpace }},
		{"concurrency", func(st storage.PreallocStats) int64 { return st.Busy }},
	} {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_storage_preallocate_skipped_total",
			Help:        "Preallocation chunks not written: the budget's cap would be passed (reason=\"budget\"), the disk guard would go under min-free-bytes (\"disk\"), or four chunks were being written (\"concurrency\"); the topic's group commits use fsync instead of fdatasync meanwhile.",
			ConstLabels: prometheus.Labels{"reason": r.reason}},
			func() float64 { return float64(r.n(b.Stats())) }))
	}
}

// RetentionSource is what WatchRetention reads at scrape time: the
// dispatchers' and the consumer groups' counts of messages retention
// deleted before they were read (either may be nil), and the retention
// loop's totals (nil when the application has none).
type RetentionSource struct {
	DispatchSkipped func() uint64
	GroupSkipped    func() uint64
	Totals          func() (segments int, entries, bytes int64)
	// CheckpointErrors is, per topic, the passes that kept the topic
	// whole because a reader's checkpoint could not be read
	// (retention.Retainer.CheckpointErrors); nil for none.
	CheckpointErrors func() map[string]uint64
	// Holds is, per topic, the reader that held retention back at the
	// last pass (retention.Retainer.Holds); nil for none.
	Holds func() map[string]contract.RetentionHold
}

var retentionSkipped = prometheus.NewDesc("mmmq_retention_skipped_total",
	"Messages retention deleted before a reader got them: a dispatcher or consumer group whose position was below the topic's start offset continued from it.",
	[]string{"kind"}, nil)

var retentionCheckpointErrors = prometheus.NewDesc("mmmq_retention_checkpoint_errors_total",
	"Retention passes that kept a topic whole, deleting nothing of it, because the checkpoint of a dispatcher or consumer group reading it could not be read (keep-unconsumed; the error is logged).",
	[]string{"topic"}, nil)

var retentionHeldBytes = prometheus.NewDesc("mmmq_retention_held_bytes",
	"Bytes of sealed segments retention's policy found due at its last pass but kept because a reader had not read them (keep-unconsumed); the reader is mmmq_retention_holder.",
	[]string{"topic"}, nil)

var retentionHolder = prometheus.NewDesc("mmmq_retention_holder",
	"1 for the reader (kind dispatcher or group) furthest behind that held a topic's retention back at the last pass (keep-unconsumed); its committed offset is GET /topics' retentionHeldBy.",
	[]string{"topic", "kind", "reader"}, nil)

type retentionCollector struct{ s RetentionSource }

func (c retentionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- retentionSkipped
	ch <- retentionCheckpointErrors
	ch <- retentionHeldBytes
	ch <- retentionHolder
}

func (c retentionCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.Holds != nil {
		for topic, h := range c.s.Holds() {
			ch <- prometheus.MustNewConstMetric(retentionHeldBytes, prometheus.GaugeValue, float64(h.HeldBytes), topic)
			ch <- prometheus.MustNewConstMetric(retentionHolder, prometheus.GaugeValue, 1, topic, h.Kind, h.Name)
		}
	}
	if c.s.CheckpointErrors != nil {
		for topic, n := range c.s.CheckpointErrors() {
			ch <- prometheus.MustNewConstMetric(retentionCheckpointErrors, prometheus.CounterValue, float64(n), topic)
		}
	}
	for kind, f := range map[string]func() uint64{"dispatcher": c.s.DispatchSkipped, "group": c.s.GroupSkipped} {
		v := 0.0
		if f != nil {
			v = float64(f())
		}
		ch <- prometheus.MustNewConstMetric(retentionSkipped, prometheus.CounterValue, v, kind)
	}
}

// WatchRetention adds the retention metrics, read at scrape time:
//
//	mmmq_retention_skipped_total{kind="dispatcher"|"group"}  messages deleted before read
//	mmmq_retention_checkpoint_errors_total{topic}            passes that kept the topic whole:
//	                                                         a reader's checkpoint unreadable
//	mmmq_retention_held_bytes{topic}                        due bytes kept for a reader (keep-unconsumed)
//	mmmq_retention_holder{topic,kind,reader}                1 for the reader furthest behind holding them
//	mmmq_retention_deleted_segments_total                    segments deleted
//	mmmq_retention_deleted_messages_total                    messages deleted
//	mmmq_retention_deleted_bytes_total                       .mmm + .idx bytes deleted
func (m *Metrics) WatchRetention(s RetentionSource) {
	m.reg.MustRegister(retentionCollector{s})
	if s.Totals == nil {
		return
	}
	m.reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_retention_deleted_segments_total",
			Help: "Segments deleted by retention (mmmq.broker.retention)."},
			func() float64 { n, _, _ := s.Totals(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_retention_deleted_messages_total",
			Help: "Messages deleted by retention."},
			func() float64 { _, n, _ := s.Totals(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_retention_deleted_bytes_total",
			Help: "Bytes of segment and index files deleted by retention."},
			func() float64 { _, _, n := s.Totals(); return float64(n) }),
	)
}

var messagesExpired = prometheus.NewDesc("mmmq_messages_expired_total",
	"Messages past their expiresAt (published with a ttl) that a dispatcher (kind=\"dispatcher\": skipped or dead-lettered, never pushed) or a consumer group (kind=\"group\": never handed out) passed over.",
	[]string{"kind"}, nil)

// expiredCollector reads the expired counts at scrape time.
type expiredCollector struct{ dispatcher, group func() uint64 }

func (c expiredCollector) Describe(ch chan<- *prometheus.Desc) { ch <- messagesExpired }

func (c expiredCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range []struct {
		kind string
		f    func() uint64
	}{{"dispatcher", c.dispatcher}, {"group", c.group}} {
		v := 0.0
		if k.f != nil {
			v = float64(k.f())
		}
		ch <- prometheus.MustNewConstMetric(messagesExpired, prometheus.CounterValue, v, k.kind)
	}
}

// WatchExpired adds, read at scrape time,
//
//	mmmq_messages_expired_total{kind="dispatcher"|"group"}  messages passed over past their expiresAt
//
// from the dispatchers' and the consumer groups' counts (either may be
// nil: 0). It is never labelled by topic, key or reader.
func (m *Metrics) WatchExpired(dispatchers, groups func() uint64) {
	m.reg.MustRegister(expiredCollector{dispatcher: dispatchers, group: groups})
}

var traceDropped = prometheus.NewDesc("mmmq_trace_context_dropped_total",
	"W3C trace context values dropped at publish (not stored; the publish went on): header=\"traceparent\" not valid W3C, header=\"tracestate\" invalid or without a valid traceparent. One per message and value.",
	[]string{"header"}, nil)

// traceCollector reads the dropped trace-context counts at scrape time.
type traceCollector struct {
	dropped func() (traceparent, tracestate uint64)
}

func (c traceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- traceDropped }

func (c traceCollector) Collect(ch chan<- prometheus.Metric) {
	p, s := c.dropped()
	ch <- prometheus.MustNewConstMetric(traceDropped, prometheus.CounterValue, float64(p), contract.TraceparentHeader)
	ch <- prometheus.MustNewConstMetric(traceDropped, prometheus.CounterValue, float64(s), contract.TracestateHeader)
}

// WatchTrace adds, read at scrape time,
//
//	mmmq_trace_context_dropped_total{header="traceparent"|"tracestate"}  values the publish paths dropped
//
// from dropped (contract.TraceDropped, process-wide counts).
func (m *Metrics) WatchTrace(dropped func() (traceparent, tracestate uint64)) {
	m.reg.MustRegister(traceCollector{dropped: dropped})
}

var (
	gLabels    = []string{"topic", "group"}
	gCommitted = prometheus.NewDesc("mmmq_group_committed_offset", "A consumer group's durable committed offset (GET /topics/{topic}/groups).", gLabels, nil)
	gLag       = prometheus.NewDesc("mmmq_group_lag", "Messages a consumer group has still to acknowledge: high watermark - max(committed, log start offset).", gLabels, nil)
	gHeld      = prometheus.NewDesc("mmmq_group_held", "1 while a session holds the consumer group.", gLabels, nil)
)

// groupCollector reads every topic's consumer groups at scrape time (the
// groups used since start and those stored on disk; their number is
// bounded by the consumer-group cap).
type groupCollector struct {
	c   *groups.Coordinator
	reg *topicqueue.Registry
}

func (g groupCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- gCommitted
	ch <- gLag
	ch <- gHeld
}

func (g groupCollector) Collect(ch chan<- prometheus.Metric) {
	for _, q := range g.reg.List() {
		l, err := g.c.List(q.Name())
		if err != nil {
			continue
		}
		for _, gi := range l.Groups {
			held := 0.0
			if gi.Held {
				held = 1
			}
			ch <- prometheus.MustNewConstMetric(gCommitted, prometheus.GaugeValue, float64(gi.Committed), q.Name(), gi.Group)
			ch <- prometheus.MustNewConstMetric(gLag, prometheus.GaugeValue, float64(gi.Lag), q.Name(), gi.Group)
			ch <- prometheus.MustNewConstMetric(gHeld, prometheus.GaugeValue, held, q.Name(), gi.Group)
		}
	}
}

// WatchGroups adds per-group gauges (committed offset, lag, held) read
// from c at scrape time; nothing when c is nil.
func (m *Metrics) WatchGroups(c *groups.Coordinator, reg *topicqueue.Registry) {
	if c != nil {
		m.reg.MustRegister(groupCollector{c: c, reg: reg})
	}
}

// WatchDedup adds the idempotent-publish window's metrics, read at scrape
// time (nothing when t is nil, deduplication off):
//
//	mmmq_dedup_ids                    producer ids remembered now, all topics
//	mmmq_dedup_bytes                  their memory as counted against mmmq.broker.dedup.max-bytes
//	mmmq_dedup_duplicates_total       publishes answered "duplicate" (nothing stored)
//	mmmq_dedup_evicted_total          ids forgotten before their window ended (max-ids, max-bytes):
//	                                  above 0, the window is too small for the publish rate
//	mmmq_dedup_rebuilt_ids_total      ids taken from the logs' tails after a restart or reopen
func (m *Metrics) WatchDedup(t *dedup.Tracker) {
	if t == nil {
		return
	}
	stat := func(f func(dedup.Stats) int64) func() float64 {
		return func() float64 { return float64(f(t.Stats())) }
	}
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_dedup_ids",
			Help: "Producer message ids the idempotent-publish window remembers now, all topics."},
			stat(func(s dedup.Stats) int64 { return s.IDs })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mmmq_dedup_bytes",
			Help: "Memory of the remembered ids as counted against mmmq.broker.dedup.max-bytes."},
			stat(func(s dedup.Stats) int64 { return s.Bytes })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_dedup_duplicates_total",
			Help: "Publishes answered as duplicates of a producer id seen within the window: nothing stored."},
			stat(func(s dedup.Stats) int64 { return s.Duplicates })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_dedup_evicted_total",
			Help: "Ids forgotten before their window ended because of mmmq.broker.dedup.max-ids or max-bytes: they are no longer deduplicated."},
			stat(func(s dedup.Stats) int64 { return s.Evicted })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "mmmq_dedup_rebuilt_ids_total",
			Help: "Ids the window took from the logs' tails after a restart or a reopen."},
			stat(func(s dedup.Stats) int64 { return s.Rebuilt })),
	)
}

// WatchDispatchers adds per-worker metrics read from mgr at scrape time.
func (m *Metrics) WatchDispatchers(mgr *dispatcher.Manager, reg *topicqueue.Registry) {
	m.reg.MustRegister(dispatchCollector{m: mgr, reg: reg})
}

var (
	schedPending = prometheus.NewDesc("mmmq_scheduled_pending",
		"Scheduled messages (deliverAt, delay) waiting for their due time, all topics.", nil, nil)
	schedMoved = prometheus.NewDesc("mmmq_scheduled_moved_total",
		"Scheduled messages moved into their topic since the start.", nil, nil)
	schedLate = prometheus.NewDesc("mmmq_scheduled_lateness_seconds",
		"How long after its due time each scheduled message entered its topic (never early).", nil, nil)
	schedFailures = prometheus.NewDesc("mmmq_scheduled_move_failures_total",
		"Failed attempts to move a topic's due scheduled messages into it, by reason (the error code lower-cased); the messages stay pending and are retried.", []string{"reason"}, nil)
	schedStuckTopics = prometheus.NewDesc("mmmq_scheduled_stuck_topics",
		"Topics whose due scheduled messages could not be moved at the last attempt (retried with a capped backoff; the other topics move on).", nil, nil)
	schedStuckPending = prometheus.NewDesc("mmmq_scheduled_stuck_pending",
		"Pending scheduled messages of the stuck topics.", nil, nil)
)

// scheduleCollector reads the scheduled-message store's figures at scrape
// time.
type scheduleCollector struct{ stats func() schedule.Stats }

func (c scheduleCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- schedPending
	ch <- schedMoved
	ch <- schedLate
	ch <- schedFailures
	ch <- schedStuckTopics
	ch <- schedStuckPending
}

func (c scheduleCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(schedPending, prometheus.GaugeValue, float64(st.Pending))
	ch <- prometheus.MustNewConstMetric(schedMoved, prometheus.CounterValue, float64(st.Moved))
	buckets := make(map[float64]uint64, len(schedule.LatenessBuckets))
	for i, b := range schedule.LatenessBuckets {
		buckets[b] = st.LatenessCounts[i]
	}
	ch <- prometheus.MustNewConstHistogram(schedLate, st.LatenessCount, st.LatenessSum, buckets)
	for reason, n := range st.MoveFailures {
		ch <- prometheus.MustNewConstMetric(schedFailures, prometheus.CounterValue, float64(n), reason)
	}
	stuck := 0
	for _, t := range st.Stuck {
		stuck += t.Pending
	}
	ch <- prometheus.MustNewConstMetric(schedStuckTopics, prometheus.GaugeValue, float64(len(st.Stuck)))
	ch <- prometheus.MustNewConstMetric(schedStuckPending, prometheus.GaugeValue, float64(stuck))
}

// WatchSchedule adds, read at scrape time from stats (nil: nothing),
//
//	mmmq_scheduled_pending             scheduled messages waiting, all topics (never per topic)
//	mmmq_scheduled_moved_total         moved into their topic
//	mmmq_scheduled_lateness_seconds    histogram: due time to entering the topic
//	mmmq_scheduled_move_failures_total{reason}  failed moves of a topic's due messages
//	mmmq_scheduled_stuck_topics        topics whose last move failed (retried, never dropped)
//	mmmq_scheduled_stuck_pending       pending messages of those topics
func (m *Metrics) WatchSchedule(stats func() schedule.Stats) {
	if stats == nil {
		return
	}
	m.reg.MustRegister(scheduleCollector{stats: stats})
}
