package schedule

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// storedWithID builds a stored message with a producer id published at now.
func storedWithID(t *testing.T, topic, id string, now time.Time) []byte {
	t.Helper()
	b, err := contract.AppendTTLMessage(nil, topic, []byte(`{"n":1}`), id, "", 0, nil, now)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A retried scheduled publish with the same producer id and topic within
// the window is answered with the first schedule (duplicate), stores
// nothing, and keeps being one after the first was delivered or
// cancelled; another topic, or after the window, is a new schedule.
func TestScheduleOnceDuplicates(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, tgt := newTest(t, vfs.NewMem(), clk, nil)
	o := NewIdempotent(s, time.Minute, 0)
	ctx := context.Background()
	due := clk.Now().Add(10 * time.Second)
	first, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), due)
	if err != nil || first.Duplicate || first.ID == "" || !first.DeliverAt.Equal(due) {
		t.Fatalf("first: %+v %v", first, err)
	}
	// The retry asks for another time (a delay counted again): it is
	// answered with the first one's.
	again, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), due.Add(time.Second))
	if err != nil || !again.Duplicate || again.ID != first.ID || !again.DeliverAt.Equal(due) {
		t.Fatalf("retry: %+v %v; want a duplicate of %+v", again, err, first)
	}
	if n := s.Pending("t"); n != 1 {
		t.Fatalf("pending %d after a duplicate; want 1", n)
	}
	other, err := o.ScheduleOnce(ctx, "u", "evt-1", storedWithID(t, "u", "evt-1", clk.Now()), due)
	if err != nil || other.Duplicate || other.ID == first.ID {
		t.Fatalf("same id on another topic: %+v %v", other, err)
	}
	// Delivered: a retry within the window is still the first schedule.
	clk.Add(11 * time.Second)
	if n, _, err := s.MoveDue(ctx); err != nil || n != 2 {
		t.Fatalf("moved %d, %v", n, err)
	}
	if r, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Second)); err != nil || !r.Duplicate || r.ID != first.ID {
		t.Fatalf("retry after delivery: %+v %v", r, err)
	}
	// Cancelled: the same.
	c, _ := o.ScheduleOnce(ctx, "t", "evt-2", storedWithID(t, "t", "evt-2", clk.Now()), clk.Now().Add(time.Second))
	if ok, err := o.Cancel("t", c.ID); !ok || err != nil {
		t.Fatalf("cancel: %v %v", ok, err)
	}
	if r, _ := o.ScheduleOnce(ctx, "t", "evt-2", storedWithID(t, "t", "evt-2", clk.Now()), clk.Now().Add(time.Second)); !r.Duplicate || r.ID != c.ID {
		t.Fatalf("retry after cancel: %+v", r)
	}
	// After the window: new.
	clk.Add(2 * time.Minute)
	late, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Second))
	if err != nil || late.Duplicate || late.ID == first.ID {
		t.Fatalf("after the window: %+v %v", late, err)
	}
	if o.Remembered() != 1 {
		t.Errorf("remembered %d ids after the window; want 1", o.Remembered())
	}
	if n := len(tgt.deliveries()); n != 2 {
		t.Errorf("%d messages appended; want 2 (t and u)", n)
	}
	// Without a producer id, or with the window off, nothing is
	// deduplicated.
	off := NewIdempotent(s, 0, 0)
	a, _ := off.ScheduleOnce(ctx, "t", "evt-3", storedWithID(t, "t", "evt-3", clk.Now()), clk.Now().Add(time.Second))
	b, _ := off.ScheduleOnce(ctx, "t", "evt-3", storedWithID(t, "t", "evt-3", clk.Now()), clk.Now().Add(time.Second))
	if a.Duplicate || b.Duplicate || a.ID == b.ID {
		t.Errorf("window off: %+v %+v", a, b)
	}
}

// A first schedule that failed (here: the scheduler closed) is forgotten:
// its retry is a new schedule.
// Deleting the topic (DropTopic) forgets its producer ids: the same id
// scheduled again afterwards is a new schedule, stored and pending, not a
// "duplicate" of the dropped one; another topic's ids are kept.
func TestScheduleOnceForgetsADroppedTopic(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, nil)
	o := NewIdempotent(s, time.Minute, 0)
	ctx := context.Background()
	due := clk.Now().Add(time.Hour)
	first, err := o.ScheduleOnce(ctx, "t", "Z", storedWithID(t, "t", "Z", clk.Now()), due)
	if err != nil {
		t.Fatal(err)
	}
	keep, err := o.ScheduleOnce(ctx, "u", "Z", storedWithID(t, "u", "Z", clk.Now()), due)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := o.DropTopic(ctx, "t", func() error { return nil }); n != 1 || err != nil {
		t.Fatalf("DropTopic: %d, %v", n, err)
	}
	again, err := o.ScheduleOnce(ctx, "t", "Z", storedWithID(t, "t", "Z", clk.Now()), due)
	if err != nil || again.Duplicate || again.ID == first.ID || s.Pending("t") != 1 {
		t.Fatalf("after the topic's deletion: %+v %v, pending %d; want a new schedule", again, err, s.Pending("t"))
	}
	if r, err := o.ScheduleOnce(ctx, "u", "Z", storedWithID(t, "u", "Z", clk.Now()), due); err != nil || !r.Duplicate || r.ID != keep.ID {
		t.Fatalf("the other topic's id: %+v %v; want a duplicate of %s", r, err, keep.ID)
	}
}

func TestScheduleOnceFailedFirstIsForgotten(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, nil)
	o := NewIdempotent(s, time.Minute, 0)
	ctx := context.Background()
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	if _, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Second)); !errors.Is(err, ErrClosed) {
		t.Fatalf("closed: %v", err)
	}
	s.mu.Lock()
	s.running = true
	s.mu.Unlock()
	r, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Second))
	if err != nil || r.Duplicate {
		t.Fatalf("a retry of a failed first: %+v %v; want a new schedule", r, err)
	}
}

// Concurrent retries of one id schedule it once; every caller gets the
// same schedule id.
func TestScheduleOnceConcurrent(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, nil)
	o := NewIdempotent(s, time.Minute, 0)
	var wg sync.WaitGroup
	ids := make([]string, 16)
	dups := make([]bool, 16)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := o.ScheduleOnce(context.Background(), "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Second))
			if err != nil {
				t.Error(err)
			}
			ids[i], dups[i] = r.ID, r.Duplicate
		}()
	}
	wg.Wait()
	firsts := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Errorf("caller %d got %s, caller 0 %s", i, ids[i], ids[0])
		}
		if !dups[i] {
			firsts++
		}
	}
	if firsts != 1 || s.Pending("t") != 1 {
		t.Errorf("%d callers were not duplicates, %d pending; want 1 and 1", firsts, s.Pending("t"))
	}
}

// After a restart the ids of the schedules still pending are remembered
// (read back from the bucket files); those published before the window
// are not.
func TestScheduleOnceAfterRestart(t *testing.T) {
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, fs, clk, nil)
	o := NewIdempotent(s, time.Minute, 0)
	ctx := context.Background()
	old, err := o.ScheduleOnce(ctx, "t", "old", storedWithID(t, "t", "old", clk.Now()), clk.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(2 * time.Minute)
	first, err := o.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Schedule(ctx, "t", storedWithID(t, "t", "", clk.Now()), clk.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	s2, _ := newTest(t, fs, clk, nil) // a restart over the same files
	o2 := NewIdempotent(s2, time.Minute, 0)
	r, err := o2.ScheduleOnce(ctx, "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Minute))
	if err != nil || !r.Duplicate || r.ID != first.ID || !r.DeliverAt.Equal(first.DeliverAt) {
		t.Fatalf("retry after restart: %+v %v; want a duplicate of %+v", r, err, first)
	}
	r, err = o2.ScheduleOnce(ctx, "t", "old", storedWithID(t, "t", "old", clk.Now()), clk.Now().Add(time.Minute))
	if err != nil || r.Duplicate || r.ID == old.ID {
		t.Fatalf("an id published before the window: %+v %v; want new", r, err)
	}
	if n := s2.Pending("t"); n != 4 {
		t.Errorf("pending %d; want 4", n)
	}
}

// Over maxIDs the oldest ids are forgotten first.
func TestScheduleOnceMaxIDs(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, nil)
	o := NewIdempotent(s, time.Minute, 2)
	ctx := context.Background()
	var first contract.Scheduled
	for i, id := range []string{"a", "b", "c"} {
		r, err := o.ScheduleOnce(ctx, "t", id, storedWithID(t, "t", id, clk.Now()), clk.Now().Add(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r
		}
	}
	if o.Remembered() != 2 {
		t.Fatalf("remembered %d; want 2", o.Remembered())
	}
	if r, _ := o.ScheduleOnce(ctx, "t", "c", storedWithID(t, "t", "c", clk.Now()), clk.Now().Add(time.Second)); !r.Duplicate {
		t.Errorf("the newest id was forgotten")
	}
	if r, _ := o.ScheduleOnce(ctx, "t", "a", storedWithID(t, "t", "a", clk.Now()), clk.Now().Add(time.Second)); r.Duplicate || r.ID == first.ID {
		t.Errorf("the oldest id was kept over max-ids: %+v", r)
	}
}

// Check applies Schedule's rules without storing: 400 beyond max-delay,
// 501 where unsupported; ScheduleOnce is 501 there too.
func TestIdempotentCheck(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, func(o *Options) { o.MaxDelay = time.Hour })
	o := NewIdempotent(s, time.Minute, 0)
	if err := o.Check(clk.Now().Add(time.Hour)); err != nil {
		t.Errorf("at max-delay: %v", err)
	}
	if err := o.Check(clk.Now().Add(time.Hour + time.Second)); contract.Classify(err).Status != 400 {
		t.Errorf("over max-delay: %v", err)
	}
	u, _ := newTest(t, vfs.NewMem(), clk, func(o *Options) { o.Unsupported = "not here" })
	if err := NewIdempotent(u, time.Minute, 0).Check(clk.Now().Add(time.Second)); contract.Classify(err).Status != 501 {
		t.Errorf("unsupported: %v", err)
	}
	if s.PendingTotal() != 0 {
		t.Errorf("Check stored something")
	}
	// ScheduleOnce where unsupported: 501, and the store (no filesystem
	// here) is never read.
	n := New(Options{Unsupported: "not here", Now: clk.Now}, &recTarget{now: clk.Now})
	if _, err := NewIdempotent(n, time.Minute, 0).ScheduleOnce(context.Background(), "t", "evt-1", storedWithID(t, "t", "evt-1", clk.Now()), clk.Now().Add(time.Second)); contract.Classify(err).Status != 501 {
		t.Errorf("ScheduleOnce unsupported: %v", err)
	}
}
