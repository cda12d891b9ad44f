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

// TestCrashRandomKillRetention is the randomized kill -9 harness with
// retention deleting head segments under publish load (4 KiB segments,
// max-bytes 16 KiB, checked every 20 ms): R rounds of start → concurrent
// WRITTEN and DURABLE producers on two topics → SIGKILL 10–300 ms in →
// restart. After every restart the broker must start (recovery accepts
// every state a deletion can leave), the start offset never moves back,
// and every acknowledged message at or after the start offset reads back
// unchanged at its offset.
func TestCrashRandomKillRetention(t *testing.T) {
	rounds := rkRounds()
	seed := uint64(time.Now().UnixNano())
	t.Logf("rounds=%d seed=%d", rounds, seed)
	rng := rand.New(rand.NewPCG(seed, 0x72657465))
	root := filepath.Join(t.TempDir(), "data")
	topics := []string{"rt.a", "rt.b"}
	conf := brokerConf{DataDir: root, SegmentMaxBytes: 4096, RetentionMaxBytes: 16384}
	var (
		mu   sync.Mutex
		sent []sentMsg
	)
	lastStart := map[string]int64{}
	checked, below := 0, 0
	verify := func(b *broker, label string) {
		t.Helper()
		for _, tp := range topics {
			start, l := readFromStart(t, b, tp)
			if start < lastStart[tp] {
				t.Fatalf("%s: topic %s start offset moved back from %d to %d (seed %d)", label, tp, lastStart[tp], start, seed)
			}
			lastStart[tp] = start
			for _, m := range sent {
				if m.Topic != tp || !m.Res.Ack || m.Res.Offset < 0 {
					continue
				}
				if m.Res.Offset < start {
					below++
					continue
				}
				i := m.Res.Offset - start
				if i >= int64(len(l)) || l[i].ID != m.ID || !bytes.Equal(l[i].Content, m.Content) {
					t.Fatalf("%s: %s ack of %s at offset %d of %s not read back there (start %d, %d messages; seed %d)",
						label, m.Level, m.ID, m.Res.Offset, tp, start, len(l), seed)
				}
				checked++
			}
		}
	}
	for r := 1; r <= rounds; r++ {
		b := startBroker(t, conf)
		if r > 1 {
			verify(b, fmt.Sprintf("round %d after restart", r))
		}
		killAfter := time.Duration(10+rng.IntN(291)) * time.Millisecond
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for g := range 4 {
			prng := rand.New(rand.NewPCG(rng.Uint64(), uint64(g)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					m := sentMsg{Round: r, Topic: topics[prng.IntN(len(topics))], ID: fmt.Sprintf("r%03d-g%d-%05d", r, g, n),
						Level: []string{"written", "durable"}[prng.IntN(2)]}
					m.Content, _ = json.Marshal(map[string]any{"id": m.ID, "pad": strings.Repeat("x", 100+prng.IntN(100))})
					m.Res = publish(b.base, m.Topic, m.ID, m.Content, m.Level)
					mu.Lock()
					sent = append(sent, m)
					mu.Unlock()
					if !m.Res.Replied {
						return
					}
					if !m.Res.Ack {
						t.Errorf("round %d: publish %s NACK %d: %s", r, m.ID, m.Res.Status, m.Res.Err)
						return
					}
				}
			}()
		}
		time.Sleep(killAfter)
		b.kill()
		close(stop)
		wg.Wait()
	}
	b := startBroker(t, brokerConf{DataDir: root, SegmentMaxBytes: 4096})
	verify(b, "final")
	b.stop()
	if lastStart["rt.a"]+lastStart["rt.b"] == 0 || checked == 0 {
		t.Fatalf("retention deleted nothing or nothing was checked: start offsets %v, %d checks", lastStart, checked)
	}
	line := fmt.Sprintf("rounds=%d start_offsets=%v acked_checks_at_or_after_start=%d acked_below_start=%d lost=0", rounds, lastStart, checked, below)
	t.Log(line)
	fmt.Println("crashtest:", line)
}
