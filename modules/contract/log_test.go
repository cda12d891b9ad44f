package contract

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// timeLog is an in-memory log of stored messages for SearchTime.
type timeLog struct {
	start int64
	msgs  [][]byte
	reads int
}

func (l *timeLog) StartOffset() int64   { return l.start }
func (l *timeLog) HighWatermark() int64 { return l.start + int64(len(l.msgs)) }
func (l *timeLog) Read(o int64) ([]byte, error) {
	l.reads++
	return l.msgs[o-l.start], nil
}

func storedAt(ts int64, scheduled bool) []byte {
	if scheduled {
		return fmt.Appendf(nil, `{"topic":{"name":"t"},"content":1,"id":"x","timestamp":%d,"headers":{"%s":"1-ab"}}`, ts, HeaderScheduleID)
	}
	return fmt.Appendf(nil, `{"topic":{"name":"t"},"content":1,"id":"x","timestamp":%d}`, ts)
}

// SearchTime finds the first offset whose timestamp is at or after t,
// also when scheduled messages (their publish time, older than the
// messages around them) are in the log: compared with a linear scan over
// random logs, every time asked for. Appends go at a growing time a; an
// ordinary message's timestamp is a, a scheduled one's is up to 5 s older
// (published before it was due and appended).
func TestSearchTimeWithScheduledMessages(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for round := range 300 {
		l := &timeLog{start: int64(rng.IntN(3))}
		share := []float64{0, 0.2, 0.5, 0.9, 1}[round%5] // of scheduled messages
		a := int64(1_800_000_000_000)
		n := 1 + rng.IntN(200)
		for range n {
			a += int64(rng.IntN(300))
			if rng.Float64() < share {
				l.msgs = append(l.msgs, storedAt(a-int64(rng.IntN(5000)), true))
			} else {
				l.msgs = append(l.msgs, storedAt(a, false))
			}
		}
		for range 20 {
			want := time.UnixMilli(1_800_000_000_000 - 6000 + int64(rng.IntN(int(a-1_800_000_000_000)+8000)))
			exp := l.HighWatermark()
			for i, m := range l.msgs {
				if ts, _ := MessageTimestamp(m); ts >= want.UnixMilli() {
					exp = l.start + int64(i)
					break
				}
			}
			got, err := SearchTime(l, want)
			if err != nil || got != exp {
				t.Fatalf("round %d (%d messages, %.0f%% scheduled): SearchTime(%d) = %d, %v; want %d",
					round, n, share*100, want.UnixMilli(), got, err, exp)
			}
		}
	}
	// Without scheduled messages it stays a binary search.
	l := &timeLog{}
	for i := range 100000 {
		l.msgs = append(l.msgs, storedAt(1_800_000_000_000+int64(i), false))
	}
	if got, _ := SearchTime(l, time.UnixMilli(1_800_000_050_000)); got != 50000 || l.reads > 20 {
		t.Errorf("ordinary log: offset %d after %d reads; want 50000 within 20", got, l.reads)
	}
}
