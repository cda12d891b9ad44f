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
	rkProducers       = 6
	rkMaxPerProducer  = 4000 // publishes per producer per round, at most
	rkSegmentMaxBytes = 4096 // small: a rotation every ~20 messages
	rkFirstRoundAcks  = 200  // answered publishes before the first kill: ~10 rotations
)

func rkRounds() int {
	if *roundsFlag > 0 {
		return *roundsFlag
	}
	if os.Getenv("MMMQ_LONG") != "" {
		return 100
	}
	return 5
}

// rkWorkers are the (dispatcher, topic) pairs that exist.
func rkWorkers() []wkey {
	var ks []wkey
	for _, t := range rkTopics {
		ks = append(ks, wkey{"d-all", t})
		if strings.Count(t, ".") == 1 {
			ks = append(ks, wkey{"d-one", t})
		}
		if t == "ct.a" {
			ks = append(ks, wkey{"d-int", t})
		}
	}
	return ks
}

// readCheckpoints reads every worker's checkpoint file straight from disk
// (8 bytes, int64 BE next offset; missing = 0).
func readCheckpoints(t testing.TB, root string) map[wkey]int64 {
	out := map[wkey]int64{}
	for _, k := range rkWorkers() {
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
// dispatchers and checks that every offset was delivered.
func TestCrashRandomKill(t *testing.T) {
	runRandomKill(t, rkLoad{Plain: rkProducers})
}

// rkLoad is the producers of one run of the random-kill harness.
type rkLoad struct {
	// Plain producers publish at random ack levels and never retry: a
	// publish without a reply is left as it is.
	Plain int
	// Retrying producers (retrier) publish DURABLE and publish a message
	// that got no reply or a 503 again, same id and content, after the
	// restart, until it is acknowledged.
	Retrying int
}

// rkResult is what the checks of a random-kill run counted at the end.
type rkResult struct {
	Tally tally
	Retry retryTally
}

// runRandomKill is the harness of TestCrashRandomKill with the producers
// of load. Every check runs after every restart and fails the test at
// once; the counters of the final check are returned and printed.
func runRandomKill(t *testing.T, load rkLoad) rkResult {
	rounds := rkRounds()
	seed := uint64(time.Now().UnixNano())
	t.Logf("rounds=%d seed=%d producers: plain=%d retrying=%d", rounds, seed, load.Plain, load.Retrying)
	rng := rand.New(rand.NewPCG(seed, 0x6d6d6d71))
	dir := t.TempDir()
	root := filepath.Join(dir, "data")
	cons := &consumer{}
	var (
		sent    []sentMsg
		prev    = map[string][]stored{}
		cpStart = map[int]map[wkey]int64{}
		cpEnd   = map[int]map[wkey]int64{}
	)
	// The retrying producers outlive the rounds: a message without an
	// answer waits in one for the next run.
	retriers := make([]*retrier, load.Retrying)
	for g := range retriers {
		retriers[g] = &retrier{g: g}
	}
	// Stop with a clear failure 2 minutes before go test's -timeout would
	// kill the test without a report (a run without -timeout has no limit).
	deadline, limited := t.Deadline()
	deadline = deadline.Add(-2 * time.Minute)
	intervalKeys := map[wkey]bool{{"d-int", "ct.a"}: true}
	began := time.Now()
	conf := func(round int) brokerConf {
		port, _ := cons.listen(t, round)
		ds := make([]dispatcherConf, len(rkDispatchers))
		for i, d := range rkDispatchers {
			d.Port = port
			ds[i] = d
		}
		return brokerConf{DataDir: root, SegmentMaxBytes: rkSegmentMaxBytes, Dispatchers: ds}
	}
	// verify reads the whole log back and runs every check; final adds the
	// completeness checks (every offset delivered, every retrying
	// producer's message acknowledged).
	verify := func(b *broker, label string, final bool) rkResult {
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
		bad = append(bad, checkPrefix(prev, cur)...)
		bad = append(bad, checkAcked(sent, cur, tl)...)
		bad = append(bad, checkLogIDs(sent, cur)...)
		bad = append(bad, checkRetries(sent, cur, final, &res.Retry)...)
		bad = append(bad, checkDeliveries(cons.deliveries(), cur, cpStart, cpEnd, intervalKeys, tl)...)
		if final {
			bad = append(bad, checkComplete(cons.deliveries(), cur, rkWorkers())...)
		}
		if len(bad) > 0 {
			if len(bad) > 30 {
				bad = append(bad[:30], fmt.Sprintf("... and %d more", len(bad)-30))
			}
			t.Fatalf("%s: %d violations (seed %d, data %s):\n  %s", label, len(bad), seed, root, strings.Join(bad, "\n  "))
		}
		prev = cur
		return res
	}

	for r := 1; r <= rounds; r++ {
		if limited && time.Now().After(deadline) {
			t.Fatalf("out of time after %d rounds (raise go test -timeout)", r-1)
		}
		cpStart[r] = readCheckpoints(t, root)
		b := startBroker(t, conf(r))
		if r > 1 {
			res := verify(b, fmt.Sprintf("round %d after restart", r), false)
			if (r-1)%50 == 0 { // progress of long runs (go test -v streams it)
				tl, rt := res.Tally, res.Retry
				t.Logf("%d of %d rounds after %s: acked durable %d, lost durable %d, delivered %d, retries %d (duplicate %d, stored %d), ids stored twice %d",
					r-1, rounds, time.Since(began).Round(time.Second), tl.AckedDurable, tl.LostDurable, tl.Delivered,
					rt.Retries, rt.RetryDuplicate, rt.RetryStored, rt.StoredTwice)
			}
		}
		killAfter := time.Duration(10+rng.IntN(291)) * time.Millisecond
		var (
			mu   sync.Mutex
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
					mu.Lock()
					sent = append(sent, m)
					mu.Unlock()
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
					mu.Lock()
					sent = append(sent, m)
					mu.Unlock()
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
		go func() { wg.Wait(); close(finished) }()
		time.Sleep(killAfter)
		if r == 1 {
			select {
			case <-enough:
			case <-finished: // every producer ended (a failure is reported)
			}
		}
		b.kill()
		close(stop)
		wg.Wait()
		cpEnd[r] = readCheckpoints(t, root)
	}
	// Final run: check, let both dispatchers drain, stop cleanly, check
	// that everything was delivered.
	final := rounds + 1
	cpStart[final] = readCheckpoints(t, root)
	b := startBroker(t, conf(final))
	verify(b, "after the last restart", false)
	// The retrying producers publish what is still unanswered, once more.
	if retried := publishPending(t, retriers, b, final, &sent); retried > 0 {
		verify(b, "after the last retries", false)
	}
	hw := map[string]int{}
	for tp, l := range prev {
		hw[tp] = len(l)
	}
	drainBy := time.Now().Add(60 * time.Second)
	for {
		cp := readCheckpoints(t, root)
		done := true
		for _, k := range rkWorkers() {
			done = done && cp[k] >= int64(hw[k.T])
		}
		if done {
			break
		}
		if time.Now().After(drainBy) {
			t.Fatalf("dispatchers did not drain within 60s: checkpoints %v, high watermarks %v", cp, hw)
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.stop()
	cpEnd[final] = readCheckpoints(t, root)
	b = startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: rkSegmentMaxBytes})
	res := verify(b, "final", true)
	b.stop()
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
	t.Log(line)
	fmt.Println("crashtest:", line)
	return res
}
