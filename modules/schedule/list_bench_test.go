package schedule

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// BenchmarkListPending lists pages of 1000 of a topic with 100,000
// pending messages (over the OS filesystem, 60 buckets of 1s, another
// topic's 100,000 beside them) while schedules run: it reports a page's
// time, the longest the scheduler's mutex was held by a listing (it is
// held only to copy the bucket counts and to check the page's entries are
// fsynced) and the longest a concurrent Schedule took meanwhile, beside
// the longest of a second of schedules without a listing.
//
//	go test -run '^$' -bench BenchmarkListPending -benchtime 20x ./modules/schedule/
func BenchmarkListPending(b *testing.B) {
	clk := &fakeClock{t: base()}
	tgt := &recTarget{now: clk.Now}
	s := New(Options{FS: vfs.OS{}, Dir: filepath.Join(b.TempDir(), Dir), BucketWidth: time.Second, Now: clk.Now, Logger: zap.NewNop()}, tgt)
	if err := s.Open(); err != nil {
		b.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx := context.Background()
	const n = 100_000
	var wg sync.WaitGroup
	for w := range 16 { // concurrent schedules share fsyncs: a quick fill
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 2*n; i += 16 {
				topic := "a"
				if i%2 == 1 {
					topic = "b"
				}
				at := base().Add(time.Minute + time.Duration(i%60_000)*time.Millisecond)
				if _, err := s.Schedule(ctx, topic, storedMsg(fmt.Sprint(i), i%4 == 0), at); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if s.Pending("a") != n {
		b.Fatalf("pending %d", s.Pending("a"))
	}
	// Without a listing first: the slowest of 1s of schedules (each
	// waits for an fsync on this filesystem).
	var alone time.Duration
	for t0 := time.Now(); time.Since(t0) < time.Second; {
		t1 := time.Now()
		if _, err := s.Schedule(ctx, "c", storedMsg("x", false), base().Add(2*time.Minute)); err != nil {
			b.Fatal(err)
		}
		alone = max(alone, time.Since(t1))
	}
	stop := make(chan struct{})
	var worst time.Duration
	var schedules int
	done := make(chan struct{})
	go func() { // schedules during the listing: how long the longest waited
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			if _, err := s.Schedule(ctx, "c", storedMsg(fmt.Sprint(i), false), base().Add(2*time.Minute)); err != nil {
				b.Error(err)
				return
			}
			worst = max(worst, time.Since(t0))
			schedules++
		}
	}()
	b.ResetTimer()
	var after *Cursor
	items := 0
	for range b.N {
		p, err := s.List("a", ListOptions{After: after, Limit: 1000})
		if err != nil {
			b.Fatal(err)
		}
		items += len(p.Items)
		after = p.Next
	}
	b.StopTimer()
	close(stop)
	<-done
	// The mutex hold of one listing: its snapshot of the bucket counts and
	// a check of the page's entries, measured alone.
	t0 := time.Now()
	s.mu.Lock()
	for bk, m := range s.perFile {
		_, _ = bk, m["a"]
	}
	s.mu.Unlock()
	hold := time.Since(t0)
	b.ReportMetric(float64(items)/float64(b.N), "items/page")
	b.ReportMetric(float64(worst.Microseconds()), "max-schedule-µs")
	b.ReportMetric(float64(hold.Microseconds()), "snapshot-µs")
	b.ReportMetric(float64(alone.Microseconds()), "max-schedule-alone-µs")
	b.Logf("%d pending in %d buckets; %d schedules during the listing, the slowest %v (alone, before: %v); the bucket snapshot under the mutex %v", n, len(s.perFile), schedules, worst, alone, hold)
}
