package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rtTopics are the topics of TestCrashRandomKillRetention.
var rtTopics = []string{"rt.a", "rt.b"}

// TestCrashRandomKillRetention is the randomized kill -9 harness with
// retention deleting head segments under publish load (4 KiB segments,
// max-bytes 16 KiB, checked every 20 ms): R rounds of start → concurrent
// WRITTEN and DURABLE producers on two topics → SIGKILL once a random
// number (rtMinAnswered to rtMinAnswered+rtAnsweredSpread) of publishes
// were answered ACK, each topic at least once, and in the last round once
// retention has also deleted something → restart. The kill points are
// counts of answered publishes, not wall-clock windows, so a loaded
// machine only makes the rounds slower. After every restart the broker
// must start (recovery accepts every state a deletion can leave), every
// topic with an acknowledged message is listed, the start offset never
// moves back, and every acknowledged message at or after the start offset
// reads back unchanged at its offset. It runs once per index-sync mode
// (rkModes).
func TestCrashRandomKillRetention(t *testing.T) {
	forEachMode(t, runRetentionKill)
}

const (
	// rtMinAnswered and rtAnsweredSpread: a round is killed after
	// rtMinAnswered + [0, rtAnsweredSpread] publishes answered ACK. About
	// 60 messages fill a topic's max-bytes, so every round gives
	// retention something to delete.
	rtMinAnswered    = 150
	rtAnsweredSpread = 350
	// rtRetentionWait bounds the last round's wait for retention's first
	// deletion (checked every 20 ms by the broker) before the kill.
	rtRetentionWait = 60 * time.Second
)

// retentionCheck is the state the rounds of runRetentionKill check against.
type retentionCheck struct {
	seed      uint64
	mu        sync.Mutex
	sent      []sentMsg
	lastStart map[string]int64
	checked   int   // acknowledged messages read back at their offset
	below     int   // acknowledged messages below the start offset (deleted)
	answered  []int // per round: publishes answered ACK before the kill
}

func (c *retentionCheck) record(m sentMsg) {
	c.mu.Lock()
	c.sent = append(c.sent, m)
	c.mu.Unlock()
}

// acked is the number of acknowledged publishes to topic so far.
func (c *retentionCheck) acked(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.sent {
		if m.Topic == topic && m.Res.Ack {
			n++
		}
	}
	return n
}

// killTrigger closes fire once at least n publishes were answered ACK,
// at least one to each topic of rtTopics.
type killTrigger struct {
	n        int64
	total    atomic.Int64
	perTopic []atomic.Int64 // by index in rtTopics
	once     sync.Once
	fire     chan struct{}
}

func newKillTrigger(n int) *killTrigger {
	return &killTrigger{n: int64(n), perTopic: make([]atomic.Int64, len(rtTopics)), fire: make(chan struct{})}
}

// answered counts one publish to topic answered ACK.
func (k *killTrigger) answered(topic string) {
	for i, tp := range rtTopics {
		if tp == topic {
			k.perTopic[i].Add(1)
		}
	}
	if k.total.Add(1) < k.n {
		return
	}
	for i := range k.perTopic {
		if k.perTopic[i].Load() == 0 {
			return
		}
	}
	k.once.Do(func() { close(k.fire) })
}

func runRetentionKill(t *testing.T, mode indexSyncMode) {
	rounds := rkRounds()
	c := &retentionCheck{seed: uint64(time.Now().UnixNano()), lastStart: map[string]int64{}}
	t.Logf("rounds=%d seed=%d index-sync=%s", rounds, c.seed, mode.IndexSync)
	rng := rand.New(rand.NewPCG(c.seed, 0x72657465))
	root := filepath.Join(t.TempDir(), "data")
	conf := brokerConf{DataDir: root, SegmentMaxBytes: 4096, RetentionMaxBytes: 16384}
	stats := &modeStats{mode: mode}
	for r := 1; r <= rounds; r++ {
		b := startBroker(t, mode.conf(conf, r))
		stats.started(b)
		if r > 1 {
			c.verify(t, b, fmt.Sprintf("round %d after restart", r))
		}
		kt := newKillTrigger(rtMinAnswered + rng.IntN(rtAnsweredSpread+1))
		var wg sync.WaitGroup
		stop := make(chan struct{})
		finished := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go retentionProducer(t, b, r, g, rand.New(rand.NewPCG(rng.Uint64(), uint64(g))), c, kt.answered, stop, &wg)
		}
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-kt.fire:
		case <-finished: // every producer ended: a failure is reported
		}
		if r == rounds && !t.Failed() {
			c.awaitRetention(t, b, r, kt)
		}
		c.answered = append(c.answered, int(kt.total.Load()))
		counts := stats.beforeKill(t, b)
		b.kill()
		close(stop)
		wg.Wait()
		stats.afterKill(t, b, root, r, counts)
		if t.Failed() {
			t.FailNow()
		}
	}
	b := startBroker(t, mode.conf(brokerConf{DataDir: root, SegmentMaxBytes: 4096}, rounds+1))
	stats.started(b)
	c.verify(t, b, "final")
	b.stop()
	if c.lastStart["rt.a"]+c.lastStart["rt.b"] == 0 || c.checked == 0 {
		t.Fatalf("retention deleted nothing or nothing was checked: start offsets %v after the final restart; "+
			"%d acknowledged messages read back unchanged at or after them, %d below them (deleted by retention), none lost; "+
			"publishes answered ACK before each kill %v (seed %d)",
			c.lastStart, c.checked, c.below, c.answered, c.seed)
	}
	line := fmt.Sprintf("rounds=%d answered_before_kill=%v start_offsets=%v acked_checks_at_or_after_start=%d acked_below_start=%d lost=0 %s test=%s",
		rounds, c.answered, c.lastStart, c.checked, c.below, stats, t.Name())
	t.Log(line)
	fmt.Println("crashtest:", line)
}

// awaitRetention waits, the producers still publishing, until a start
// offset of b's topics is above 0 (retention deleted a segment), for at
// most rtRetentionWait, so that the run always checks a deletion that
// survived kill -9 and restarts.
func (c *retentionCheck) awaitRetention(t *testing.T, b *broker, r int, kt *killTrigger) {
	t.Helper()
	deadline := time.Now().Add(rtRetentionWait)
	for {
		starts := topicStarts(t, b)
		if starts["rt.a"]+starts["rt.b"] > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: retention deleted nothing within %s of the kill point (%d publishes answered ACK this round; start offsets %v); "+
				"nothing was checked for loss in this round yet (seed %d)", r, rtRetentionWait, kt.total.Load(), starts, c.seed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// topicStarts returns the start offset of every topic of b (GET /topics).
func topicStarts(t *testing.T, b *broker) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, tp := range listTopics(t, b) {
		out[tp.Name] = tp.StartOffset
	}
	return out
}

// retentionProducer publishes WRITTEN and DURABLE messages to random
// topics of rtTopics until stop is closed or the broker is gone.
// answered is called for each publish answered ACK.
func retentionProducer(t *testing.T, b *broker, r, g int, prng *rand.Rand, c *retentionCheck, answered func(topic string), stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		m := sentMsg{Round: r, Topic: rtTopics[prng.IntN(len(rtTopics))], ID: fmt.Sprintf("r%03d-g%d-%05d", r, g, n),
			Level: []string{"written", "durable"}[prng.IntN(2)]}
		m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "pad": strings.Repeat("x", 100+prng.IntN(100))})
		m.Res = publish(b.base, m.Topic, m.ID, m.Content, m.Level)
		c.record(m)
		if !m.Res.Replied {
			return
		}
		if !m.Res.Ack {
			t.Errorf("round %d: publish %s of %s at %s answered NACK %d: %s (the producer stops; nothing acknowledged was lost by it)",
				r, m.ID, m.Topic, m.Level, m.Res.Status, m.Res.Err)
			return
		}
		answered(m.Topic)
	}
}

// verify reads every topic from its start offset: a topic with an
// acknowledged message is listed, its start offset never moves back, and
// every acknowledged message at or after the start offset is at its
// offset with its id and content. A failure says what was checked and
// whether an acknowledged message was lost.
func (c *retentionCheck) verify(t *testing.T, b *broker, label string) {
	t.Helper()
	listed := topicStarts(t, b)
	for _, tp := range rtTopics {
		if _, ok := listed[tp]; !ok {
			if n := c.acked(tp); n > 0 {
				t.Fatalf("%s: topic %s not in GET /topics, but %d publishes to it were acknowledged: LOST (seed %d)", label, tp, n, c.seed)
			}
			continue // never acknowledged: nothing to check
		}
		start, l := readFromStart(t, b, tp)
		if start < c.lastStart[tp] {
			t.Fatalf("%s: topic %s start offset moved back from %d to %d: the retention deletion before the kill was not durable (no acknowledged message lost by that itself; seed %d)",
				label, tp, c.lastStart[tp], start, c.seed)
		}
		c.lastStart[tp] = start
		for _, m := range c.sent {
			if m.Topic != tp || !m.Res.Ack || m.Res.Offset < 0 {
				continue
			}
			if m.Res.Offset < start {
				c.below++
				continue
			}
			i := m.Res.Offset - start
			if i >= int64(len(l)) {
				t.Fatalf("%s: %s ack of %s at offset %d of %s: LOST, the topic ends at %d (start %d; %d acknowledged messages checked so far; seed %d)",
					label, m.Level, m.ID, m.Res.Offset, tp, start+int64(len(l)), start, c.checked, c.seed)
			}
			if l[i].ID != m.ID || !bytes.Equal(l[i].Content, m.Content) {
				t.Fatalf("%s: %s ack of %s at offset %d of %s: LOST, the offset holds %s %s instead of %s (start %d, %d messages; %d acknowledged messages checked so far; seed %d)",
					label, m.Level, m.ID, m.Res.Offset, tp, l[i].ID, l[i].Content, m.Content, start, len(l), c.checked, c.seed)
			}
			c.checked++
		}
	}
}
