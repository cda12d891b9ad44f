package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The broker of TestCrashSharedGroup: one topic read by one shared
// consumer group (competing consumers), whose sessions lease a message for
// sgLease and which dead-letters a message after sgMaxDeliveries
// deliveries. Producers publish DURABLE with one of sgKeys ordering keys
// or, one message in 5, without a key; a message in 25 is "poison": every
// consumer nacks it, so it goes to the dead-letter topic.
const (
	sgTopic         = "sg.a"
	sgGroup         = "g1"
	sgDeadLetter    = "dead-letter." + sgGroup
	sgKeys          = 12
	sgProducers     = 3
	sgPerProducer   = 120 // publishes of one producer in one round, at most
	sgMaxConsumers  = 8
	sgLease         = 500 * time.Millisecond
	sgMaxDeliveries = 6
	sgPoisonRate    = 0.04 // of messages: always nacked, so dead-lettered
	sgNackRate      = 0.15 // of the other deliveries: nacked (then handed out again)
	sgAbandonRate   = 0.04 // of the fetches that got messages: the session is given up
	sgFetchWait     = 100 * time.Millisecond
)

// sgRounds is the number of rounds of TestCrashSharedGroup: the
// -crash.rounds flag, else 100 with MMMQ_LONG=1, else 8 (a round takes
// about a second).
func sgRounds() int { return lazyRoundsCount(8, 100) }

// TestCrashSharedGroup is kill -9 evidence for shared consumer groups:
// R rounds of start → 3 producers publishing DURABLE messages with 12
// ordering keys (and some without a key) while 1–8 consumer sessions
// fetch with mode=shared, ack (one offset per request), nack (at once or
// after 20 ms), always nack the poison messages and now and then abandon
// their session (stop using it: its lease of 500 ms ends and what it held
// is handed out again; each comes back 600 ms later to ack one of what
// it held) → SIGKILL 300–1200 ms in → restart. A final run
// drains the group (every consumer acks, poison messages go on being
// nacked until they are dead-lettered) until the committed offset is the
// high watermark, stops cleanly, and a clean restart must hand out
// nothing. Checked over every run (sgRun.verify):
//
//	(a) every DURABLE-acknowledged publish is in the log at its offset,
//	    and at the end every offset is finished: acknowledged or in
//	    dead-letter.g1 (lost otherwise);
//	(b) no message of a key is handed out before every earlier message of
//	    its key in the log was finished: an ack of it sent before the
//	    fetch answer arrived (answered with acked or already counting it,
//	    or not answered and never handed out again), or its dead letter
//	    stored (its timestamp) no later than the answer arrived;
//	(c) no ack answer counts an offset in acked that an earlier ack
//	    answer counted, or that was dead-lettered, and nothing is handed
//	    out after an ack of it was answered acked, or by a fetch sent after
//	    its dead letter was stored;
//	(d) no two handouts of an offset carry the same deliveries (in any
//	    runs), each run's are above every earlier run's, they stay in
//	    1..max-deliveries, and its dead letter says max-deliveries;
//	(e) the committed offset of an ack or fetch answer is never past an
//	    offset not finished when it arrived, and never below one answered
//	    before its request was sent;
//	(l) the ack of an abandoned session after its lease ended is refused
//	    (409), never counted;
//
// and that every handed-out message is the log's message at its offset.
// The run must have exercised what it tests: redeliveries after a
// restart, abandoned sessions, dead letters and keyed messages behind an
// earlier one of their key. Dead letters may be stored twice (a kill
// between the dead-letter write and the record that the message is
// finished): reported as dead_letter_duplicates, not a violation.
func TestCrashSharedGroup(t *testing.T) {
	k := newSGRun(t, nil)
	rounds := sgRounds()
	t.Logf("rounds=%d seed=%d topic=%s group=%s keys=%d lease=%s max-deliveries=%d", rounds, k.seed, sgTopic, sgGroup, sgKeys, sgLease, sgMaxDeliveries)
	k.run(rounds)
}

// TestLazyFSPowerLossSharedGroup is TestCrashSharedGroup with the data
// directory on LazyFS (see TestLazyFSPowerLoss): odd rounds end in a power
// loss (the broker frozen, the LazyFS daemon killed: every write not
// fsynced is gone, then the broker killed and the root mounted again),
// even ones in kill -9. Same checks. 4 rounds, 16 with MMMQ_LONG=1 (or
// -crash.rounds N). It runs only with MMMQ_LAZYFS set; without it the test
// logs one line saying why and passes.
func TestLazyFSPowerLossSharedGroup(t *testing.T) {
	fs := mountLazyFS(t, "the shared group")
	if fs == nil {
		return
	}
	rounds := lazyRoundsCount(4, 16)
	k := newSGRun(t, fs)
	t.Logf("rounds=%d seed=%d on LazyFS %s (odd rounds: power loss; even: kill -9)", rounds, k.seed, k.fs.mnt)
	k.run(rounds)
}

// sgHand is one message handed out to a session, as its fetch answer
// arrived.
type sgHand struct {
	Run, Session int
	Offset       int64
	Deliveries   uint32
	ID, Key      string
	Poison       bool
	// FetchSentAt is when its fetch was sent; Arrived (the test's event
	// counter) and ArrivedAt when the answer had been read.
	FetchSentAt time.Time
	Arrived     int64
	ArrivedAt   time.Time
}

// sgResult is what an ack got back.
type sgResult int

const (
	sgOK      sgResult = iota // 200, acked counts the offset
	sgAlready                 // 200, already counts it
	sgRefused                 // 409: not leased to the session, or the session expired
	sgUnknown                 // no answer (the broker died)
	sgOther                   // any other answer: a violation
)

// sgAnswer is one ack (one offset), or one fetch answer (Offset -1,
// Result sgOK), with the committed offset it reported.
type sgAnswer struct {
	Run, Session int
	Offset       int64
	// Sent and Answered are event counters (Answered 0: never
	// answered); AnsweredAt the wall time of the answer.
	Sent, Answered int64
	AnsweredAt     time.Time
	Result         sgResult
	Committed      int64
	Fetch          bool
	// Zombie: an ack of an abandoned session, sent after its lease ended.
	Zombie bool
}

// sgRun is the state of one shared-group crash test.
type sgRun struct {
	lazyRounds
	t    *testing.T
	seed uint64
	rng  *rand.Rand
	root string

	mu       sync.Mutex
	seq      int64
	hands    []sgHand
	answers  []sgAnswer
	sent     []sentMsg
	bad      []string // found live
	sessions int
	nacks    int
	abandons int
	maxCons  int
	prev     map[string][]stored

	zombies   sync.WaitGroup // the acks of abandoned sessions
	committed atomic.Int64   // the highest committed offset answered in the current run
}

func newSGRun(t *testing.T, fs *lazyFS) *sgRun {
	k := &sgRun{lazyRounds: lazyRounds{t: t, fs: fs}, t: t, seed: uint64(time.Now().UnixNano()), prev: map[string][]stored{}}
	k.rng = rand.New(rand.NewPCG(k.seed, 0x73686172))
	k.root = dataRoot(t, fs)
	return k
}

func (k *sgRun) conf() brokerConf {
	return brokerConf{DataDir: k.root, SegmentMaxBytes: rkSegmentMaxBytes, GroupsLeaseTimeout: sgLease, GroupsMaxDeliveries: sgMaxDeliveries}
}

// start starts the broker (lazyRounds.start).
func (k *sgRun) start() *broker { return k.lazyRounds.start(k.conf) }

// tick is the next event number; k.mu must be held.
func (k *sgRun) tick() int64 {
	k.seq++
	return k.seq
}

func (k *sgRun) problem(format string, args ...any) {
	k.mu.Lock()
	k.bad = append(k.bad, fmt.Sprintf(format, args...))
	k.mu.Unlock()
}

func (k *sgRun) run(rounds int) {
	t := k.t
	deadline, limited := t.Deadline()
	deadline = deadline.Add(-2 * time.Minute)
	for r := 1; r <= rounds; r++ {
		if limited && time.Now().After(deadline) {
			t.Fatalf("out of time after %d rounds (raise go test -timeout)", r-1)
		}
		k.round(r)
	}
	final := rounds + 1
	b := k.start()
	k.verify(b, "after the last restart", false)
	k.drain(b, final)
	b.stop()
	// A clean restart hands out nothing: everything is finished on disk.
	b = k.start()
	if fr, err := sgFetch(b.base, "", 100, 0); err != nil || fr.Status != http.StatusOK || len(fr.Messages) > 0 || fr.Committed != int64(len(k.prev[sgTopic])) {
		t.Fatalf("fetch after the drain and a clean restart: %v, status %d, %d messages handed out, committed %d (high watermark %d)",
			err, fr.Status, len(fr.Messages), fr.Committed, len(k.prev[sgTopic]))
	}
	res := k.verify(b, "final", true)
	b.stop()
	k.summary(rounds, res)
}

// round is run r: start the broker (checking what the previous round
// left), run producers and consumers, and end it 300–1200 ms in: kill -9,
// or on LazyFS in odd rounds a power loss.
func (k *sgRun) round(r int) {
	b := k.start()
	if r > 1 {
		k.verify(b, fmt.Sprintf("round %d after restart", r), false)
	}
	k.committed.Store(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range sgProducers {
		prng := rand.New(rand.NewPCG(k.rng.Uint64(), uint64(g)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.produce(b, r, g, prng, stop)
		}()
	}
	n := 1 + k.rng.IntN(sgMaxConsumers)
	k.mu.Lock()
	k.maxCons = max(k.maxCons, n)
	k.mu.Unlock()
	for c := range n {
		prng := rand.New(rand.NewPCG(k.rng.Uint64(), uint64(100+c)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.consume(b, r, prng, stop, false)
		}()
	}
	time.Sleep(time.Duration(300+k.rng.IntN(901)) * time.Millisecond)
	k.end(b, r, nil)
	close(stop)
	wg.Wait()
	k.zombies.Wait()
}

func (k *sgRun) produce(b *broker, r, g int, prng *rand.Rand, stop <-chan struct{}) {
	for n := range sgPerProducer {
		select {
		case <-stop:
			return
		default:
		}
		m := sentMsg{Round: r, Topic: sgTopic, ID: fmt.Sprintf("r%03d-g%d-%04d", r, g, n), Level: "durable"}
		if prng.IntN(5) > 0 {
			m.Key = fmt.Sprintf("k%02d", prng.IntN(sgKeys))
		}
		m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "poison": prng.Float64() < sgPoisonRate, "pad": strings.Repeat("x", prng.IntN(100))})
		m.Res = publishKey(b.base, m.Topic, m.ID, m.Key, m.Content, m.Level)
		k.mu.Lock()
		k.sent = append(k.sent, m)
		k.mu.Unlock()
		if !m.Res.Replied {
			return // the broker is gone
		}
		if !m.Res.Ack {
			k.problem("round %d: publish %s NACK %d: %s", r, m.ID, m.Res.Status, m.Res.Err)
			return
		}
		time.Sleep(time.Duration(prng.IntN(3)) * time.Millisecond)
	}
}

// consume is one consumer of run r: sessions one after the other, each
// fetching until it is abandoned (not in drain) or expires. It returns
// when stop is closed.
func (k *sgRun) consume(b *broker, r int, prng *rand.Rand, stop <-chan struct{}, drain bool) {
	session, sno := "", 0
	k.mu.Lock()
	noTopic := len(k.prev[sgTopic]) == 0 // a 404 until the first publish creates it
	k.mu.Unlock()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if session == "" {
			k.mu.Lock()
			k.sessions++
			sno = k.sessions
			k.mu.Unlock()
		}
		sentAt := time.Now()
		k.mu.Lock()
		fsent := k.tick()
		k.mu.Unlock()
		fr, err := sgFetch(b.base, session, 1+prng.IntN(8), sgFetchWait)
		if err != nil {
			if fr.Status != 0 {
				k.problem("run %d: %v", r, err)
			}
			if !b.alive() {
				return
			}
			time.Sleep(5 * time.Millisecond)
			continue
		}
		switch fr.Status {
		case http.StatusOK:
		case http.StatusConflict:
			session = ""
			continue
		case http.StatusNotFound:
			if noTopic {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			fallthrough
		default:
			k.problem("run %d: fetch answered %d: %s", r, fr.Status, fr.Body)
			time.Sleep(20 * time.Millisecond)
			continue
		}
		session = fr.Session
		now := time.Now()
		k.mu.Lock()
		arrived := k.tick()
		k.answers = append(k.answers, sgAnswer{Run: r, Session: sno, Offset: -1, Sent: fsent, Answered: arrived, AnsweredAt: now, Committed: fr.Committed, Fetch: true})
		hs := make([]sgHand, 0, len(fr.Messages))
		for _, m := range fr.Messages {
			h := sgHand{Run: r, Session: sno, Offset: m.Offset, Deliveries: m.Deliveries, FetchSentAt: sentAt, Arrived: arrived, ArrivedAt: now}
			var v struct {
				ID      string `json:"id"`
				Key     string `json:"key"`
				Content struct {
					Poison bool `json:"poison"`
				} `json:"content"`
			}
			if err := json.Unmarshal(m.Message, &v); err != nil {
				k.bad = append(k.bad, fmt.Sprintf("run %d: offset %d handed out with message %q: %v", r, m.Offset, m.Message, err))
			}
			h.ID, h.Key, h.Poison = v.ID, v.Key, v.Content.Poison
			hs = append(hs, h)
		}
		k.hands = append(k.hands, hs...)
		k.mu.Unlock()
		k.noteCommitted(fr.Committed)
		if !drain && len(hs) > 0 && prng.Float64() < sgAbandonRate {
			k.mu.Lock()
			k.abandons++
			k.mu.Unlock()
			{
				// Comes back after its lease ended: the ack must be
				// refused (unless the broker was killed meanwhile).
				old, oldNo, off := session, sno, hs[0].Offset
				k.zombies.Add(1)
				go func() {
					defer k.zombies.Done()
					time.Sleep(sgLease + 100*time.Millisecond)
					k.ack(b, r, oldNo, old, off, true)
				}()
			}
			session = ""
			continue
		}
		for _, h := range hs {
			if h.Poison || !drain && prng.Float64() < sgNackRate {
				retry := "0s"
				if prng.IntN(2) == 0 {
					retry = "20ms"
				}
				status, body, err := sgPost(b.base, "nack", session, map[string]any{"offsets": []int64{h.Offset}, "retryAfter": retry})
				k.mu.Lock()
				k.nacks++
				k.mu.Unlock()
				if err == nil && status != http.StatusOK && status != http.StatusConflict {
					k.problem("run %d: nack of %d answered %d: %s", r, h.Offset, status, body)
				}
				continue
			}
			k.ack(b, r, sno, session, h.Offset, false)
		}
	}
}

// ack acknowledges off alone for session (zombie: abandoned, its lease
// ended) and records the answer.
func (k *sgRun) ack(b *broker, r, sno int, session string, off int64, zombie bool) {
	k.mu.Lock()
	a := sgAnswer{Run: r, Session: sno, Offset: off, Sent: k.tick(), Committed: -1, Zombie: zombie}
	k.mu.Unlock()
	status, body, err := sgPost(b.base, "ack", session, map[string]any{"offsets": []int64{off}})
	now := time.Now()
	var v struct {
		Committed int64 `json:"committed"`
		Acked     *int  `json:"acked"`
		Already   *int  `json:"already"`
	}
	switch {
	case err != nil:
		a.Result = sgUnknown
	case status == http.StatusConflict:
		a.Result = sgRefused
	case status != http.StatusOK || json.Unmarshal(body, &v) != nil || v.Acked == nil || v.Already == nil || *v.Acked+*v.Already != 1:
		a.Result = sgOther
		k.problem("run %d: ack of %d answered %d: %s", r, off, status, body)
	case *v.Acked == 1:
		a.Result, a.Committed = sgOK, v.Committed
	default:
		a.Result, a.Committed = sgAlready, v.Committed
	}
	k.mu.Lock()
	if a.Result != sgUnknown {
		a.Answered, a.AnsweredAt = k.tick(), now
	}
	k.answers = append(k.answers, a)
	k.mu.Unlock()
	if a.Committed >= 0 {
		k.noteCommitted(a.Committed)
	}
}

func (k *sgRun) noteCommitted(c int64) {
	for {
		old := k.committed.Load()
		if c <= old || k.committed.CompareAndSwap(old, c) {
			return
		}
	}
}

// drain runs 3 consumers that ack everything but the poison messages
// until the committed offset is the high watermark (at most 60 s).
func (k *sgRun) drain(b *broker, run int) {
	hw := int64(len(k.prev[sgTopic]))
	k.committed.Store(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 3 {
		prng := rand.New(rand.NewPCG(k.rng.Uint64(), uint64(200+c)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			k.consume(b, run, prng, stop, true)
		}()
	}
	by := time.Now().Add(60 * time.Second)
	for k.committed.Load() < hw && time.Now().Before(by) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if c := k.committed.Load(); c != hw {
		k.t.Fatalf("the group did not drain within 60s: committed %d, high watermark %d\n%s", c, hw, b.logTail())
	}
}

// sgFetchAnswer is a fetch's answer.
type sgFetchAnswer struct {
	Status    int
	Body      []byte
	Session   string `json:"session"`
	Committed int64  `json:"committed"`
	Messages  []struct {
		Offset     int64           `json:"offset"`
		Deliveries uint32          `json:"deliveries"`
		Message    json.RawMessage `json:"message"`
	} `json:"messages"`
}

// sgFetch fetches up to limit messages in mode shared for session ("": a
// new one), waiting up to wait.
func sgFetch(base, session string, limit int, wait time.Duration) (sgFetchAnswer, error) {
	var fr sgFetchAnswer
	url := fmt.Sprintf("%s/topics/%s/groups/%s/fetch?mode=shared&max=%d&wait=%d", base, sgTopic, sgGroup, limit, wait.Milliseconds())
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		return fr, err
	}
	if session != "" {
		req.Header.Set("mmmq-session", session)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return fr, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fr, err
	}
	fr.Status, fr.Body = resp.StatusCode, data
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(data, &fr); err != nil {
			return fr, fmt.Errorf("fetch answer %q: %w", data, err)
		}
		if h := resp.Header.Get("mmmq-session"); h != fr.Session {
			return fr, fmt.Errorf("fetch answer: mmmq-session header %q, body session %q", h, fr.Session)
		}
	}
	return fr, nil
}

// sgPost posts body to the group's ack or nack for session.
func sgPost(base, what, session string, body any) (int, []byte, error) {
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/topics/%s/groups/%s/%s", base, sgTopic, sgGroup, what), bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("mmmq-session", session)
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, data, err
}

// sgResultCounts is what verify counted.
type sgResultCounts struct {
	Tally                                   tally
	Unfinished                              int // offsets of the final log never finished
	Handed, Redelivered, RedeliveredRestart int
	DeadLettered, DLDuplicates              int
	Acks, AcksUnknown, AcksRefused          int
	Zombies, ZombiesRefused                 int // acks after the lease ended; those answered 409
	LeaseViolations                         int // those answered 200
	KeyedBehind                             int // handouts of a keyed message with an earlier one of its key
	FinishedTwice, HandedFinished           int // (c): an ack counted twice; a handout after the finish
	OrderViolations                         int
	DeliveriesDown, CommittedPast           int
}

// verify reads the topic and the dead-letter topic back and runs every
// check; final adds the completeness check.
func (k *sgRun) verify(b *broker, label string, final bool) sgResultCounts {
	t := k.t
	t.Helper()
	cur := map[string][]stored{}
	for _, tp := range []string{sgTopic, sgDeadLetter} {
		l, err := readAll(b.base, tp)
		if err != nil {
			t.Fatalf("%s: read back %s: %v", label, tp, err)
		}
		cur[tp] = l
	}
	k.mu.Lock()
	sent := slices.Clone(k.sent)
	hands := slices.Clone(k.hands)
	answers := slices.Clone(k.answers)
	live := slices.Clone(k.bad)
	k.mu.Unlock()
	var res sgResultCounts
	bad := slices.Clone(live)
	bad = append(bad, checkPrefix(k.prev, cur)...)
	bad = append(bad, checkAcked(sent, map[string][]stored{sgTopic: cur[sgTopic]}, &res.Tally)...)
	bad = append(bad, checkLogIDs(sent, map[string][]stored{sgTopic: cur[sgTopic]})...)
	bad = append(bad, checkSentKeys(sent, cur)...)
	var cat map[string]int
	bad, cat = sgCheck(bad, cur[sgTopic], cur[sgDeadLetter], hands, answers, final, &res)
	res.FinishedTwice, res.HandedFinished, res.OrderViolations = cat["c"], cat["c'"], cat["b"]
	res.DeliveriesDown, res.CommittedPast, res.Unfinished = cat["d"], cat["e"], cat["a"]
	res.LeaseViolations = cat["l"]
	if len(bad) > 0 {
		k.summary(0, res)
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("... and %d more", len(bad)-30))
		}
		t.Fatalf("%s: %d violations (seed %d, data %s):\n  %s", label, len(bad), k.seed, k.root, strings.Join(bad, "\n  "))
	}
	k.prev = cur
	return res
}

// sgCheck runs checks (a)–(e) of TestCrashSharedGroup on the log l, its
// dead letters dl, the handouts and the answers; it appends what it finds
// to bad and counts it per check letter.
func sgCheck(bad []string, l, dl []stored, hands []sgHand, answers []sgAnswer, final bool, res *sgResultCounts) ([]string, map[string]int) {
	cat := map[string]int{}
	add := func(c string, format string, args ...any) {
		cat[c]++
		bad = append(bad, fmt.Sprintf("check ("+c+"): "+format, args...))
	}
	n := int64(len(l))
	const never = math.MaxInt64
	// Dead letters: the first one's timestamp per offset.
	dlAt := map[int64]int64{}
	for i, s := range dl {
		off, err := strconv.ParseInt(s.Headers["mmmq-dl-offset"], 10, 64)
		if err != nil || s.Headers["mmmq-dl-group"] != sgGroup || s.Headers["mmmq-dl-topic"] != sgTopic {
			bad = append(bad, fmt.Sprintf("dead letter %d: headers %v", i, s.Headers))
			continue
		}
		if a := s.Headers["mmmq-dl-attempts"]; a != strconv.Itoa(sgMaxDeliveries) {
			add("d", "offset %d dead-lettered with %s deliveries, max-deliveries %d", off, a, sgMaxDeliveries)
		}
		var v struct {
			Timestamp int64 `json:"timestamp"`
		}
		_ = json.Unmarshal(s.Raw, &v)
		if at, ok := dlAt[off]; ok {
			res.DLDuplicates++
			dlAt[off] = min(at, v.Timestamp)
		} else {
			dlAt[off] = v.Timestamp
		}
		if off >= n {
			bad = append(bad, fmt.Sprintf("dead letter %d: offset %d past the log (%d)", i, off, n))
		} else if s.Headers["mmmq-dl-original-id"] != l[off].ID {
			bad = append(bad, fmt.Sprintf("dead letter %d of offset %d: original id %q, the log's %q", i, off, s.Headers["mmmq-dl-original-id"], l[off].ID))
		}
	}
	res.DeadLettered = len(dlAt)
	byOff := map[int64][]sgHand{}
	for _, h := range hands {
		byOff[h.Offset] = append(byOff[h.Offset], h)
		if h.Offset < 0 || h.Offset >= n {
			bad = append(bad, fmt.Sprintf("run %d: offset %d handed out, past the log (%d)", h.Run, h.Offset, n))
			continue
		}
		if h.ID != l[h.Offset].ID {
			bad = append(bad, fmt.Sprintf("run %d: offset %d handed out with id %q, the log's %q", h.Run, h.Offset, h.ID, l[h.Offset].ID))
		}
	}
	// fseq: when each offset was finished by an ack (the ack's Sent); an
	// unanswered ack counts when nothing handed the offset out after it.
	fseq := map[int64]int64{}
	okAck := map[int64][]sgAnswer{}
	for _, a := range answers {
		if a.Fetch {
			continue
		}
		res.Acks++
		if a.Zombie {
			res.Zombies++
			if a.Result == sgOK || a.Result == sgAlready {
				add("l", "offset %d acked (run %d) by session %d after it was abandoned and its lease ended", a.Offset, a.Run, a.Session)
			} else {
				if a.Result == sgRefused {
					res.ZombiesRefused++
				}
				continue // finishes nothing
			}
		}
		switch a.Result {
		case sgRefused:
			res.AcksRefused++
			continue
		case sgOther:
			continue
		case sgUnknown:
			res.AcksUnknown++
			if slices.ContainsFunc(byOff[a.Offset], func(h sgHand) bool { return h.Arrived > a.Sent }) {
				continue
			}
		case sgOK:
			okAck[a.Offset] = append(okAck[a.Offset], a)
		}
		if f, ok := fseq[a.Offset]; !ok || a.Sent < f {
			fseq[a.Offset] = a.Sent
		}
	}
	// (c) finished twice; handed out after finished.
	for off, as := range okAck {
		if len(as) > 1 {
			add("c", "offset %d counted in acked by %d ack answers (runs/sessions %v)", off, len(as), sgWho(as))
		}
		if _, ok := dlAt[off]; ok {
			add("c", "offset %d counted in acked (run %d) and dead-lettered", off, as[0].Run)
		}
		first := slices.MinFunc(as, func(a, b sgAnswer) int { return int(a.Answered - b.Answered) })
		for _, h := range byOff[off] {
			if h.Arrived > first.Answered {
				add("c'", "offset %d handed out (run %d, deliveries %d) after an ack answered acked (run %d)", off, h.Run, h.Deliveries, first.Run)
			}
		}
	}
	for off, at := range dlAt {
		for _, h := range byOff[off] {
			if h.FetchSentAt.UnixMilli() > at {
				add("c'", "offset %d handed out (run %d, deliveries %d) by a fetch sent after its dead letter was stored", off, h.Run, h.Deliveries)
			}
		}
	}
	// (d) deliveries.
	for off, hs := range byOff {
		seen := map[uint32]int{} // deliveries → the run that handed it out so
		prevMax, runMax, run := uint32(0), uint32(0), 0
		slices.SortStableFunc(hs, func(a, b sgHand) int { return a.Run - b.Run })
		for i, h := range hs {
			if h.Run != run {
				prevMax, run = max(prevMax, runMax), h.Run
				runMax = 0
			}
			if i > 0 {
				res.Redelivered++
				if hs[0].Run < h.Run {
					res.RedeliveredRestart++
				}
			}
			switch {
			case h.Deliveries < 1 || h.Deliveries > sgMaxDeliveries:
				add("d", "offset %d handed out with deliveries %d (run %d), outside 1..%d", off, h.Deliveries, h.Run, sgMaxDeliveries)
			case seen[h.Deliveries] > 0:
				add("d", "offset %d handed out with deliveries %d in run %d, and with the same count in run %d", off, h.Deliveries, h.Run, seen[h.Deliveries])
			case h.Deliveries <= prevMax:
				add("d", "offset %d handed out with deliveries %d in run %d after %d in an earlier run", off, h.Deliveries, h.Run, prevMax)
			}
			seen[h.Deliveries] = h.Run
			runMax = max(runMax, h.Deliveries)
		}
	}
	res.Handed = len(hands)
	// (b) key order: for each offset, the latest finish (ack Sent) of the
	// earlier offsets of its key not dead-lettered (never: one never
	// finished) and the latest dead-letter timestamp of the dead-lettered
	// ones.
	needSeq := make([]int64, n)
	needDL := make([]int64, n)
	type line struct{ seq, dl int64 }
	keys := map[string]line{}
	for i := range l {
		off := int64(i)
		key, _ := storedKey(l[i].Raw)
		if key == "" {
			needSeq[off], needDL[off] = 0, 0
			continue
		}
		ln := keys[key]
		needSeq[off], needDL[off] = ln.seq, ln.dl
		if at, ok := dlAt[off]; ok {
			ln.dl = max(ln.dl, at)
		} else if f, ok := fseq[off]; ok {
			ln.seq = max(ln.seq, f)
		} else {
			ln.seq = never
		}
		keys[key] = ln
	}
	for _, h := range hands {
		if h.Offset < 0 || h.Offset >= n || h.Key == "" {
			continue
		}
		if needSeq[h.Offset] > 0 || needDL[h.Offset] > 0 {
			res.KeyedBehind++
		}
		if h.Arrived > needSeq[h.Offset] && h.ArrivedAt.UnixMilli() >= needDL[h.Offset] {
			continue
		}
		add("b", "key %q: offset %d handed out (run %d, deliveries %d) before an earlier offset of the key was finished: %s",
			h.Key, h.Offset, h.Run, h.Deliveries, sgEarlier(l, h, fseq, dlAt))
	}
	// (e) committed: prefix maxima of the finish times.
	prefSeq := make([]int64, n+1)
	prefDL := make([]int64, n+1)
	for i := range l {
		off := int64(i)
		s, d := prefSeq[i], prefDL[i]
		if at, ok := dlAt[off]; ok {
			d = max(d, at)
		} else if f, ok := fseq[off]; ok {
			s = max(s, f)
		} else {
			s = never
		}
		prefSeq[i+1], prefDL[i+1] = s, d
	}
	var done []sgAnswer // answered, with a committed offset
	for _, a := range answers {
		if a.Answered == 0 || (a.Result != sgOK && a.Result != sgAlready) {
			continue
		}
		done = append(done, a)
		c := a.Committed
		if c < 0 || c > n {
			add("e", "committed %d answered (run %d), log of %d", c, a.Run, n)
			continue
		}
		if prefSeq[c] >= a.Answered || prefDL[c] > a.AnsweredAt.UnixMilli() {
			add("e", "committed %d answered (run %d, %s) past an offset not finished then: %s", c, a.Run, sgWhat(a), sgFirstUnfinished(c, a, fseq, dlAt))
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i].Answered < done[j].Answered })
	pm := make([]int64, len(done)+1)
	for i, a := range done {
		pm[i+1] = max(pm[i], a.Committed)
	}
	for _, a := range done {
		j := sort.Search(len(done), func(i int) bool { return done[i].Answered >= a.Sent })
		if pm[j] > a.Committed {
			add("e", "committed %d answered (run %d, %s), below %d answered before it was asked", a.Committed, a.Run, sgWhat(a), pm[j])
		}
	}
	if final {
		for i := range l {
			off := int64(i)
			_, dead := dlAt[off]
			if _, ok := fseq[off]; !ok && !dead {
				add("a", "offset %d (id %s) never finished: no ack of it answered (or unanswered and final) and not dead-lettered", off, l[i].ID)
			}
		}
	}
	return bad, cat
}

func sgWhat(a sgAnswer) string {
	if a.Fetch {
		return "a fetch"
	}
	return fmt.Sprintf("the ack of %d", a.Offset)
}

func sgWho(as []sgAnswer) []string {
	var w []string
	for _, a := range as {
		w = append(w, fmt.Sprintf("%d/%d", a.Run, a.Session))
	}
	return w
}

// sgEarlier names the earlier offsets of h's key not finished when h
// arrived.
func sgEarlier(l []stored, h sgHand, fseq, dlAt map[int64]int64) string {
	var out []string
	for i := int64(0); i < h.Offset; i++ {
		if key, _ := storedKey(l[i].Raw); key != h.Key {
			continue
		}
		if at, ok := dlAt[i]; ok {
			if at > h.ArrivedAt.UnixMilli() {
				out = append(out, fmt.Sprintf("%d (dead-lettered later)", i))
			}
		} else if f, ok := fseq[i]; !ok {
			out = append(out, fmt.Sprintf("%d (never acked)", i))
		} else if f >= h.Arrived {
			out = append(out, fmt.Sprintf("%d (acked later)", i))
		}
		if len(out) >= 5 {
			break
		}
	}
	return strings.Join(out, ", ")
}

// sgFirstUnfinished names the first offset below c not finished when a
// was answered.
func sgFirstUnfinished(c int64, a sgAnswer, fseq, dlAt map[int64]int64) string {
	for i := int64(0); i < c; i++ {
		if at, ok := dlAt[i]; ok {
			if at > a.AnsweredAt.UnixMilli() {
				return fmt.Sprintf("offset %d dead-lettered later", i)
			}
		} else if f, ok := fseq[i]; !ok {
			return fmt.Sprintf("offset %d never acked", i)
		} else if f >= a.Answered {
			return fmt.Sprintf("offset %d acked later", i)
		}
	}
	return "?"
}

// summary logs the summary line and checks that the run exercised what it
// tests (rounds 0: a failing run's counts, logged only).
func (k *sgRun) summary(rounds int, res sgResultCounts) {
	t := k.t
	t.Helper()
	k.mu.Lock()
	sessions, nacks, abandons, maxCons := k.sessions, k.nacks, k.abandons, k.maxCons
	k.mu.Unlock()
	line := fmt.Sprintf("rounds=%d kills=%d power_losses=%d acked_durable=%d lost=%d handed_out=%d redeliveries=%d redelivered_after_restart=%d dead_lettered=%d dead_letter_duplicates=%d acks=%d acks_unanswered=%d acks_refused=%d acks_after_lease=%d refused_after_lease=%d lease_violations=%d nacks=%d sessions=%d abandoned=%d max_consumers=%d keyed_behind=%d finished_twice=%d handed_out_after_finished=%d order_violations=%d deliveries_down=%d committed_past_unfinished=%d",
		rounds, k.kills, k.powerLosses, res.Tally.AckedDurable, res.Tally.LostDurable+res.Unfinished, res.Handed, res.Redelivered, res.RedeliveredRestart,
		res.DeadLettered, res.DLDuplicates, res.Acks, res.AcksUnknown, res.AcksRefused, res.Zombies, res.ZombiesRefused, res.LeaseViolations, nacks, sessions, abandons, maxCons, res.KeyedBehind,
		res.FinishedTwice, res.HandedFinished, res.OrderViolations, res.DeliveriesDown, res.CommittedPast)
	if k.fs != nil {
		line += fmt.Sprintf(" lazyfs_stalls=%d lazyfs_truncate_enoent=%d", k.stalls, k.spurious)
	}
	t.Log(line)
	fmt.Println("crashtest:", line, "test="+t.Name())
	if rounds == 0 {
		return
	}
	switch {
	case res.Tally.AckedDurable == 0 || res.Handed == 0:
		t.Fatalf("the load did nothing: %s", line)
	case res.RedeliveredRestart == 0 || abandons == 0 || res.DeadLettered == 0 || res.KeyedBehind == 0:
		t.Fatalf("not exercised: redeliveries after a restart, abandoned sessions, dead letters and keyed messages behind an earlier one must all be > 0: %s", line)
	}
}
