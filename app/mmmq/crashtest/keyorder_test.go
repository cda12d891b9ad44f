package crashtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The broker of TestCrashKeyOrdering: one dispatcher, d-key, with
// ordering key and up to 8 pushes in flight per topic, on three topics;
// short backoffs (5 ms doubling to 50 ms), so that a parked key is retried
// many times within a round. Producers publish DURABLE with one of 20 keys
// (k00..k19) or, one message in 10, without a key; the consumer answers
// the pushes of the flaky keys 503 at random.
var (
	koTopics = []string{"ko.a", "ko.b", "ko.c"}
	koFlaky  = map[string]bool{"k03": true, "k08": true, "k13": true}
)

const (
	koDispatcher     = "d-key"
	koKeys           = 20
	koProducers      = 12
	koMaxInFlight    = 8
	koMaxUnacked     = 64  // small enough that a parked key may hold the others back
	koFlakyRate      = 0.3 // of a flaky key's pushes answered 503
	koMaxPerProducer = 4000
	koBackoffInitial = 5 * time.Millisecond
	koBackoffMax     = 50 * time.Millisecond
)

// koRounds is the number of rounds of TestCrashKeyOrdering and of
// TestLazyFSPowerLossKeyOrdering: the
// -crash.rounds flag, else 100 with MMMQ_LONG=1, else 10 (a round takes
// about half a second).
func koRounds() int { return lazyRoundsCount(10, 100) }

// TestCrashKeyOrdering is kill -9 evidence for ordering key: R rounds of
// start → 12 producers publishing DURABLE messages with 20 ordering keys
// (and some without a key) on 3 topics while d-key (ordering key,
// max-in-flight 8, max-unacked 64: a parked key soon holds the others
// back) pushes to the in-test consumer → SIGKILL 100–400 ms in →
// restart. The consumer answers each push ACK
// after 0–2 ms, except that a push of a flaky key is answered 503 (an
// abnormal answer: the key is parked and retried after a backoff) three
// times in ten; it never NACKs, so a message is finished when the
// consumer ACKed it. A final run drains (every topic's committed offset
// at its high watermark in GET /mmmq/dispatchers/d-key) and stops
// cleanly. Checked at the consumer, over every run:
//
//  1. no offset of a key is pushed before every earlier offset of that
//     key in the log was ACKed at least once (the ACK answered before the
//     push arrived); resends of ACKed messages are allowed;
//  2. within a run, never two pushes of one key (of one topic)
//     outstanding at once;
//  3. every push is the log's message at its offset, byte for byte, with
//     mmmq-key equal to its stored key; every acknowledged publish is in
//     the log at its offset with its key, and at the end every offset of
//     every topic was ACKed by the consumer at least once;
//  4. the checkpoint files read between runs never move back and are
//     never past an offset the consumer had not ACKed when the broker was
//     killed; nothing is pushed below the checkpoint a run started from,
//     nor any offset the .finished files held (as finished past the
//     checkpoint) when the run started; after the clean stop every
//     checkpoint is at its high watermark;
//  5. the run exercised what it tests: 503s were answered, a 503'd
//     message was sent again in the same run no sooner than
//     backoff-initial later while other keys' pushes arrived meanwhile (the
//     key parked alone), the status showed parked keys, and a worker had
//     more than one push in flight at once (never more than 8).
func TestCrashKeyOrdering(t *testing.T) {
	newKORun(t, nil).run(koRounds())
}

// TestLazyFSPowerLossKeyOrdering is TestCrashKeyOrdering with the data
// directory on LazyFS (see TestLazyFSPowerLoss): odd rounds end in a power
// loss (the broker frozen, the LazyFS daemon killed: every write not
// fsynced is gone, then the broker killed and the root mounted again),
// even ones in kill -9. Same checks, and on each power loss check 6:
//
//  6. every record of a .finished file the broker had written when it
//     was frozen is still there after the power loss, except its last
//     one (the append whose fsync may have been under way), byte for
//     byte.
//
// With check 4 (nothing a run's .finished files held when it started is
// pushed in it) that is: a message whose finish the broker had recorded
// is not pushed again after a power loss, unless its record was the last
// append. A message ACKed but not yet recorded may be pushed again
// (at-least-once): the consumer cannot tell when its record was fsynced,
// so such redeliveries are counted, not bounded. Rounds as
// TestCrashKeyOrdering's (koRounds), preallocation at its default. It
// runs only with MMMQ_LAZYFS set; without it the test logs one line
// saying why and passes.
func TestLazyFSPowerLossKeyOrdering(t *testing.T) {
	if fs := mountLazyFS(t, "ordering key"); fs != nil {
		newKORun(t, fs).run(koRounds())
	}
}

// run runs the rounds, then a final run that checks, drains and stops
// cleanly; then checks everything from a broker without dispatchers.
func (k *koRun) run(rounds int) {
	t := k.t
	on := ""
	if k.fs != nil {
		on = fmt.Sprintf(" on LazyFS %s (odd rounds: power loss; even: kill -9)", k.fs.mnt)
	}
	t.Logf("rounds=%d seed=%d topics=%v keys=%d flaky=%v (503 rate %.1f) max-in-flight=%d max-unacked=%d%s",
		rounds, k.seed, koTopics, koKeys, slices.Sorted(maps.Keys(koFlaky)), koFlakyRate, koMaxInFlight, koMaxUnacked, on)
	deadline, limited := t.Deadline()
	deadline = deadline.Add(-2 * time.Minute)
	for r := 1; r <= rounds; r++ {
		if limited && time.Now().After(deadline) {
			t.Fatalf("out of time after %d rounds (raise go test -timeout)", r-1)
		}
		k.round(r)
	}
	final := rounds + 1
	b := k.startRun(final, true)
	k.verify(b, "after the last restart", false)
	k.started(final)
	stopPoll := k.poll(b)
	k.drain(b)
	stopPoll()
	b.stop()
	k.cpEnd[final] = readCheckpoints(t, k.root, k.workers)
	b = k.startRun(final+1, false)
	res := k.verify(b, "final", true)
	b.stop()
	for _, w := range k.workers {
		if hw := int64(len(k.prev[w.T])); k.cpEnd[final][w] != hw {
			t.Fatalf("%s: checkpoint %d after the drain and a clean stop, high watermark %d", w, k.cpEnd[final][w], hw)
		}
	}
	k.summary(rounds, res)
}

// koPush is one push the consumer received (always one message: d-key
// has no batch setting).
type koPush struct {
	Run     int // which broker run sent it (one listener per run)
	Topic   string
	Offset  int64
	Key     string // mmmq-key ("" for none)
	Attempt int
	ID      string
	Body    []byte // the stored message JSON
	// Arrived and Answered are the consumer's sequence numbers (one
	// counter over every push) when the push arrived and when its answer
	// was decided, just before it was written: the broker cannot have
	// seen the answer before Answered. ArrivedAt and AnsweredAt are the
	// same moments in wall time.
	Arrived, Answered     int64
	ArrivedAt, AnsweredAt time.Time
	Acked                 bool // answered ACK (else 503)
}

// koKeyRun is one key of one topic in one run.
type koKeyRun struct {
	run        int
	topic, key string
}

// koConsumer is the consumer of TestCrashKeyOrdering: it records every
// push, checks live that no key has two pushes outstanding in a run
// (check 2) and answers ACK, or 503 for a flaky key's push at random,
// after 0–2 ms.
type koConsumer struct {
	mu     sync.Mutex
	seq    int64
	pushes []koPush
	out    map[koKeyRun][]int64 // the offsets of a key being handled now
	busy   map[busyKey]int      // pushes of a worker being handled now, per run
	peak   int                  // the most of one worker in one run
	bad    []string
	// answered503 wakes the status poller once a 503 has been sent: the
	// key is then parked for at least backoff-initial (a timer never
	// fires early), so a poll at once sees it parked, where the poller's
	// own 10 ms period can miss every short parking on a loaded machine.
	answered503 chan struct{}
}

func (c *koConsumer) serve(w http.ResponseWriter, r *http.Request, run int) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		// The broker died while sending: nothing was received.
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p := koPush{Run: run, Topic: r.Header.Get("mmmq-topic"), Key: r.Header.Get("mmmq-key"),
		ID: r.Header.Get("mmmq-message-id"), Body: body}
	p.Attempt, _ = strconv.Atoi(r.Header.Get("mmmq-attempt"))
	off, oerr := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
	p.Offset = off
	stored, serr := storedKey(body)
	c.mu.Lock()
	var problem string
	switch {
	case r.Header.Get("mmmq-batch-size") != "":
		problem = "a batch push (d-key has no batch setting)"
	case oerr != nil:
		problem = fmt.Sprintf("mmmq-offset %q", r.Header.Get("mmmq-offset"))
	case serr != nil:
		problem = fmt.Sprintf("body is not a stored message: %v", serr)
	case stored != p.Key:
		problem = fmt.Sprintf("offset %d: mmmq-key %q, stored key %q", off, p.Key, stored)
	}
	if problem != "" {
		c.bad = append(c.bad, fmt.Sprintf("run %d: push of %s: %s", run, p.Topic, problem))
		c.mu.Unlock()
		http.Error(w, problem, http.StatusBadRequest)
		return
	}
	c.seq++
	p.Arrived, p.ArrivedAt = c.seq, time.Now()
	kr := koKeyRun{run, p.Topic, p.Key}
	if p.Key != "" {
		if o := c.out[kr]; len(o) > 0 {
			c.bad = append(c.bad, fmt.Sprintf("check 2: key %q of %s, run %d: offset %d (attempt %d) pushed while offset %v of the key was outstanding",
				p.Key, p.Topic, run, off, p.Attempt, o))
		}
		c.out[kr] = append(c.out[kr], off)
	}
	bk := busyKey{run, wkey{koDispatcher, p.Topic}}
	c.busy[bk]++
	c.peak = max(c.peak, c.busy[bk])
	p.Acked = !koFlaky[p.Key] || rand.Float64() >= koFlakyRate
	c.mu.Unlock()
	time.Sleep(rand.N(2 * time.Millisecond))
	// Recorded before the handler writes: net/http sends the answer only
	// after this, so the broker cannot have seen it yet.
	c.mu.Lock()
	c.seq++
	p.Answered, p.AnsweredAt = c.seq, time.Now()
	if p.Key != "" {
		o := c.out[kr]
		if i := slices.Index(o, off); i >= 0 {
			c.out[kr] = slices.Delete(o, i, i+1)
		}
	}
	c.busy[bk]--
	c.pushes = append(c.pushes, p)
	c.mu.Unlock()
	if !p.Acked {
		http.Error(w, "flaky key", http.StatusServiceUnavailable)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		select {
		case c.answered503 <- struct{}{}:
		default:
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"acknowledgement":"ACK"}`)
}

// snapshot returns the pushes answered so far, in order of arrival, and
// the violations found live.
func (c *koConsumer) snapshot() ([]koPush, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps := slices.Clone(c.pushes)
	slices.SortFunc(ps, func(a, b koPush) int { return int(a.Arrived - b.Arrived) })
	return ps, slices.Clone(c.bad)
}

// storedKey is the "key" member of a stored message JSON ("" for none).
func storedKey(raw []byte) (string, error) {
	var v struct {
		Key string `json:"key"`
	}
	err := json.Unmarshal(raw, &v)
	return v.Key, err
}

// koStatus is what the status poller saw of d-key across every run.
type koStatus struct {
	mu sync.Mutex
	koStatusCounts
}

// koStatusCounts are the status poller's counts: polls answered, those
// that showed a parked key and those that showed a full window (heldBy),
// the most parked keys and keys in flight of a topic.
type koStatusCounts struct {
	polls, parkedPolls, heldPolls int
	maxParked, maxInFly           int
}

// koRun is the state of TestCrashKeyOrdering.
type koRun struct {
	lazyRounds
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	root    string
	cons    *koConsumer
	workers []wkey
	status  koStatus

	mu   sync.Mutex
	sent []sentMsg
	prev map[string][]stored
	// cpStart[r] / cpEnd[r]: the checkpoints on disk before run r started
	// and after it was killed (or, the final run, stopped).
	cpStart, cpEnd map[int]map[wkey]int64
	// finStart[r]: the .finished files before run r started; hwStart[r]:
	// each topic's log length once it had started (its recovery done).
	finStart map[int]map[wkey]finFile
	hwStart  map[int]map[string]int64
	fin      finLossCounts
}

func newKORun(t *testing.T, fs *lazyFS) *koRun {
	k := &koRun{lazyRounds: lazyRounds{t: t, fs: fs}, t: t, seed: uint64(time.Now().UnixNano()),
		cons:    &koConsumer{out: map[koKeyRun][]int64{}, busy: map[busyKey]int{}, answered503: make(chan struct{}, 1)},
		cpStart: map[int]map[wkey]int64{}, cpEnd: map[int]map[wkey]int64{},
		finStart: map[int]map[wkey]finFile{}, hwStart: map[int]map[string]int64{}}
	k.rng = rand.New(rand.NewPCG(k.seed, 0x6b65796f))
	k.root = dataRoot(t, fs)
	for _, tp := range koTopics {
		k.workers = append(k.workers, wkey{koDispatcher, tp})
	}
	return k
}

// conf is the broker of run: with the dispatcher pushing to the
// consumer's listener of that run, or without dispatchers.
func (k *koRun) conf(run int, dispatch bool) brokerConf {
	c := brokerConf{DataDir: k.root, SegmentMaxBytes: rkSegmentMaxBytes, BackoffInitial: koBackoffInitial, BackoffMax: koBackoffMax}
	if dispatch {
		port, _ := listenRound(k.t, run, func(w http.ResponseWriter, r *http.Request) { k.cons.serve(w, r, run) })
		c.Dispatchers = []dispatcherConf{{Name: koDispatcher, Port: port, Patterns: []string{"ko.*"},
			MaxInFlight: koMaxInFlight, Ordering: "key", MaxUnacked: koMaxUnacked}}
	}
	return c
}

// startRun reads the checkpoints and .finished files, then starts the
// broker of run (lazyRounds.start).
func (k *koRun) startRun(run int, dispatch bool) *broker {
	k.cpStart[run] = readCheckpoints(k.t, k.root, k.workers)
	k.finStart[run] = readFinished(k.t, k.root, k.workers)
	return k.start(func() brokerConf { return k.conf(run, dispatch) })
}

// started notes the log lengths run started with (read back by verify).
func (k *koRun) started(run int) {
	k.hwStart[run] = map[string]int64{}
	for tp, l := range k.prev {
		k.hwStart[run][tp] = int64(len(l))
	}
}

// round is run r: start the broker and check what the previous round
// left, then run the producers and end the run 100–400 ms in: kill -9,
// or on LazyFS in odd rounds a power loss (check 6).
func (k *koRun) round(r int) {
	t := k.t
	b := k.startRun(r, true)
	if r > 1 {
		k.verify(b, fmt.Sprintf("round %d after restart", r), false)
	}
	k.started(r)
	stopPoll := k.poll(b)
	killAfter := time.Duration(100+k.rng.IntN(301)) * time.Millisecond
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range koProducers {
		prng := rand.New(rand.NewPCG(k.rng.Uint64(), uint64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range koMaxPerProducer {
				select {
				case <-stop:
					return
				default:
				}
				m := sentMsg{Round: r, Topic: koTopics[prng.IntN(len(koTopics))], ID: fmt.Sprintf("r%03d-g%d-%05d", r, g, n), Level: "durable"}
				if prng.IntN(10) > 0 {
					m.Key = fmt.Sprintf("k%02d", prng.IntN(koKeys))
				}
				m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "key": m.Key, "pad": strings.Repeat("x", prng.IntN(120))})
				m.Res = publishKey(b.base, m.Topic, m.ID, m.Key, m.Content, m.Level)
				k.mu.Lock()
				k.sent = append(k.sent, m)
				k.mu.Unlock()
				if !m.Res.Replied {
					return // the broker is gone
				}
				if !m.Res.Ack {
					t.Errorf("round %d: publish %s NACK %d: %s", r, m.ID, m.Res.Status, m.Res.Err)
					return
				}
			}
		}()
	}
	time.Sleep(killAfter)
	var frozen map[wkey]finFile
	if k.end(b, r, func() { frozen = readFinished(t, k.root, k.workers) }) {
		after := readFinished(t, k.root, k.workers)
		if bad := checkFinishedKept(frozen, after, &k.fin); len(bad) > 0 {
			t.Fatalf("round %d, power loss: %d violations (seed %d, data %s):\n  %s", r, len(bad), k.seed, k.root, strings.Join(bad, "\n  "))
		}
	}
	close(stop)
	wg.Wait()
	stopPoll()
	k.cpEnd[r] = readCheckpoints(t, k.root, k.workers)
}

// poll reads d-key's status every 10 ms until the returned func is
// called, noting parked keys, keys in flight and heldBy.
func (k *koRun) poll(b *broker) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case <-k.cons.answered503:
			case <-time.After(10 * time.Millisecond):
			}
			st, _, err := koGetStatus(b)
			if err != nil {
				continue // killed, or not answering yet
			}
			k.status.mu.Lock()
			k.status.polls++
			parked, held := false, false
			for _, tp := range st.Topics {
				if tp.Keys == nil {
					continue
				}
				k.status.maxParked = max(k.status.maxParked, tp.Keys.ParkedKeys)
				k.status.maxInFly = max(k.status.maxInFly, tp.Keys.InFlight)
				parked = parked || tp.Keys.ParkedKeys > 0
				held = held || tp.Keys.HeldBy != nil
			}
			if parked {
				k.status.parkedPolls++
			}
			if held {
				k.status.heldPolls++
			}
			k.status.mu.Unlock()
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-ended }) }
}

// koDispatcherStatus is the part of GET /mmmq/dispatchers/{name} the test
// reads.
type koDispatcherStatus struct {
	Topics []struct {
		Topic         string `json:"topic"`
		Committed     int64  `json:"committed"`
		HighWatermark int64  `json:"highWatermark"`
		Keys          *struct {
			InFlight   int     `json:"inFlight"`
			ParkedKeys int     `json:"parkedKeys"`
			HeldBy     *string `json:"heldBy"`
		} `json:"keys"`
	} `json:"topics"`
}

func koGetStatus(b *broker) (koDispatcherStatus, []byte, error) {
	var st koDispatcherStatus
	resp, err := httpClient.Get(b.base + "/mmmq/dispatchers/" + koDispatcher)
	if err != nil {
		return st, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, data, fmt.Errorf("GET /mmmq/dispatchers/%s: %d %s", koDispatcher, resp.StatusCode, data)
	}
	return st, data, json.Unmarshal(data, &st)
}

// drain waits, at most 60 s, until every topic's committed offset in the
// status equals its high watermark, which equals the log as last read
// back.
func (k *koRun) drain(b *broker) {
	by := time.Now().Add(60 * time.Second)
	for {
		st, body, err := koGetStatus(b)
		done := err == nil && len(st.Topics) == len(koTopics)
		for _, tp := range st.Topics {
			hw := int64(len(k.prev[tp.Topic]))
			done = done && tp.Committed == hw && tp.HighWatermark == hw
		}
		if done {
			return
		}
		if time.Now().After(by) {
			k.t.Fatalf("d-key did not drain within 60s (status error %v): %s\n%s", err, body, b.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// koResult is what the checks counted.
type koResult struct {
	Tally tally
	// Pushes counts every push answered; Redelivered those of an offset
	// ACKed before they arrived; Answered503 the 503s; ParkedAlone the
	// 503'd messages sent again in the same run with other keys' pushes
	// arriving in between.
	Pushes, Redelivered, Answered503, ParkedAlone int
	// SameRun counts the redeliveries in the run that ACKed the message.
	SameRun int
	// FinishedAtStart counts the offsets the .finished files held when a
	// run started (so not pushed in it), over every run.
	FinishedAtStart int
}

// verify reads every topic back and runs every check; final adds the
// completeness check (every offset ACKed at least once).
func (k *koRun) verify(b *broker, label string, final bool) koResult {
	t := k.t
	t.Helper()
	cur := map[string][]stored{}
	for _, tp := range koTopics {
		l, err := readAll(b.base, tp)
		if err != nil {
			t.Fatalf("%s: read back: %v", label, err)
		}
		cur[tp] = l
	}
	k.mu.Lock()
	sent := slices.Clone(k.sent)
	k.mu.Unlock()
	ps, live := k.cons.snapshot()
	var res koResult
	var bad []string
	bad = append(bad, checkPrefix(k.prev, cur)...)
	bad = append(bad, checkAcked(sent, cur, &res.Tally)...)
	bad = append(bad, checkLogIDs(sent, cur)...)
	bad = append(bad, checkSentKeys(sent, cur)...)
	bad = append(bad, live...)
	bad = append(bad, checkKeyOrder(ps, cur)...)
	dels := make([]delivery, len(ps))
	for i, p := range ps {
		dels[i] = delivery{Round: p.Run, Dispatcher: koDispatcher, Topic: p.Topic, Offset: p.Offset, Attempt: p.Attempt,
			ID: p.ID, Body: p.Body, Acked: p.Acked}
	}
	bad = append(bad, checkWindowDeliveries(dels, cur, k.cpStart, k.cpEnd, map[string]bool{koDispatcher: true}, nil, &res.Tally)...)
	bad = append(bad, checkFinishedNotPushed(dels, k.finStart, k.cpStart, k.hwStart, &res.FinishedAtStart)...)
	if final {
		bad = append(bad, checkComplete(dels, cur, k.workers)...)
	}
	parking, probs := koParking(ps)
	bad = append(bad, probs...)
	if len(bad) > 0 {
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("... and %d more", len(bad)-30))
		}
		t.Fatalf("%s: %d violations (seed %d, data %s):\n  %s", label, len(bad), k.seed, k.root, strings.Join(bad, "\n  "))
	}
	k.prev = cur
	res.Pushes, res.Answered503, res.ParkedAlone = len(ps), parking.answered503, parking.parkedAlone
	type at struct {
		topic string
		off   int64
	}
	firstAck := map[at]int64{} // the Answered of an offset's first ACK
	ackRun := map[at]int{}     // the last run that ACKed it
	for _, p := range ps {
		o := at{p.Topic, p.Offset}
		if a, ok := firstAck[o]; ok && a < p.Arrived {
			res.Redelivered++
			if ackRun[o] == p.Run {
				res.SameRun++
			}
		}
		if a, ok := firstAck[o]; p.Acked && (!ok || p.Answered < a) {
			firstAck[o] = p.Answered
		}
		if p.Acked {
			ackRun[o] = max(ackRun[o], p.Run)
		}
	}
	return res
}

// checkSentKeys: every acknowledged publish is stored with the key it was
// published with (checkAcked checks its offset, id and content).
func checkSentKeys(sent []sentMsg, cur map[string][]stored) []string {
	var bad []string
	for _, m := range sent {
		l := cur[m.Topic]
		if !m.Res.Ack || m.Res.Offset < 0 || m.Res.Offset >= int64(len(l)) {
			continue
		}
		if key, err := storedKey(l[m.Res.Offset].Raw); err != nil || key != m.Key {
			bad = append(bad, fmt.Sprintf("%s@%d (id %s): stored key %q, published with %q", m.Topic, m.Res.Offset, m.ID, key, m.Key))
		}
	}
	return bad
}

// checkKeyOrder is check 1: no push of an offset of a key arrived before
// every earlier offset of that key in the log cur had been ACKed (its
// answer decided before the push arrived, in any run). ps is in order of
// arrival.
func checkKeyOrder(ps []koPush, cur map[string][]stored) []string {
	type ack struct {
		seq int64
		run int
	}
	first := map[string]map[int64]ack{} // topic → offset → its first ACK
	for _, p := range ps {
		if !p.Acked {
			continue
		}
		m := first[p.Topic]
		if m == nil {
			m = map[int64]ack{}
			first[p.Topic] = m
		}
		if a, ok := m[p.Offset]; !ok || p.Answered < a.seq {
			m[p.Offset] = ack{p.Answered, p.Run}
		}
	}
	// need[topic][off]: the earlier offset of off's key whose first ACK
	// came last (seq MaxInt64: never ACKed); a push of off must arrive
	// after it.
	type need struct {
		off int64
		ack
	}
	needs := map[string]map[int64]need{}
	for tp, l := range cur {
		last := map[string]need{}
		nm := map[int64]need{}
		for i, s := range l {
			off := int64(i)
			key, _ := storedKey(s.Raw)
			if key == "" {
				continue
			}
			n, seen := last[key]
			if seen {
				nm[off] = n
			}
			a, ok := first[tp][off]
			if !ok {
				a = ack{math.MaxInt64, 0}
			}
			if !seen || a.seq > n.seq {
				last[key] = need{off, a}
			}
		}
		needs[tp] = nm
	}
	var bad []string
	for _, p := range ps {
		if p.Key == "" {
			continue
		}
		n, ok := needs[p.Topic][p.Offset]
		if !ok || n.seq < p.Arrived {
			continue
		}
		when := "never ACKed"
		if n.seq != math.MaxInt64 {
			when = fmt.Sprintf("first ACKed in run %d, after this push arrived", n.run)
		}
		bad = append(bad, fmt.Sprintf("check 1: key %q of %s: offset %d pushed (run %d, attempt %d) before the key's earlier offset %d was ACKed (%s)",
			p.Key, p.Topic, p.Offset, p.Run, p.Attempt, n.off, when))
	}
	return bad
}

// koParkingStats is what koParking counted.
type koParkingStats struct {
	answered503 int
	// parkedAlone: 503'd messages sent again in the same run, with a push
	// of another key of the topic arriving in between.
	parkedAlone int
}

// koParking checks the retries of the 503'd messages (ps in order of
// arrival): one sent again in the same run comes no sooner than
// backoff-initial after its 503 was decided (a timer never fires early,
// and the broker parked it after that), as the next push of its key.
func koParking(ps []koPush) (koParkingStats, []string) {
	var st koParkingStats
	var bad []string
	type pending struct {
		p      koPush
		others int // pushes of other keys of the topic that arrived since
	}
	open := map[koKeyRun]*pending{}
	for _, p := range ps {
		kr := koKeyRun{p.Run, p.Topic, p.Key}
		for okr, pd := range open {
			if okr.run == p.Run && okr.topic == p.Topic && okr.key != p.Key && p.Arrived > pd.p.Answered {
				pd.others++
			}
		}
		if pd := open[kr]; pd != nil && p.Arrived > pd.p.Answered {
			delete(open, kr)
			if p.Offset != pd.p.Offset {
				bad = append(bad, fmt.Sprintf("check 1: key %q of %s, run %d: offset %d pushed after offset %d was answered 503 and before it was sent again",
					p.Key, p.Topic, p.Run, p.Offset, pd.p.Offset))
			} else if gap := p.ArrivedAt.Sub(pd.p.AnsweredAt); gap < koBackoffInitial {
				bad = append(bad, fmt.Sprintf("key %q of %s, run %d: offset %d sent again %s after its 503, before backoff-initial %s",
					p.Key, p.Topic, p.Run, p.Offset, gap, koBackoffInitial))
			} else if pd.others > 0 {
				st.parkedAlone++
			}
		}
		if !p.Acked {
			st.answered503++
			if p.Key != "" {
				open[kr] = &pending{p: p}
			}
		}
	}
	return st, bad
}

// summary runs the checks of what the run exercised (check 5) and logs
// the summary line.
func (k *koRun) summary(rounds int, res koResult) {
	t := k.t
	t.Helper()
	k.status.mu.Lock()
	st := k.status.koStatusCounts
	k.status.mu.Unlock()
	k.cons.mu.Lock()
	peak := k.cons.peak
	k.cons.mu.Unlock()
	stale, skipped := k.brokerLogCounts()
	line := fmt.Sprintf("rounds=%d %s acked_durable=%d lost_durable=%d pushes=%d redeliveries=%d redeliveries_same_run=%d answered_503=%d parked_alone_retried=%d max_in_flight=%d status_polls=%d parked_seen_polls=%d max_parked_keys=%d max_keys_in_flight=%d held_by_polls=%d finished_at_start=%d %s stale_rereads=%d corrupt_skipped=%d",
		rounds, k.counts(), res.Tally.AckedDurable, res.Tally.LostDurable, res.Pushes, res.Redelivered, res.SameRun, res.Answered503, res.ParkedAlone, peak,
		st.polls, st.parkedPolls, st.maxParked, st.maxInFly, st.heldPolls, res.FinishedAtStart, k.fin, stale, skipped)
	t.Log(line)
	fmt.Println("crashtest:", line, "test="+t.Name())
	switch {
	case res.Tally.AckedDurable == 0 || res.Pushes == 0:
		t.Fatalf("the load did nothing: %s", line)
	case res.Answered503 == 0 || res.ParkedAlone == 0:
		t.Fatalf("no 503 answered, or no 503'd message sent again while other keys went on: parking not exercised: %s", line)
	case st.maxParked == 0:
		t.Fatalf("the status never showed a parked key: %s", line)
	case peak < 2:
		t.Fatalf("never more than one push of a worker in flight at once: %s", line)
	case peak > koMaxInFlight:
		t.Fatalf("%d pushes of a worker in flight at once, max-in-flight %d", peak, koMaxInFlight)
	case k.fs != nil && (k.powerLosses == 0 || k.fin.Records == 0 || res.FinishedAtStart == 0):
		t.Fatalf("no power loss with a .finished record written before it, or no run started with a finished offset past its checkpoint: %s", line)
	case skipped > 0:
		t.Fatalf("the dispatcher skipped %d entries as corrupt; the rounds damage no entry: %s", skipped, line)
	}
}

// brokerLogCounts counts, over the logs of every broker run of k (they sit
// beside the data directory), the entries the storage engine read intact
// only on a re-read through new files (see the storage README, "Reads that
// fail validation") and the entries a dispatcher skipped as corrupt.
func (k *koRun) brokerLogCounts() (stale, skipped int) {
	logs, err := filepath.Glob(filepath.Join(filepath.Dir(k.root), "mmmq-*.log"))
	if err != nil {
		k.t.Fatal(err)
	}
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			k.t.Fatal(err)
		}
		stale += strings.Count(string(b), "read intact from newly opened files")
		skipped += strings.Count(string(b), "corrupt entry skipped")
	}
	return stale, skipped
}
