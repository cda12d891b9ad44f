package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The broker of TestCrashScheduled: producers schedule messages to one
// topic (single publishes and batches), due 200 ms to 4 s after they are
// sent, and cancel a few; one dispatcher pushes the topic to the test's
// consumer.
const (
	scTopic       = "sc.a"
	scDispatcher  = "sc-disp"
	scProducers   = 3
	scMinDelay    = 200 * time.Millisecond
	scMaxDelay    = 4 * time.Second
	scCancelRate  = 0.08 // of acknowledged schedules still far enough from due
	scBatchRate   = 0.25 // of producer steps: a batch of 3 scheduled members
	scRetryMargin = 500 * time.Millisecond
	scBucketWidth = time.Second // several bucket files per round
	// scStall ends the final wait: neither the topic nor the pushes grew
	// for this long.
	scStall = 10 * time.Second
)

// scRounds is the number of rounds of TestCrashScheduled: the
// -crash.rounds flag, else 30 with MMMQ_LONG=1, else 4 (a round takes
// about 1.5 s).
func scRounds() int { return lazyRoundsCount(4, 30) }

// TestCrashScheduled is kill -9 evidence for scheduled messages on the
// real binary: R rounds of start → 3 producers scheduling messages with
// unique ids (POST /messages with "delay" or "deliverAt" in Unix ms, or
// POST /messages/batch with three scheduled members), due 200 ms–4 s
// later, and cancelling about 8% of the acknowledged ones that are not
// due within 500 ms → SIGKILL 300–1500 ms in → restart. After each
// restart every publish left without an answer whose due time is still
// 500 ms away is sent again with the same id and the same deliverAt (the
// idempotent window, rebuilt from the pending schedules, must answer it
// as a duplicate when the first was stored). A final run waits until
// every schedule is due and the consumer has had every message of the
// topic. Checked (scRun.verify), counting by message id in the topic
// itself (read back), not in the consumer, whose pushes are at least once:
//
//	(a) every acknowledged schedule not cancelled is in the topic (lost
//	    otherwise);
//	(b) no message was pushed before its due time (the ACK's deliverAtMs;
//	    for one never answered, the time it was sent plus its delay, a
//	    lower bound of the broker's);
//	(c) no id is in the topic twice (moved twice, or a retry scheduled
//	    again);
//	(d) no acknowledged cancel's message is in the topic or was pushed;
//	(e) nothing is in the topic that was not sent, and every message is
//	    the one sent (content);
//	(f) every message in the topic was pushed at least once (the final
//	    wait ends when it was, or after 10 s without progress).
func TestCrashScheduled(t *testing.T) {
	k := newSCRun(t, nil)
	rounds := scRounds()
	t.Logf("rounds=%d seed=%d topic=%s delays=%s..%s bucket-width=%s", rounds, k.seed, scTopic, scMinDelay, scMaxDelay, scBucketWidth)
	k.run(rounds)
}

// TestLazyFSPowerLossScheduled is TestCrashScheduled on LazyFS, each
// round ended by lazyRounds.end (odd rounds a power loss, even ones kill
// -9), with the same checks: 4 rounds, 16 with MMMQ_LONG=1. Without
// MMMQ_LAZYFS it logs why and passes.
func TestLazyFSPowerLossScheduled(t *testing.T) {
	if fs := mountLazyFS(t, "scheduled messages"); fs != nil {
		newSCRun(t, fs).run(lazyRoundsCount(4, 16)) // its summary line names the seed
	}
}

// scMsg is one scheduled message the producers sent (with its retries).
type scMsg struct {
	ID      string
	Content []byte
	// Due is the due time in Unix ms: the ACK's deliverAtMs once
	// answered; before that the time asked for (deliverAt), or the time
	// the first attempt was sent plus its delay (a lower bound).
	Due        int64
	Acked      bool
	ScheduleID string
	Attempts   int
	Duplicates int  // answers with "duplicate": true
	TTL        bool // sent with a ttl of 1h (counted from the publish)
	// Cancel: 0 none, scCancelAcked (200), scCancelRefused (404),
	// scCancelUnknown (no answer).
	Cancel int
}

const (
	scCancelNone = iota
	scCancelAcked
	scCancelRefused
	scCancelUnknown
)

// scPush is one push the consumer received.
type scPush struct {
	Run    int
	ID     string
	Offset int64
	At     time.Time
}

type scRun struct {
	lazyRounds
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	root string

	mu      sync.Mutex
	msgs    map[string]*scMsg
	order   []string
	pushes  []scPush
	bad     []string
	batches int
	retries int
	n       int
	// notes are the brokers' log lines about skipped or corrupt entries
	// and recovery's cuts, per run, shown with a message never pushed.
	notes []string
}

func newSCRun(t *testing.T, fs *lazyFS) *scRun {
	k := &scRun{lazyRounds: lazyRounds{t: t, fs: fs}, t: t, seed: uint64(time.Now().UnixNano()), msgs: map[string]*scMsg{}}
	k.rng = rand.New(rand.NewPCG(k.seed, 0x7363686564))
	k.root = dataRoot(t, fs)
	return k
}

// startRun starts the broker for run (one consumer listener per run).
func (k *scRun) startRun(run int) (*broker, func()) {
	port, closeFn := listenRound(k.t, run, func(w http.ResponseWriter, r *http.Request) { k.serve(w, r, run) })
	b := k.lazyRounds.start(func() brokerConf {
		return brokerConf{DataDir: k.root, ScheduleBucketWidth: scBucketWidth,
			Dispatchers: []dispatcherConf{{Name: scDispatcher, Port: port, Patterns: []string{scTopic}}}}
	})
	return b, closeFn
}

// serve records a push and answers ACK.
func (k *scRun) serve(w http.ResponseWriter, r *http.Request, run int) {
	if _, err := io.ReadAll(io.LimitReader(r.Body, 1<<20)); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	at := time.Now()
	k.mu.Lock()
	off, _ := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
	k.pushes = append(k.pushes, scPush{Run: run, ID: r.Header.Get("mmmq-message-id"), Offset: off, At: at})
	k.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"acknowledgement":"ACK"}`)
}

func (k *scRun) run(rounds int) {
	t := k.t
	deadline, limited := t.Deadline()
	deadline = deadline.Add(-2 * time.Minute)
	start := time.Now()
	for r := 1; r <= rounds; r++ {
		if limited && time.Now().After(deadline) {
			t.Fatalf("out of time after %d rounds (raise go test -timeout)", r-1)
		}
		b, closeFn := k.startRun(r)
		k.retryUnanswered(b)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for p := range scProducers {
			wg.Add(1)
			seed := k.rng.Uint64()
			go func() {
				defer wg.Done()
				k.produce(b, p, rand.New(rand.NewPCG(seed, uint64(p))), stop)
			}()
		}
		time.Sleep(time.Duration(300+k.rng.IntN(1200)) * time.Millisecond)
		power := k.end(b, r, func() { close(stop) })
		if !power {
			close(stop)
		}
		wg.Wait()
		closeFn()
		k.note(r, b)
	}
	// The final run: retries, then wait until every schedule is due and
	// the consumer has had every message in the topic.
	final := rounds + 1
	b, closeFn := k.startRun(final)
	k.retryUnanswered(b)
	k.mu.Lock()
	last := int64(0)
	for _, m := range k.msgs {
		last = max(last, m.Due)
	}
	k.mu.Unlock()
	time.Sleep(time.Until(time.UnixMilli(last).Add(300 * time.Millisecond)))
	// The mover and the dispatcher work through a backlog after a long
	// run (one durable append and one checkpoint per message): wait while
	// they make progress, giving up after scStall without any.
	var log []stored
	progress, seen := time.Now(), 0
	for {
		var err error
		if log, err = readAll(b.base, scTopic); err != nil {
			t.Fatalf("read back %s: %v", scTopic, err)
		}
		if k.allPushed(log) && k.allAckedIn(log) {
			break
		}
		if n := len(log) + k.pushCount(); n > seen {
			progress, seen = time.Now(), n
		} else if time.Since(progress) > scStall {
			t.Logf("no progress for %s: %d in the topic, %d pushes", scStall, len(log), k.pushCount())
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.stop()
	closeFn()
	k.note(final, b)
	k.verify(log, rounds, time.Since(start))
}

// note keeps run's log lines about skipped or corrupt entries and
// recovery's changes.
func (k *scRun) note(run int, b *broker) {
	for _, l := range strings.Split(b.logText(), "\n") {
		if strings.Contains(l, "skipped") || strings.Contains(l, "corrupt") || strings.Contains(l, "recovery changed") || strings.Contains(l, "cut") {
			k.notes = append(k.notes, fmt.Sprintf("run %d: %s", run, l))
		}
	}
}

// produce schedules messages until stop: single publishes (delay or
// deliverAt) and batches, and cancels now and then.
func (k *scRun) produce(b *broker, p int, rng *rand.Rand, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		n := 1
		if rng.Float64() < scBatchRate {
			n = 3
		}
		ms := make([]*scMsg, n)
		useDelay := make([]time.Duration, n)
		k.mu.Lock()
		for j := range ms {
			k.n++
			id := fmt.Sprintf("s-%d-%d", p, k.n)
			d := scMinDelay + time.Duration(rng.Int64N(int64(scMaxDelay-scMinDelay)))
			m := &scMsg{ID: id, Content: []byte(fmt.Sprintf(`{"p":%d,"n":%d}`, p, k.n)), Due: time.Now().Add(d).UnixMilli(), TTL: rng.IntN(4) == 0}
			if rng.IntN(3) == 0 {
				useDelay[j] = d
			}
			k.msgs[id] = m
			k.order = append(k.order, id)
			ms[j] = m
		}
		k.mu.Unlock()
		if n == 1 {
			k.send(b, ms[0], useDelay[0])
		} else {
			k.sendBatch(b, ms, useDelay)
		}
		// A cancel of an earlier acknowledged schedule, not due soon.
		if rng.Float64() < scCancelRate*float64(n) {
			k.cancelOne(b, rng)
		}
		// A pause, so that the mover (one durable append per message)
		// keeps up and lateness measures the restarts, not a backlog.
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(10+rng.IntN(20)) * time.Millisecond):
		}
	}
}

// scBody is a publish request with a schedule.
func scBody(m *scMsg, delay time.Duration) map[string]any {
	body := map[string]any{"topic": scTopic, "content": json.RawMessage(m.Content), "id": m.ID}
	if delay > 0 {
		body["delay"] = delay.String()
	} else {
		body["deliverAt"] = m.Due
	}
	if m.TTL {
		body["ttl"] = "1h" // counted from the publish: well after the due time
	}
	return body
}

// scAnswer is a scheduled publish's answer (single, or one batch member).
type scAnswer struct {
	Acknowledgement string `json:"acknowledgement"`
	Scheduled       bool   `json:"scheduled"`
	ScheduleID      string `json:"scheduleId"`
	DeliverAtMs     int64  `json:"deliverAtMs"`
	Duplicate       bool   `json:"duplicate"`
	Offset          *int64 `json:"offset"`
	Error           string `json:"error"`
}

// record applies an answer to m (a broken one is a violation).
func (k *scRun) record(m *scMsg, a scAnswer, sentAt time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case !a.Scheduled || a.ScheduleID == "" || a.Offset != nil:
		k.bad = append(k.bad, fmt.Sprintf("%s: a scheduled publish answered %+v", m.ID, a))
		return
	case a.DeliverAtMs < sentAt.UnixMilli():
		k.bad = append(k.bad, fmt.Sprintf("%s: answered due at %d, before it was sent (%d)", m.ID, a.DeliverAtMs, sentAt.UnixMilli()))
	}
	if m.Acked && (a.ScheduleID != m.ScheduleID || a.DeliverAtMs != m.Due) {
		k.bad = append(k.bad, fmt.Sprintf("%s: answered %s due %d, earlier %s due %d", m.ID, a.ScheduleID, a.DeliverAtMs, m.ScheduleID, m.Due))
	}
	m.Acked, m.ScheduleID, m.Due = true, a.ScheduleID, a.DeliverAtMs
	if a.Duplicate {
		m.Duplicates++
	}
}

func (k *scRun) send(b *broker, m *scMsg, delay time.Duration) {
	k.mu.Lock()
	body, _ := json.Marshal(scBody(m, delay))
	m.Attempts++
	k.mu.Unlock()
	sentAt := time.Now()
	resp, err := httpClient.Post(b.base+"/messages", "application/json", bytes.NewReader(body))
	if err != nil {
		return // no answer: retried after the restart
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return
	}
	var a scAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &a) != nil || a.Acknowledgement != "ACK" {
		if resp.StatusCode < 500 {
			k.mu.Lock()
			k.bad = append(k.bad, fmt.Sprintf("%s: HTTP %d %s", m.ID, resp.StatusCode, data))
			k.mu.Unlock()
		}
		return // 503 while shutting down or starting: retried
	}
	k.record(m, a, sentAt)
}

func (k *scRun) sendBatch(b *broker, ms []*scMsg, delays []time.Duration) {
	k.mu.Lock()
	var members []map[string]any
	for j, m := range ms {
		members = append(members, scBody(m, delays[j]))
		m.Attempts++
	}
	k.batches++
	k.mu.Unlock()
	body, _ := json.Marshal(members)
	sentAt := time.Now()
	resp, err := httpClient.Post(b.base+"/messages/batch", "application/json", bytes.NewReader(body))
	if err != nil {
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return
	}
	var v struct {
		Acknowledgement string     `json:"acknowledgement"`
		Results         []scAnswer `json:"results"`
	}
	if json.Unmarshal(data, &v) != nil || (resp.StatusCode == http.StatusOK) != (v.Acknowledgement == "ACK") {
		k.mu.Lock()
		k.bad = append(k.bad, fmt.Sprintf("batch: HTTP %d %s", resp.StatusCode, data))
		k.mu.Unlock()
		return
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode < 500 {
		k.mu.Lock()
		k.bad = append(k.bad, fmt.Sprintf("batch: HTTP %d %s", resp.StatusCode, data))
		k.mu.Unlock()
		return
	}
	for j, a := range v.Results {
		if j < len(ms) && a.Error == "" && resp.StatusCode == http.StatusOK {
			k.record(ms[j], a, sentAt)
		}
	}
}

// cancelOne cancels an acknowledged schedule not cancelled yet whose due
// time is at least scRetryMargin away.
func (k *scRun) cancelOne(b *broker, rng *rand.Rand) {
	k.mu.Lock()
	soon := time.Now().Add(scRetryMargin).UnixMilli()
	var m *scMsg
	for range 20 {
		c := k.msgs[k.order[rng.IntN(len(k.order))]]
		if c.Acked && c.Cancel == scCancelNone && c.Due > soon {
			m = c
			break
		}
	}
	if m == nil {
		k.mu.Unlock()
		return
	}
	m.Cancel = scCancelUnknown
	url := b.base + "/topics/" + scTopic + "/scheduled/" + m.ScheduleID
	k.mu.Unlock()
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	resp, err := httpClient.Do(req)
	if err != nil {
		return
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	k.mu.Lock()
	defer k.mu.Unlock()
	switch resp.StatusCode {
	case http.StatusOK:
		m.Cancel = scCancelAcked
	case http.StatusNotFound:
		m.Cancel = scCancelRefused
	case http.StatusServiceUnavailable:
	default:
		k.bad = append(k.bad, fmt.Sprintf("cancel %s: HTTP %d %s", m.ID, resp.StatusCode, data))
	}
}

// retryUnanswered sends again, with the same id and deliverAt, every
// publish without an answer whose due time is still scRetryMargin away (a
// later one may have been moved already: a retry of it would be a new
// schedule, as documented).
func (k *scRun) retryUnanswered(b *broker) {
	k.mu.Lock()
	soon := time.Now().Add(scRetryMargin).UnixMilli()
	var todo []*scMsg
	for _, id := range k.order {
		if m := k.msgs[id]; !m.Acked && m.Due > soon {
			todo = append(todo, m)
		}
	}
	k.retries += len(todo)
	k.mu.Unlock()
	// A few at a time: a round that left many unanswered (a slow
	// filesystem) must not make the next one wait for them in a row.
	var wg sync.WaitGroup
	next := make(chan *scMsg)
	for range 2 * scProducers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range next {
				k.send(b, m, 0)
			}
		}()
	}
	for _, m := range todo {
		next <- m
	}
	close(next)
	wg.Wait()
}

func (k *scRun) pushCount() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.pushes)
}

// allPushed reports whether every id in log was pushed at least once.
func (k *scRun) allPushed(log []stored) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	seen := map[string]bool{}
	for _, p := range k.pushes {
		seen[p.ID] = true
	}
	for _, s := range log {
		if !seen[s.ID] {
			return false
		}
	}
	return true
}

// allAckedIn reports whether every acknowledged, not cancelled schedule
// is in log.
func (k *scRun) allAckedIn(log []stored) bool {
	in := map[string]bool{}
	for _, s := range log {
		in[s.ID] = true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, m := range k.msgs {
		if m.Acked && (m.Cancel == scCancelNone || m.Cancel == scCancelRefused) && !in[m.ID] {
			return false
		}
	}
	return true
}

// verify checks (a)–(e) on the topic as read back and the pushes, and
// prints the summary line.
func (k *scRun) verify(log []stored, rounds int, took time.Duration) {
	t := k.t
	k.mu.Lock()
	defer k.mu.Unlock()
	bad := append([]string(nil), k.bad...)
	count := map[string]int{}
	for _, s := range log {
		count[s.ID]++
		m := k.msgs[s.ID]
		switch {
		case m == nil:
			bad = append(bad, fmt.Sprintf("(e) %s in the topic was never sent", s.ID))
		case !bytes.Equal(s.Content, m.Content):
			bad = append(bad, fmt.Sprintf("(e) %s in the topic holds %s, sent %s", s.ID, s.Content, m.Content))
		}
	}
	var lost, twice, cancelledIn []string
	acked, cancels, unanswered, dups := 0, 0, 0, 0
	for _, id := range k.order {
		m := k.msgs[id]
		dups += m.Duplicates
		switch {
		case m.Acked:
			acked++
		default:
			unanswered++
		}
		if m.Cancel == scCancelAcked {
			cancels++
			if count[id] > 0 {
				cancelledIn = append(cancelledIn, id)
			}
		} else if m.Acked && m.Cancel != scCancelUnknown && count[id] == 0 {
			lost = append(lost, id) // (a cancel without an answer may have taken it)
		}
		if count[id] > 1 {
			twice = append(twice, id)
		}
	}
	for _, id := range lost {
		bad = append(bad, fmt.Sprintf("(a) %s acknowledged (scheduleId %s, due %d) and not in the topic", id, k.msgs[id].ScheduleID, k.msgs[id].Due))
	}
	offs := map[string][]int{}
	for i, s := range log {
		offs[s.ID] = append(offs[s.ID], i)
	}
	for _, id := range twice {
		var runs []int
		for _, p := range k.pushes {
			if p.ID == id {
				runs = append(runs, p.Run)
			}
		}
		bad = append(bad, fmt.Sprintf("(c) %s is in the topic %d times, at offsets %v (pushed in runs %v; due %d)", id, count[id], offs[id], runs, k.msgs[id].Due))
	}
	for _, id := range cancelledIn {
		bad = append(bad, fmt.Sprintf("(d) %s: cancel acknowledged, and in the topic", id))
	}
	early := 0
	var late []time.Duration
	firstPush := map[string]time.Time{}
	for _, p := range k.pushes {
		m := k.msgs[p.ID]
		if m == nil {
			bad = append(bad, fmt.Sprintf("(e) pushed %q, never sent", p.ID))
			continue
		}
		if p.At.UnixMilli() < m.Due {
			early++
			bad = append(bad, fmt.Sprintf("(b) %s pushed at %d in run %d, due %d (%d ms early)", p.ID, p.At.UnixMilli(), p.Run, m.Due, m.Due-p.At.UnixMilli()))
		}
		if m.Cancel == scCancelAcked {
			bad = append(bad, fmt.Sprintf("(d) %s: cancel acknowledged, and pushed in run %d", p.ID, p.Run))
		}
		if f, ok := firstPush[p.ID]; !ok || p.At.Before(f) {
			firstPush[p.ID] = p.At
		}
	}
	for id, at := range firstPush {
		late = append(late, at.Sub(time.UnixMilli(k.msgs[id].Due)))
	}
	maxOff := map[int]int64{} // run → highest offset pushed
	for _, p := range k.pushes {
		maxOff[p.Run] = max(maxOff[p.Run], p.Offset)
	}
	for i, s := range log {
		if _, ok := firstPush[s.ID]; !ok {
			var there []string // what was pushed at that offset instead
			for _, p := range k.pushes {
				if p.Offset == int64(i) {
					there = append(there, fmt.Sprintf("%s in run %d (now at offsets %v)", p.ID, p.Run, offs[p.ID]))
				}
			}
			bad = append(bad, fmt.Sprintf("%s is in the topic at offset %d and was never pushed (highest offset pushed per run: %v; pushed at offset %d: %v; brokers' log lines about skips, corruption and recovery: %q)", s.ID, i, maxOff, i, there, k.notes))
		}
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	pct := func(q float64) time.Duration {
		if len(late) == 0 {
			return 0
		}
		return late[min(len(late)-1, int(q*float64(len(late))))].Round(time.Millisecond)
	}
	line := fmt.Sprintf("rounds=%d %s sent=%d batches=%d acked=%d unanswered=%d retries=%d retry_duplicates=%d cancels_acked=%d in_topic=%d pushes=%d lost=%d moved_twice=%d cancelled_delivered=%d early=%d lateness_p50=%s p99=%s max=%s seed=%d took=%s",
		rounds, k.counts(), len(k.order), k.batches, acked, unanswered, k.retries, dups, cancels, len(log), len(k.pushes), len(lost), len(twice), len(cancelledIn), early,
		pct(0.5), pct(0.99), pct(1), k.seed, took.Round(100*time.Millisecond))
	t.Log(line)
	fmt.Println("crashtest scheduled:", line)
	if acked == 0 || cancels == 0 || k.batches == 0 {
		bad = append(bad, fmt.Sprintf("the rounds tested too little: %d acknowledged schedules, %d acknowledged cancels, %d batches", acked, cancels, k.batches))
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("... and %d more", len(bad)-30))
		}
		t.Errorf("%d violations (seed %d):\n  %s", len(bad), k.seed, strings.Join(bad, "\n  "))
	}
}
