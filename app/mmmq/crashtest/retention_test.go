package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// rtTopics are the topics of TestCrashRandomKillRetention.
var rtTopics = []string{"rt.a", "rt.b"}

// TestCrashRandomKillRetention is the randomized kill -9 harness with
// retention deleting head segments under publish load (4 KiB segments,
// max-bytes 16 KiB, checked every 20 ms): R rounds of start → concurrent
// WRITTEN and DURABLE producers on two topics → SIGKILL 10–300 ms in →
// restart. After every restart the broker must start (recovery accepts
// every state a deletion can leave), the start offset never moves back,
// and every acknowledged message at or after the start offset reads back
// unchanged at its offset. It runs once per index-sync mode (rkModes).
func TestCrashRandomKillRetention(t *testing.T) {
	forEachMode(t, runRetentionKill)
}

// retentionCheck is the state the rounds of runRetentionKill check against.
type retentionCheck struct {
	seed      uint64
	mu        sync.Mutex
	sent      []sentMsg
	lastStart map[string]int64
	checked   int // acknowledged messages read back at their offset
	below     int // acknowledged messages below the start offset (deleted)
}

func (c *retentionCheck) record(m sentMsg) {
	c.mu.Lock()
	c.sent = append(c.sent, m)
	c.mu.Unlock()
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
		killAfter := time.Duration(10+rng.IntN(291)) * time.Millisecond
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go retentionProducer(t, b, r, g, rand.New(rand.NewPCG(rng.Uint64(), uint64(g))), c, stop, &wg)
		}
		time.Sleep(killAfter)
		counts := stats.beforeKill(t, b)
		b.kill()
		close(stop)
		wg.Wait()
		stats.afterKill(t, b, root, r, counts)
	}
	b := startBroker(t, mode.conf(brokerConf{DataDir: root, SegmentMaxBytes: 4096}, rounds+1))
	stats.started(b)
	c.verify(t, b, "final")
	b.stop()
	if c.lastStart["rt.a"]+c.lastStart["rt.b"] == 0 || c.checked == 0 {
		t.Fatalf("retention deleted nothing or nothing was checked: start offsets %v, %d checks", c.lastStart, c.checked)
	}
	line := fmt.Sprintf("rounds=%d start_offsets=%v acked_checks_at_or_after_start=%d acked_below_start=%d lost=0 %s test=%s",
		rounds, c.lastStart, c.checked, c.below, stats, t.Name())
	t.Log(line)
	fmt.Println("crashtest:", line)
}

// retentionProducer publishes WRITTEN and DURABLE messages to random
// topics of rtTopics until stop is closed or the broker is gone.
func retentionProducer(t *testing.T, b *broker, r, g int, prng *rand.Rand, c *retentionCheck, stop <-chan struct{}, wg *sync.WaitGroup) {
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
			t.Errorf("round %d: publish %s NACK %d: %s", r, m.ID, m.Res.Status, m.Res.Err)
			return
		}
	}
}

// verify reads every topic from its start offset: the start offset never
// moves back, and every acknowledged message at or after it is at its
// offset with its id and content.
func (c *retentionCheck) verify(t *testing.T, b *broker, label string) {
	t.Helper()
	for _, tp := range rtTopics {
		start, l := readFromStart(t, b, tp)
		if start < c.lastStart[tp] {
			t.Fatalf("%s: topic %s start offset moved back from %d to %d (seed %d)", label, tp, c.lastStart[tp], start, c.seed)
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
			if i >= int64(len(l)) || l[i].ID != m.ID || !bytes.Equal(l[i].Content, m.Content) {
				t.Fatalf("%s: %s ack of %s at offset %d of %s not read back there (start %d, %d messages; seed %d)",
					label, m.Level, m.ID, m.Res.Offset, tp, start, len(l), c.seed)
			}
			c.checked++
		}
	}
}
