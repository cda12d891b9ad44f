package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

func newTest(t *testing.T, fs vfs.FS, clk *fakeClock, mod func(*Options)) (*Scheduler, *recTarget) {
	t.Helper()
	tgt := &recTarget{now: clk.Now}
	o := Options{FS: fs, Dir: "data/.scheduled", BucketWidth: time.Second, Now: clk.Now, Logger: zaptest.NewLogger(t)}
	if mod != nil {
		mod(&o)
	}
	s := New(o, tgt)
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	return s, tgt
}

func base() time.Time { return time.UnixMilli(1_800_000_000_000) }

// TestDeliveredNotBeforeDueAndAll runs the real mover on the real clock:
// every message arrives once, none before its due time.
func TestDeliveredNotBeforeDueAndAll(t *testing.T) {
	tgt := &recTarget{now: time.Now}
	s := New(Options{FS: vfs.OS{}, Dir: filepath.Join(t.TempDir(), Dir), BucketWidth: 100 * time.Millisecond, MoveBatch: 7, Logger: zaptest.NewLogger(t)}, tgt)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	const n = 200
	due := map[string]time.Time{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		at := time.Now().Add(time.Duration(20+rng.IntN(600)) * time.Millisecond)
		if _, err := s.Schedule(context.Background(), "t", msg(i), at); err != nil {
			t.Fatal(err)
		}
		due[string(msg(i))] = time.UnixMilli(at.UnixMilli())
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(tgt.deliveries()) < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	got := tgt.deliveries()
	if len(got) != n {
		t.Fatalf("delivered %d of %d", len(got), n)
	}
	seen := map[string]bool{}
	for _, d := range got {
		if seen[d.stored] {
			t.Errorf("%s delivered twice", d.stored)
		}
		seen[d.stored] = true
		if d.at.Before(due[d.stored]) {
			t.Errorf("%s delivered at %v, %v before its due time", d.stored, d.at, due[d.stored].Sub(d.at))
		}
	}
	// The count drops after the target's Publish returns (once the move's
	// progress record is written), so the last delivery can be seen a
	// moment before it: wait for it within the same deadline.
	for s.PendingTotal() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := s.PendingTotal(); p != 0 {
		t.Errorf("pending after delivery: %d", p)
	}
	// Every bucket file is gone once its entries are done.
	time.Sleep(150 * time.Millisecond)
	if _, _, err := s.MoveDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(s.opts.Dir)
	if len(ents) != 0 {
		t.Errorf("bucket files left: %d", len(ents))
	}
}

// TestNotEarly drives the clock by hand: one millisecond before its due
// time a message stays, at it the message moves.
func TestNotEarly(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, tgt := newTest(t, vfs.NewMem(), clk, nil)
	at := base().Add(2500 * time.Millisecond)
	if _, err := s.Schedule(context.Background(), "t", msg(1), at); err != nil {
		t.Fatal(err)
	}
	clk.Add(2499 * time.Millisecond)
	n, next, err := s.MoveDue(context.Background())
	if err != nil || n != 0 || !next.Equal(at) {
		t.Fatalf("1ms early: moved %d, next %v (want %v), err %v", n, next, at, err)
	}
	clk.Add(time.Millisecond)
	if n, _, err := s.MoveDue(context.Background()); err != nil || n != 1 || len(tgt.deliveries()) != 1 {
		t.Fatalf("at due: moved %d, err %v", n, err)
	}
}

func TestCancel(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, tgt := newTest(t, fs, clk, nil)
	ctx := context.Background()
	id1, _ := s.Schedule(ctx, "t", msg(1), base().Add(time.Second))
	id2, _ := s.Schedule(ctx, "t", msg(2), base().Add(time.Second))
	id3, _ := s.Schedule(ctx, "t", msg(3), base().Add(time.Hour))
	for _, c := range []struct {
		name, topic, id string
		want            bool
	}{
		{"other topic", "u", id1, false},
		{"malformed id", "t", "x", false},
		{"unknown id", "t", "1800000001000-0000000000000000", false},
		{"pending", "t", id1, true},
		{"twice", "t", id1, false},
		{"far bucket", "t", id3, true},
	} {
		if ok, err := s.Cancel(c.topic, c.id); err != nil || ok != c.want {
			t.Errorf("%s: Cancel = %v, %v; want %v", c.name, ok, err, c.want)
		}
	}
	if p := s.Pending("t"); p != 1 {
		t.Errorf("pending %d, want 1", p)
	}
	clk.Add(2 * time.Hour)
	if _, _, err := s.MoveDue(ctx); err != nil {
		t.Fatal(err)
	}
	if got := tgt.deliveries(); len(got) != 1 || got[0].stored != string(msg(2)) {
		t.Fatalf("delivered %v, want only message 2", got)
	}
	if ok, _ := s.Cancel("t", id2); ok {
		t.Error("cancel of a delivered message succeeded")
	}
	// A cancel survives a restart.
	s2, tgt2 := newTest(t, fs, clk, nil)
	if _, _, err := s2.MoveDue(ctx); err != nil || len(tgt2.deliveries()) != 0 {
		t.Fatalf("after reopen: delivered %v, err %v", tgt2.deliveries(), err)
	}
}

// TestReopenKeepsPending: a restart (a new Scheduler over the same files)
// finds every pending message, counted per topic, and delivers them all.
func TestReopenKeepsPending(t *testing.T) {
	clk := &fakeClock{t: base()}
	dir := filepath.Join(t.TempDir(), Dir)
	mod := func(o *Options) { o.FS, o.Dir = vfs.OS{}, dir }
	s, _ := newTest(t, nil, clk, mod)
	ctx := context.Background()
	want := map[string]bool{}
	for i := range 300 {
		topic := fmt.Sprintf("t%d", i%3)
		if _, err := s.Schedule(ctx, topic, msg(i), base().Add(time.Duration(1+i*97)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		want[string(msg(i))] = true
	}
	clk.Add(10 * time.Second) // about a third due
	n1, _, err := s.MoveDue(ctx)
	if err != nil || n1 == 0 || n1 == 300 {
		t.Fatalf("first pass moved %d, err %v", n1, err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	s2, tgt2 := newTest(t, nil, clk, mod)
	if p := s2.PendingTotal(); p != 300-n1 {
		t.Fatalf("pending after reopen %d, want %d", p, 300-n1)
	}
	if p := s2.Pending("t0") + s2.Pending("t1") + s2.Pending("t2"); p != 300-n1 {
		t.Fatalf("per-topic pending %d", p)
	}
	clk.Add(time.Hour)
	n2, _, err := s2.MoveDue(ctx)
	if err != nil || n1+n2 != 300 || len(tgt2.deliveries()) != n2 {
		t.Fatalf("moved %d+%d, err %v", n1, n2, err)
	}
}

// TestTornTailCut: garbage after the last whole record (a torn append) is
// cut on open; the records before it stay.
func TestTornTailCut(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, _ := newTest(t, fs, clk, nil)
	if _, err := s.Schedule(context.Background(), "t", msg(1), base().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	name := s.path(s.bucketOf(base().Add(time.Second).UnixMilli()))
	b, _ := fs.ReadFile(name)
	good := len(b)
	torn := appendScheduled(nil, 1, "x", "t", msg(2))
	if err := fs.WriteFile(name, append(b, torn[:len(torn)-3]...), true); err != nil {
		t.Fatal(err)
	}
	s2, _ := newTest(t, fs, clk, nil)
	if s2.Pending("t") != 1 {
		t.Fatalf("pending %d", s2.Pending("t"))
	}
	if b, _ := fs.ReadFile(name); len(b) != good {
		t.Fatalf("file is %d bytes after the cut, want %d", len(b), good)
	}
}

func TestRules(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, vfs.NewMem(), clk, func(o *Options) { o.MaxDelay = time.Hour; o.MaxPendingPerTopic = 2 })
	ctx := context.Background()
	status := func(err error) int {
		if err == nil {
			return 200
		}
		return contract.Classify(err).Status
	}
	if _, err := s.Schedule(ctx, "t", msg(0), base().Add(time.Hour+time.Second)); status(err) != http.StatusBadRequest {
		t.Errorf("over max delay: %v", err)
	}
	for i := range 2 {
		if _, err := s.Schedule(ctx, "t", msg(i), base().Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Schedule(ctx, "t", msg(3), base().Add(time.Minute))
	if status(err) != http.StatusInsufficientStorage || contract.Classify(err).Code != contract.CodeTooManyScheduled {
		t.Errorf("over max pending: %v", err)
	}
	if _, err := s.Schedule(ctx, "u", msg(3), base().Add(time.Minute)); err != nil {
		t.Errorf("another topic: %v", err)
	}
	u := New(Options{Unsupported: "backend jetstream"}, nil)
	if _, err := u.Schedule(ctx, "t", msg(0), base()); status(err) != http.StatusNotImplemented {
		t.Errorf("unsupported: %v", err)
	}
}

// TestAppendFailureRetried: a topic append that fails leaves the message
// pending; the next pass moves it.
func TestAppendFailureRetried(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, tgt := newTest(t, vfs.NewMem(), clk, nil)
	ctx := context.Background()
	s.Schedule(ctx, "t", msg(1), base().Add(time.Millisecond))
	clk.Add(time.Second)
	tgt.fail = errors.New("topic down")
	n, next, err := s.MoveDue(ctx)
	if err != nil || n != 0 || s.Pending("t") != 1 || !next.Equal(clk.Now().Add(StuckRetryMin)) {
		t.Fatalf("failed append: moved %d, err %v, pending %d, next %v", n, err, s.Pending("t"), next)
	}
	tgt.fail = nil
	if n, _, err := s.MoveDue(ctx); err != nil || n != 0 {
		t.Fatalf("retried before its backoff: moved %d, err %v", n, err)
	}
	clk.Add(StuckRetryMin)
	if n, _, err := s.MoveDue(ctx); err != nil || n != 1 || s.Pending("t") != 0 {
		t.Fatalf("retry: moved %d, err %v", n, err)
	}
	if st := s.Stats(); len(st.Stuck) != 0 {
		t.Errorf("still stuck after the move: %+v", st.Stuck)
	}
}

// TestBucketWidthChange: files written under one bucket-width are moved
// and recorded in their own files after a restart with another.
func TestBucketWidthChange(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, _ := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Hour })
	ctx := context.Background()
	for i := range 5 {
		if _, err := s.Schedule(ctx, "t", msg(i), base().Add(time.Duration(1+i)*7*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	s2, tgt := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Second })
	clk.Add(2 * time.Hour)
	if n, _, err := s2.MoveDue(ctx); err != nil || n != 5 {
		t.Fatalf("moved %d, err %v", n, err)
	}
	s3, tgt3 := newTest(t, fs, clk, nil)
	if _, _, err := s3.MoveDue(ctx); err != nil || len(tgt3.deliveries()) != 0 || s3.PendingTotal() != 0 || len(tgt.deliveries()) != 5 {
		t.Fatalf("after a second restart: %d more delivered, %d pending, err %v", len(tgt3.deliveries()), s3.PendingTotal(), err)
	}
	if ents, _ := fs.List("data/.scheduled"); len(ents) != 0 {
		t.Errorf("files left: %v", ents)
	}
}

// TestOverlappingBucketsNotLate: after a restart with a narrower
// bucket-width, a new message due inside an old, wider bucket is moved at
// its own due time, not at the old bucket's next one.
func TestOverlappingBucketsNotLate(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, _ := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Hour })
	ctx := context.Background()
	if _, err := s.Schedule(ctx, "t", msg(1), base().Add(50*time.Minute)); err != nil {
		t.Fatal(err)
	}
	s2, tgt := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Second })
	if _, err := s2.Schedule(ctx, "t", msg(2), base().Add(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if _, next, _ := s2.MoveDue(ctx); !next.Equal(base().Add(10 * time.Minute)) {
		t.Fatalf("next wake-up %v, want the new message's due time %v", next, base().Add(10*time.Minute))
	}
	clk.Add(10 * time.Minute)
	if n, next, err := s2.MoveDue(ctx); err != nil || n != 1 || !next.Equal(base().Add(50*time.Minute)) {
		t.Fatalf("moved %d (want 1), next %v, err %v", n, next, err)
	}
	if got := tgt.deliveries(); len(got) != 1 || got[0].stored != string(msg(2)) {
		t.Fatalf("delivered %v", got)
	}
}
