package crashtest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Topics and dispatchers of the randomized rounds: d-all gets every topic,
// d-one only the one-segment topics ("*" is exactly one segment), both
// committing after every message; d-int gets ct.a and commits at most every
// 8 messages or 30 ms (interval policy).
var (
	rkTopics      = []string{"ct.a", "ct.b", "ct.c.x"}
	rkLevels      = []string{"accepted", "written", "durable"}
	rkDispatchers = []dispatcherConf{
		{Name: "d-all", Patterns: []string{"ct.**"}},
		{Name: "d-one", Patterns: []string{"ct.*"}},
		{Name: "d-int", Patterns: []string{"ct.a"}, Interval: 30 * time.Millisecond},
	}
)

const (
	rkPlainProducers  = 6
	rkMaxPerProducer  = 4000 // publishes per producer per round, at most
	rkSegmentMaxBytes = 4096 // small: a rotation every ~20 messages
	rkFirstRoundAcks  = 200  // answered publishes before the first kill: ~10 rotations
)

// rkRounds is the number of kill -9 rounds of a random-kill test in one
// index-sync mode (each runs in every mode of rkModes).
func rkRounds() int {
	if *roundsFlag > 0 {
		return *roundsFlag
	}
	if os.Getenv("MMMQ_LONG") != "" {
		return 100
	}
	return 3
}

// rkWorkers are the (dispatcher, topic) pairs of ds over rkTopics.
func rkWorkers(ds []dispatcherConf) []wkey {
	var ks []wkey
	for _, t := range rkTopics {
		for _, d := range ds {
			for _, p := range d.Patterns {
				if patternMatches(p, t) {
					ks = append(ks, wkey{d.Name, t})
					break
				}
			}
		}
	}
	return ks
}

// patternMatches is the broker's topic pattern rule: segments split on
// '.', "*" matches exactly one segment, "**" zero or more, anything else
// itself.
func patternMatches(pattern, topic string) bool {
	var match func(p, t []string) bool
	match = func(p, t []string) bool {
		switch {
		case len(p) == 0:
			return len(t) == 0
		case p[0] == "**":
			for i := 0; i <= len(t); i++ {
				if match(p[1:], t[i:]) {
					return true
				}
			}
			return false
		case len(t) == 0:
			return false
		case p[0] == "*" || p[0] == t[0]:
			return match(p[1:], t[1:])
		}
		return false
	}
	return match(strings.Split(pattern, "."), strings.Split(topic, "."))
}

// readCheckpoints reads the checkpoint file of every worker of ks straight
// from disk (8 bytes, int64 BE next offset; missing = 0).
func readCheckpoints(t testing.TB, root string, ks []wkey) map[wkey]int64 {
	out := map[wkey]int64{}
	for _, k := range ks {
		data, err := os.ReadFile(filepath.Join(root, k.T, "checkpoints", k.D+".checkpoint"))
		switch {
		case os.IsNotExist(err):
			out[k] = 0
		case err != nil:
			t.Fatal(err)
		case len(data) != 8:
			t.Fatalf("checkpoint %s: %d bytes", k, len(data))
		default:
			out[k] = int64(binary.BigEndian.Uint64(data))
		}
	}
	return out
}

// TestCrashRandomKill is the randomized kill -9 harness: R rounds of
// start → concurrent producers at every ack level on several topics while
// two dispatchers push to the in-test consumer → SIGKILL 10–300 ms into the
// load → restart and check (check_test.go). A final run drains the
// dispatchers and checks that every offset was delivered. It runs once per
// index-sync mode (rkModes).
func TestCrashRandomKill(t *testing.T) {
	forEachMode(t, func(t *testing.T, m indexSyncMode) {
		runRandomKill(t, m, rkLoad{Plain: rkPlainProducers})
	})
}

// rkWindowDispatchers are the dispatchers of TestCrashRandomKillWindow:
// d-all pushes one message at a time (checked as in TestCrashRandomKill),
// d-mif keeps up to 8 pushes in flight, d-batch sends batches of up to 16
// messages one at a time, d-both up to 8 batches of up to 16 at once; all
// on every topic, committing after every message.
var rkWindowDispatchers = []dispatcherConf{
	{Name: "d-all", Patterns: []string{"ct.**"}},
	{Name: "d-mif", Patterns: []string{"ct.**"}, MaxInFlight: 8},
	{Name: "d-batch", Patterns: []string{"ct.**"}, BatchMax: 16},
	{Name: "d-both", Patterns: []string{"ct.**"}, MaxInFlight: 8, BatchMax: 16},
}

// TestCrashRandomKillWindow is the randomized kill -9 harness
// (runRandomKill, 6 plain producers) with dispatchers that keep several
// pushes in flight (max-in-flight 8), send batches (batch max-messages
// 16), or both, next to one that pushes one message at a time. The
// consumer answers a window's pushes after 0–2 ms, so that they finish out
// of order. After every restart, for the window dispatchers
// (checkWindowDeliveries): every delivery is the log's message at its
// offset, byte for byte (a batch element without its "offset" member);
// nothing is sent below the checkpoint a run started from; the checkpoint
// never moves back and is never past an offset the consumer had not ACKed
// when the broker was killed (at most 1 + the end of the contiguous ACKed
// prefix); d-batch sends in offset order. At the end every offset of every
// topic was ACKed by the consumer at least once for every dispatcher; no
// worker had more pushes in flight than its max-in-flight nor a batch over
// 16 messages, and the run must have had batches of more than one message
// and more than one push of a d-mif and a d-both worker in flight at once.
// It runs once per index-sync mode (rkModes).
func TestCrashRandomKillWindow(t *testing.T) {
	forEachMode(t, func(t *testing.T, m indexSyncMode) {
		res := runRandomKill(t, m, rkLoad{Plain: rkPlainProducers, Dispatchers: rkWindowDispatchers})
		checkWindowRun(t, res)
	})
}

// checkWindowRun is the end-of-run check of TestCrashRandomKillWindow.
func checkWindowRun(t *testing.T, res rkResult) {
	peak, batched := map[string]int{}, map[string]int{}
	for _, d := range rkWindowDispatchers {
		for _, k := range rkWorkers([]dispatcherConf{d}) {
			if lim := max(d.MaxInFlight, 1); res.Peak[k] > lim {
				t.Fatalf("%s: %d pushes in flight at once, max-in-flight %d", k, res.Peak[k], lim)
			}
			peak[d.Name] = max(peak[d.Name], res.Peak[k])
			batched[d.Name] += res.Batched[k]
		}
	}
	if peak["d-mif"] < 2 || peak["d-both"] < 2 {
		t.Fatalf("pushes of one worker in flight at once, at most: %v; want more than one for d-mif and d-both (the window was not exercised)", peak)
	}
	if batched["d-batch"] == 0 || batched["d-both"] == 0 {
		t.Fatalf("batch pushes of more than one message: %v; want some for d-batch and d-both", batched)
	}
	for _, d := range res.Deliveries {
		if d.Batch > 16 {
			t.Fatalf("%s pushed a batch of %d messages (max-messages 16)", d.Dispatcher, d.Batch)
		}
		if d.Batch > 0 && (d.Dispatcher == "d-all" || d.Dispatcher == "d-mif") {
			t.Fatalf("%s, which has no batch setting, pushed a batch", d.Dispatcher)
		}
	}
	t.Logf("pushes of one worker in flight at once, at most: %v; batch pushes of more than one message: %v", peak, batched)
}

// rkLoad is the producers and dispatchers of one run of the random-kill
// harness.
type rkLoad struct {
	// Plain producers publish at random ack levels and never retry: a
	// publish without a reply is left as it is.
	Plain int
	// Retrying producers (retrier) publish DURABLE and publish a message
	// that got no reply or a 503 again, same id and content, after the
	// restart, until it is acknowledged.
	Retrying int
	// Dispatchers push to the in-test consumer (rkDispatchers when nil).
	// Those with MaxInFlight above 1 or BatchMax set are checked by
	// checkWindowDeliveries, the others by checkDeliveries.
	Dispatchers []dispatcherConf
}

// rkResult is what the checks of a random-kill run counted at the end.
type rkResult struct {
	Tally tally
	Retry retryTally
	// Peak is, per worker, the most pushes the consumer was handling at
	// once; Batched counts its batch pushes of more than one message.
	Peak, Batched map[wkey]int
	// Deliveries is everything the consumer received.
	Deliveries []delivery
}

// runRandomKill is the harness of TestCrashRandomKill with the producers
// of load, the broker in index-sync mode. Every check runs after every
// restart and fails the test at once; the counters of the final check are
// returned and printed.
func runRandomKill(t *testing.T, mode indexSyncMode, load rkLoad) rkResult {
	rounds := rkRounds()
	k := newRKRun(t, mode, load)
	t.Logf("rounds=%d seed=%d index-sync=%s producers: plain=%d retrying=%d; %d dispatchers, %d with a delivery window",
		rounds, k.seed, mode.IndexSync, load.Plain, load.Retrying, len(k.dispatchers), len(k.window))
	// Stop with a clear failure 2 minutes before go test's -timeout would
	// kill the test without a report (a run without -timeout has no limit).
	deadline, limited := t.Deadline()
	deadline = deadline.Add(-2 * time.Minute)
	began := time.Now()
	for r := 1; r <= rounds; r++ {
		if limited && time.Now().After(deadline) {
			t.Fatalf("out of time after %d rounds (raise go test -timeout)", r-1)
		}
		k.round(r, rounds, began)
	}
	// Final run: check, let the dispatchers drain, stop cleanly, check
	// that everything was delivered.
	final := rounds + 1
	k.cpStart[final] = readCheckpoints(t, k.root, k.workers)
	b := startBroker(t, k.conf(final))
	k.stats.started(b)
	k.verify(b, "after the last restart", false)
	// The retrying producers publish what is still unanswered, once more.
	if retried := publishPending(t, k.retriers, b, final, &k.sent); retried > 0 {
		k.verify(b, "after the last retries", false)
	}
	k.drain()
	b.stop()
	k.cpEnd[final] = readCheckpoints(t, k.root, k.workers)
	b = startBroker(t, mode.conf(brokerConf{DataDir: k.root, SegmentMaxBytes: rkSegmentMaxBytes}, final+1))
	k.stats.started(b)
	res := k.verify(b, "final", true)
	b.stop()
	res.Peak, res.Batched = k.cons.stats()
	res.Deliveries = k.cons.deliveries()
	rkSummary(t, k.root, rounds, res, k.sent, load, k.stats)
	return res
}

// rkRun is the state of one runRandomKill: its setup, what the producers
// sent, the log as last read back and the checkpoints between runs.
type rkRun struct {
	t            *testing.T
	mode         indexSyncMode
	load         rkLoad
	seed         uint64
	rng          *rand.Rand
	root         string
	dispatchers  []dispatcherConf
	workers      []wkey
	intervalKeys map[wkey]bool
	// window: dispatchers with a delivery window; ordered: those of them
	// that send in offset order (batches, one push at a time).
	window, ordered map[string]bool
	cons            *consumer
	// The retrying producers outlive the rounds: a message without an
	// answer waits in one for the next run.
	retriers []*retrier
	stats    *modeStats

	mu   sync.Mutex
	sent []sentMsg
	prev map[string][]stored
	// cpStart[r] / cpEnd[r]: the checkpoints on disk before run r started
	// and after it was killed.
	cpStart, cpEnd map[int]map[wkey]int64
}

func newRKRun(t *testing.T, mode indexSyncMode, load rkLoad) *rkRun {
	k := &rkRun{t: t, mode: mode, load: load, seed: uint64(time.Now().UnixNano()), dispatchers: load.Dispatchers,
		intervalKeys: map[wkey]bool{}, window: map[string]bool{}, ordered: map[string]bool{},
		cons: &consumer{}, stats: &modeStats{mode: mode}, prev: map[string][]stored{},
		cpStart: map[int]map[wkey]int64{}, cpEnd: map[int]map[wkey]int64{}}
	if k.dispatchers == nil {
		k.dispatchers = rkDispatchers
	}
	k.workers = rkWorkers(k.dispatchers)
	for _, d := range k.dispatchers {
		if d.MaxInFlight > 1 || d.BatchMax > 0 {
			k.window[d.Name] = true
			k.ordered[d.Name] = d.MaxInFlight <= 1
		}
		for _, w := range k.workers {
			if w.D == d.Name && d.Interval > 0 {
				k.intervalKeys[w] = true
			}
		}
	}
	k.rng = rand.New(rand.NewPCG(k.seed, 0x6d6d6d71))
	k.root = filepath.Join(t.TempDir(), "data")
	if len(k.window) > 0 {
		// Answer the pushes of a window after 0–2 ms, so that concurrent
		// pushes are answered out of offset order.
		k.cons.beforeAnswer = func(ds []delivery) {
			if k.window[ds[0].Dispatcher] {
				time.Sleep(rand.N(2 * time.Millisecond))
			}
		}
	}
	k.retriers = make([]*retrier, load.Retrying)
	for g := range k.retriers {
		k.retriers[g] = &retrier{g: g}
	}
	return k
}

// conf is the broker of run round: the dispatchers push to the consumer's
// listener of that run.
func (k *rkRun) conf(round int) brokerConf {
	port, _ := k.cons.listen(k.t, round)
	ds := make([]dispatcherConf, len(k.dispatchers))
	for i, d := range k.dispatchers {
		d.Port = port
		ds[i] = d
	}
	return k.mode.conf(brokerConf{DataDir: k.root, SegmentMaxBytes: rkSegmentMaxBytes, Dispatchers: ds}, round)
}

// verify reads the whole log back and runs every check; final adds the
// completeness checks (every offset delivered, every retrying producer's
// message acknowledged).
func (k *rkRun) verify(b *broker, label string, final bool) rkResult {
	t := k.t
	t.Helper()
	cur := map[string][]stored{}
	for _, tp := range rkTopics {
		l, err := readAll(b.base, tp)
		if err != nil {
			t.Fatalf("%s: read back: %v", label, err)
		}
		cur[tp] = l
	}
	var res rkResult
	tl := &res.Tally
	var bad []string
	bad = append(bad, checkPrefix(k.prev, cur)...)
	bad = append(bad, checkAcked(k.sent, cur, tl)...)
	bad = append(bad, checkLogIDs(k.sent, cur)...)
	bad = append(bad, checkRetries(k.sent, cur, final, &res.Retry)...)
	var one []delivery // of the dispatchers without a window
	for _, d := range k.cons.deliveries() {
		if !k.window[d.Dispatcher] {
			one = append(one, d)
		}
	}
	notWindow := func(w wkey) bool { return !k.window[w.D] }
	bad = append(bad, checkDeliveries(one, cur, onlyKeys(k.cpStart, notWindow), onlyKeys(k.cpEnd, notWindow), k.intervalKeys, tl)...)
	bad = append(bad, checkWindowDeliveries(k.cons.deliveries(), cur, k.cpStart, k.cpEnd, k.window, k.ordered, tl)...)
	bad = append(bad, k.cons.violations()...)
	if final {
		bad = append(bad, checkComplete(k.cons.deliveries(), cur, k.workers)...)
	}
	if len(bad) > 0 {
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("... and %d more", len(bad)-30))
		}
		t.Fatalf("%s: %d violations (seed %d, data %s):\n  %s", label, len(bad), k.seed, k.root, strings.Join(bad, "\n  "))
	}
	k.prev = cur
	return res
}

// round is run r of rounds: start the broker and check what the previous
// kill left, then run the producers and kill it 10–300 ms in.
func (k *rkRun) round(r, rounds int, began time.Time) {
	t := k.t
	k.cpStart[r] = readCheckpoints(t, k.root, k.workers)
	b := startBroker(t, k.conf(r))
	k.stats.started(b)
	if r > 1 {
		res := k.verify(b, fmt.Sprintf("round %d after restart", r), false)
		if (r-1)%50 == 0 { // progress of long runs (go test -v streams it)
			tl, rt := res.Tally, res.Retry
			t.Logf("%d of %d rounds after %s: acked durable %d, lost durable %d, delivered %d, retries %d (duplicate %d, stored %d), ids stored twice %d",
				r-1, rounds, time.Since(began).Round(time.Second), tl.AckedDurable, tl.LostDurable, tl.Delivered,
				rt.Retries, rt.RetryDuplicate, rt.RetryStored, rt.StoredTwice)
		}
	}
	killAfter := time.Duration(10+k.rng.IntN(291)) * time.Millisecond
	var (
		wg   sync.WaitGroup
		stop = make(chan struct{})
		// The first round is not killed before rkFirstRoundAcks
		// publishes were answered, so that even a short run on a
		// loaded machine rotates segments (the final check requires
		// it) instead of depending on how much 10–300 ms allowed.
		acked    atomic.Int64
		enough   = make(chan struct{})
		once     sync.Once
		finished = make(chan struct{})
	)
	answered := func() {
		if acked.Add(1) == rkFirstRoundAcks {
			once.Do(func() { close(enough) })
		}
	}
	record := func(m sentMsg) {
		k.mu.Lock()
		k.sent = append(k.sent, m)
		k.mu.Unlock()
	}
	rkProducers(t, b, r, k.rng, k.load, k.retriers, record, answered, stop, &wg)
	go func() { wg.Wait(); close(finished) }()
	time.Sleep(killAfter)
	if r == 1 {
		select {
		case <-enough:
		case <-finished: // every producer ended (a failure is reported)
		}
	}
	counts := k.stats.beforeKill(t, b)
	b.kill()
	close(stop)
	wg.Wait()
	k.stats.afterKill(t, b, k.root, r, counts)
	k.cpEnd[r] = readCheckpoints(t, k.root, k.workers)
}

// drain waits, at most 60 s, until every worker's checkpoint on disk
// reached its topic's high watermark as last read back.
func (k *rkRun) drain() {
	hw := map[string]int{}
	for tp, l := range k.prev {
		hw[tp] = len(l)
	}
	drainBy := time.Now().Add(60 * time.Second)
	for {
		cp := readCheckpoints(k.t, k.root, k.workers)
		done := true
		for _, w := range k.workers {
			done = done && cp[w] >= int64(hw[w.T])
		}
		if done {
			return
		}
		if time.Now().After(drainBy) {
			k.t.Fatalf("dispatchers did not drain within 60s: checkpoints %v, high watermarks %v", cp, hw)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rkProducers starts, in wg, the plain and retrying producers of load for
// round r against b. record is given every publish and its answer,
// answered is called after each acknowledged one; they stop when stop is
// closed or the broker is gone.
func rkProducers(t *testing.T, b *broker, r int, rng *rand.Rand, load rkLoad, retriers []*retrier,
	record func(sentMsg), answered func(), stop <-chan struct{}, wg *sync.WaitGroup) {
	for g := range load.Plain {
		prng := rand.New(rand.NewPCG(rng.Uint64(), uint64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range rkMaxPerProducer {
				select {
				case <-stop:
					return
				default:
				}
				m := sentMsg{
					Round: r,
					Topic: rkTopics[prng.IntN(len(rkTopics))],
					ID:    fmt.Sprintf("r%03d-g%d-%05d", r, g, n),
					Level: rkLevels[prng.IntN(len(rkLevels))],
				}
				m.Content, _ = json.Marshal(map[string]any{
					"id": m.ID, "level": m.Level, "pad": strings.Repeat("x", prng.IntN(160)),
				})
				m.Res = publish(b.base, m.Topic, m.ID, m.Content, m.Level)
				record(m)
				if !m.Res.Replied {
					return // the broker is gone
				}
				if !m.Res.Ack {
					t.Errorf("round %d: publish %s NACK %d: %s", r, m.ID, m.Res.Status, m.Res.Err)
					return
				}
				answered()
			}
		}()
	}
	for _, p := range retriers {
		prng := rand.New(rand.NewPCG(rng.Uint64(), uint64(1000+p.g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rkMaxPerProducer {
				select {
				case <-stop:
					return
				default:
				}
				m, goOn, err := p.step(b.base, r, rkTopics, prng)
				record(m)
				if err != nil {
					t.Errorf("round %d: %v", r, err)
					return
				}
				if !goOn {
					return // no reply or 503: pending until the restart
				}
				answered()
			}
		}()
	}
}

// rkSummary runs the end-of-run checks of runRandomKill on res (the
// final check) and prints the summary line ("crashtest: rounds=...").
func rkSummary(t *testing.T, root string, rounds int, res rkResult, sent []sentMsg, load rkLoad, stats *modeStats) {
	t.Helper()
	tl, rt := res.Tally, res.Retry
	if tl.LostDurable != 0 || tl.LostWritten != 0 {
		t.Fatalf("lost acknowledged data: %+v", tl)
	}
	if tl.AckedDurable == 0 || tl.Delivered == 0 {
		t.Fatalf("the load did nothing: %+v", tl)
	}
	noReply := 0
	for _, m := range sent {
		if !m.Res.Replied {
			noReply++
		}
	}
	segs, _ := filepath.Glob(filepath.Join(root, "*", "*.mmm"))
	if len(segs) <= len(rkTopics) {
		t.Fatalf("no segment rotation happened (%d segments): the rounds did not exercise rotation", len(segs))
	}
	line := fmt.Sprintf("rounds=%d acked_durable=%d acked_written=%d acked_accepted=%d lost_durable=%d lost_written=%d lost_accepted=%d delivered=%d duplicates=%d no_reply=%d segments=%d",
		rounds, tl.AckedDurable, tl.AckedWritten, tl.AckedAccepted, tl.LostDurable, tl.LostWritten, tl.LostAccepted, tl.Delivered, tl.Duplicates, noReply, len(segs))
	if load.Retrying > 0 {
		line += " retrying: " + rt.String()
	}
	line += " " + stats.String() + " test=" + t.Name()
	t.Log(line)
	fmt.Println("crashtest:", line)
}

// onlyKeys returns the checkpoints of cps whose worker keep selects.
func onlyKeys(cps map[int]map[wkey]int64, keep func(wkey) bool) map[int]map[wkey]int64 {
	out := make(map[int]map[wkey]int64, len(cps))
	for r, m := range cps {
		out[r] = map[wkey]int64{}
		for k, v := range m {
			if keep(k) {
				out[r][k] = v
			}
		}
	}
	return out
}
