package ui

import (
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

const (
	// sparkPoints is the lag samples kept per dispatcher: 10 minutes at
	// the default 10 s period.
	sparkPoints = 60
	// maxTracked caps the dispatchers whose lag is sampled (the first by
	// name); the others show no sparkline.
	maxTracked = 200
	// rateSamples is the topic samples kept: with the current values, a
	// window of a minute at the default 10 s period.
	rateSamples = 6
)

// topicSample is the registry at one time: each topic's next offset, and
// the sums of next offsets and fsyncs over all topics.
type topicSample struct {
	at     time.Time
	next   map[string]int64
	total  int64
	fsyncs int64
}

// sampler samples the topics' next offsets and fsyncs (publish rate,
// fsyncs per message over the last minute) and each dispatcher's total lag
// (the sparklines) every period, in one goroutine, keeping a bounded
// history in memory.
type sampler struct {
	reg    *topicqueue.Registry
	adm    *admin.Admin
	period time.Duration

	mu      sync.Mutex
	topics  []topicSample      // oldest first, at most rateSamples
	lags    map[string][]int64 // dispatcher → total lag, oldest first, at most sparkPoints
	stopped chan struct{}
	done    chan struct{}
}

func newSampler(reg *topicqueue.Registry, adm *admin.Admin, period time.Duration) *sampler {
	return &sampler{reg: reg, adm: adm, period: period, lags: map[string][]int64{}}
}

func (s *sampler) start() {
	s.stopped, s.done = make(chan struct{}), make(chan struct{})
	go s.run()
}

func (s *sampler) stop() {
	if s.stopped == nil {
		return
	}
	close(s.stopped)
	<-s.done
	s.stopped = nil
}

func (s *sampler) run() {
	defer close(s.done)
	t := time.NewTicker(s.period)
	defer t.Stop()
	for {
		s.sample(time.Now())
		select {
		case <-s.stopped:
			return
		case <-t.C:
		}
	}
}

// sample takes one sample of the topics and the dispatchers' lag.
func (s *sampler) sample(now time.Time) {
	ts := topicSample{at: now, next: map[string]int64{}}
	for _, q := range s.reg.List() {
		st := q.Stats()
		ts.next[q.Name()] = st.NextOffset
		ts.total += st.NextOffset
		ts.fsyncs += st.Fsyncs
	}
	lags := map[string]int64{}
	var ds []admin.Listed
	if s.adm != nil {
		ds = s.adm.List()
	}
	for i, d := range ds {
		if i >= maxTracked {
			break
		}
		st, err := s.adm.Status(d.Name)
		if err != nil {
			continue
		}
		var sum int64
		for _, t := range st.Topics {
			sum += t.Lag
		}
		lags[d.Name] = sum
	}
	s.record(ts, lags)
}

// record keeps ts and lags: at most rateSamples topic samples and
// sparkPoints lags per dispatcher, and only the dispatchers in lags (a
// removed one is forgotten).
func (s *sampler) record(ts topicSample, lags map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics = append(s.topics, ts)
	if len(s.topics) > rateSamples {
		s.topics = s.topics[len(s.topics)-rateSamples:]
	}
	for name := range s.lags {
		if _, ok := lags[name]; !ok {
			delete(s.lags, name) // removed (or no longer among the tracked)
		}
	}
	for name, l := range lags {
		h := append(s.lags[name], l)
		if len(h) > sparkPoints {
			h = append([]int64(nil), h[len(h)-sparkPoints:]...)
		}
		s.lags[name] = h
	}
}

// oldest returns the oldest topic sample (ok false before the first).
func (s *sampler) oldest() (topicSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.topics) == 0 {
		return topicSample{}, false
	}
	return s.topics[0], true
}

// lag returns a copy of dispatcher name's lag history, oldest first.
func (s *sampler) lag(name string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.lags[name]...)
}
