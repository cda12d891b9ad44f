package crashtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// indexSyncMode is an index-sync setting (mmmq.broker.storage.index-sync)
// the randomized kill -9 rounds run under, one subtest each.
type indexSyncMode struct {
	Name      string
	IndexSync string // "commit" | "lazy"
	// Intervals, for lazy, are the index-sync-interval of the rounds in
	// turn: round r runs with Intervals[(r-1) % len(Intervals)].
	Intervals []time.Duration
}

// rkModes: commit fsyncs the index in every group commit; lazy fsyncs it
// at rotations, at close and every interval. Its rounds alternate an hour
// (within a round the index is fsynced only when a rotation seals a
// segment: a kill always finds it unsynced) and 5 ms (fsynced between
// group commits and by the timer, so a kill may come at any point of it).
var rkModes = []indexSyncMode{
	{Name: "commit", IndexSync: "commit"},
	{Name: "lazy", IndexSync: "lazy", Intervals: []time.Duration{time.Hour, 5 * time.Millisecond}},
}

// forEachMode runs fn as a subtest per mode of rkModes, one after another.
func forEachMode(t *testing.T, fn func(t *testing.T, m indexSyncMode)) {
	for _, m := range rkModes {
		t.Run(m.Name, func(t *testing.T) { fn(t, m) })
	}
}

// interval is the index-sync-interval of round r (0: the default).
func (m indexSyncMode) interval(r int) time.Duration {
	if len(m.Intervals) == 0 {
		return 0
	}
	return m.Intervals[(r-1)%len(m.Intervals)]
}

// conf returns c set for the mode in round r, with /metrics on (the fsync
// counters of modeStats).
func (m indexSyncMode) conf(c brokerConf, r int) brokerConf {
	c.IndexSync, c.IndexSyncInterval, c.Metrics = m.IndexSync, m.interval(r), true
	return c
}

// modeStats checks, round by round, that the broker ran in its mode, and
// counts what the summary line reports: the fsyncs of the killed runs and
// the entries recovery indexed again at the restarts.
//
// Just before each kill it reads mmmq_fsyncs_total twice (scrapes A, then
// B). Under commit every group commit fsyncs the segment and then the
// index, so at any instant each topic's writer has at most one segment
// fsync more than index fsyncs, and the index count B read after scrape A
// ended is at least A's segment count minus the number of topics, however
// the two counters of one scrape were interleaved with the commits. Under
// lazy with an hour's interval the index is fsynced only when a rotation
// seals a segment: A's index count is at most one per "segment rotated"
// line the run logged, plus one per topic for a seal whose line was not
// yet written. Lazy rounds with 5 ms are only counted.
type modeStats struct {
	mode                 indexSyncMode
	segFsyncs, idxFsyncs int64
	rotations, reindexed int
	lazyHour             int // lazy rounds with an hour's interval
}

// fsyncPair is one reading of the segment and index fsync counters.
type fsyncPair struct{ Seg, Idx int64 }

// started counts the entries recovery indexed again when b started.
func (s *modeStats) started(b *broker) {
	for _, m := range reindexRE.FindAllStringSubmatch(b.logText(), -1) {
		n, _ := strconv.Atoi(m[1])
		s.reindexed += n
	}
}

// beforeKill reads the fsync counters of b, alive, twice.
func (s *modeStats) beforeKill(t *testing.T, b *broker) [2]fsyncPair {
	t.Helper()
	var p [2]fsyncPair
	for i := range p {
		p[i].Seg, p[i].Idx = fsyncCounts(t, b)
	}
	s.segFsyncs += p[1].Seg
	s.idxFsyncs += p[1].Idx
	return p
}

// afterKill checks the counters p read before the kill of round r against
// the mode, the rotations b logged and the topics of root.
func (s *modeStats) afterKill(t *testing.T, b *broker, root string, r int, p [2]fsyncPair) {
	t.Helper()
	rot := strings.Count(b.logText(), `"segment rotated"`)
	s.rotations += rot
	topics := int64(topicCount(t, root))
	switch {
	case s.mode.IndexSync == "commit":
		if p[1].Idx < p[0].Seg-topics {
			t.Fatalf("round %d (index-sync commit): %d segment fsyncs, then %d index fsyncs, %d topics: the index was not fsynced in every group commit", r, p[0].Seg, p[1].Idx, topics)
		}
	case s.mode.interval(r) == time.Hour:
		s.lazyHour++
		if p[0].Idx > int64(rot)+topics {
			t.Fatalf("round %d (index-sync lazy, 1h): %d index fsyncs before the kill, but %d rotations and %d topics: the index was fsynced outside a seal", r, p[0].Idx, rot, topics)
		}
	}
}

// String is the mode's part of the summary line.
func (s *modeStats) String() string {
	iv := make([]string, len(s.mode.Intervals))
	for i, d := range s.mode.Intervals {
		iv[i] = d.String()
	}
	out := "index-sync=" + s.mode.IndexSync
	if len(iv) > 0 {
		out += fmt.Sprintf(" intervals=%s rounds_1h=%d", strings.Join(iv, ","), s.lazyHour)
	}
	return out + fmt.Sprintf(" fsyncs_segment=%d fsyncs_index=%d rotations=%d reindexed=%d",
		s.segFsyncs, s.idxFsyncs, s.rotations, s.reindexed)
}

// topicCount is the number of topic directories in root.
func topicCount(t *testing.T, root string) int {
	t.Helper()
	es, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			n++
		}
	}
	return n
}
