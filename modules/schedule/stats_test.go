package schedule

import (
	"context"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestStats: pending, moved and the lateness histogram (cumulative, by
// the fake clock: moved 2 s after the due time).
func TestStats(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, nil)
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Schedule(ctx, "t", msg(i), base().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if st := s.Stats(); st.Pending != 3 || st.Moved != 0 || st.LatenessCount != 0 {
		t.Fatalf("before: %+v", st)
	}
	clk.Add(3 * time.Second)
	if _, _, err := s.MoveDue(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	if st.Pending != 0 || st.Moved != 3 || st.LatenessCount != 3 || st.LatenessSum != 6 {
		t.Fatalf("after: %+v", st)
	}
	for i, b := range LatenessBuckets {
		want := uint64(0)
		if b >= 2 {
			want = 3
		}
		if st.LatenessCounts[i] != want {
			t.Errorf("bucket le=%v: %d, want %d", b, st.LatenessCounts[i], want)
		}
	}
}
