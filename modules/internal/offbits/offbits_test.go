package offbits

import (
	"math/rand/v2"
	"testing"
)

// Set: the checkpoint is the first offset not finished, through
// words set in bulk and dropped.
func TestSet(t *testing.T) {
	var b Set
	b.Reset(70)
	if got := b.FirstUnset(70); got != 70 {
		t.Fatalf("empty: first unset %d, want 70", got)
	}
	b.SetRange(70, 300)
	b.Set(301)
	if got := b.FirstUnset(70); got != 300 {
		t.Fatalf("first unset %d, want 300", got)
	}
	b.Drop(300)
	if b.Has(300) || !b.Has(301) || !b.Has(10) {
		t.Fatal("drop lost bits")
	}
	b.Set(300)
	if got := b.FirstUnset(300); got != 302 {
		t.Fatalf("first unset %d, want 302", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	b.Reset(0)
	set := map[int64]bool{}
	next := int64(0)
	for range 5000 {
		o := next + rng.Int64N(200)
		b.Set(o)
		set[o] = true
		for set[next] {
			next++
		}
		if got := b.FirstUnset(next); got != next {
			t.Fatalf("first unset %d, want %d", got, next)
		}
		b.Drop(next)
	}
}
