package schedule

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestStuckTopicDoesNotBlockOthers: a topic whose appends keep failing
// (a record too large) holds none of the other topics' due messages; its
// own stay pending, in order, are counted and listed, are retried with a
// growing backoff, and move once the cause is gone.
func TestStuckTopicDoesNotBlockOthers(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(map[bool]string{false: "one by one", true: "batch target"}[batched], func(t *testing.T) {
			clk := &fakeClock{t: base()}
			tgt := &recTarget{now: clk.Now, failTopic: map[string]error{"bad": contract.TooLarge("record too large")}}
			var target Target = tgt
			if batched {
				target = batchTarget{tgt}
			}
			s := New(Options{FS: vfs.NewMem(), Dir: "data/.scheduled", BucketWidth: time.Second, Now: clk.Now, Logger: zaptest.NewLogger(t)}, target)
			if err := s.Open(); err != nil {
				t.Fatal(err)
			}
			stopAtEnd(t, s)
			ctx := context.Background()
			for i, topic := range []string{"bad", "good", "bad", "good"} {
				if _, err := s.Schedule(ctx, topic, msg(i), base().Add(time.Duration(i+1)*time.Millisecond)); err != nil {
					t.Fatal(err)
				}
			}
			clk.Add(time.Second)
			n, next, err := s.MoveDue(ctx)
			if err != nil || n != 2 || s.Pending("good") != 0 || s.Pending("bad") != 2 {
				t.Fatalf("moved %d, err %v, pending good %d bad %d", n, err, s.Pending("good"), s.Pending("bad"))
			}
			if want := clk.Now().Add(StuckRetryMin); !next.Equal(want) {
				t.Errorf("next wake-up %v, want the retry at %v", next, want)
			}
			st := s.Stats()
			if len(st.Stuck) != 1 || st.Stuck[0].Topic != "bad" || st.Stuck[0].Pending != 2 || st.Stuck[0].Reason != "too_large" || st.MoveFailures["too_large"] != 1 {
				t.Fatalf("stats: %+v", st)
			}
			// A later due message of the good topic moves while bad waits.
			if _, err := s.Schedule(ctx, "good", msg(9), clk.Now().Add(time.Millisecond)); err != nil {
				t.Fatal(err)
			}
			clk.Add(10 * time.Millisecond)
			if n, _, err := s.MoveDue(ctx); err != nil || n != 1 {
				t.Fatalf("good topic behind a stuck one: moved %d, err %v", n, err)
			}
			// The retry fails again: the backoff doubles.
			clk.Add(StuckRetryMin)
			if n, next, err := s.MoveDue(ctx); err != nil || n != 0 || !next.Equal(clk.Now().Add(2*StuckRetryMin)) {
				t.Fatalf("second failure: moved %d, next %v, err %v", n, next, err)
			}
			if f := s.Stats().Stuck[0].Failures; f != 2 {
				t.Errorf("failures %d, want 2", f)
			}
			tgt.mu.Lock()
			delete(tgt.failTopic, "bad")
			tgt.mu.Unlock()
			clk.Add(2 * StuckRetryMin)
			if n, _, err := s.MoveDue(ctx); err != nil || n != 2 || s.Pending("bad") != 0 {
				t.Fatalf("after the cause is gone: moved %d, err %v, pending %d", n, err, s.Pending("bad"))
			}
			var order []string
			for _, d := range tgt.deliveries() {
				if d.topic == "bad" {
					order = append(order, d.stored)
				}
			}
			if len(order) != 2 || order[0] != string(msg(0)) || order[1] != string(msg(2)) {
				t.Errorf("bad topic's order: %q", order)
			}
			if st := s.Stats(); len(st.Stuck) != 0 {
				t.Errorf("still stuck: %+v", st.Stuck)
			}
		})
	}
}

// TestStuckTopicCancelled: a stuck topic's message can be cancelled; the
// topic is then no longer listed.
func TestStuckTopicCancelled(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, tgt := newTest(t, vfs.NewMem(), clk, nil)
	tgt.failTopic = map[string]error{"bad": contract.NewError(contract.CodeTooManyTopics, "max-topics reached")}
	ctx := context.Background()
	id, err := s.Schedule(ctx, "bad", msg(1), base().Add(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	if _, _, err := s.MoveDue(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); len(st.Stuck) != 1 || st.Stuck[0].Reason != "too_many_topics" {
		t.Fatalf("stuck: %+v", st.Stuck)
	}
	if ok, err := s.Cancel("bad", id); !ok || err != nil {
		t.Fatalf("cancel a stuck message: %v %v", ok, err)
	}
	if st := s.Stats(); len(st.Stuck) != 0 || s.Pending("bad") != 0 {
		t.Errorf("after cancel: %+v, pending %d", st.Stuck, s.Pending("bad"))
	}
	if len(tgt.deliveries()) != 0 {
		t.Errorf("delivered: %v", tgt.deliveries())
	}
}

// TestStuckTopicDropped: deleting a stuck topic (DropTopic, as DELETE
// /topics/{topic} does) ends it: no longer listed as stuck.
func TestStuckTopicDropped(t *testing.T) {
	clk := &fakeClock{t: base()}
	s, tgt := newTest(t, vfs.NewMem(), clk, nil)
	tgt.failTopic = map[string]error{"bad": contract.NewError(contract.CodeTooManyTopics, "max-topics reached")}
	ctx := context.Background()
	if _, err := s.Schedule(ctx, "bad", msg(1), base().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	if _, _, err := s.MoveDue(ctx); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); len(st.Stuck) != 1 {
		t.Fatalf("stuck: %+v", st.Stuck)
	}
	if n, err := s.DropTopic(ctx, "bad", func() error { return nil }); n != 1 || err != nil {
		t.Fatalf("DropTopic: %d, %v", n, err)
	}
	if st := s.Stats(); len(st.Stuck) != 0 || st.Pending != 0 {
		t.Errorf("after the topic's deletion: stuck %+v, pending %d", st.Stuck, st.Pending)
	}
}

// TestStuckTopicRealMover runs the real mover on the real clock: a topic
// whose appends always fail does not keep another topic's due message
// from its topic. The bound is generous (the message is normally moved
// within milliseconds; before topics were isolated it was never moved).
func TestStuckTopicRealMover(t *testing.T) {
	tgt := &recTarget{now: time.Now, failTopic: map[string]error{"bad": contract.TooLarge("record too large")}}
	s := New(Options{FS: vfs.OS{}, Dir: filepath.Join(t.TempDir(), Dir), BucketWidth: 100 * time.Millisecond, Logger: zaptest.NewLogger(t)}, tgt)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	ctx := context.Background()
	if _, err := s.Schedule(ctx, "bad", msg(1), time.Now().Add(20*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(60 * time.Millisecond)
	if _, err := s.Schedule(ctx, "good", msg(2), due); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Pending("good") > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got := tgt.deliveries()
	if len(got) != 1 || got[0].topic != "good" {
		t.Fatalf("deliveries %v; pending good %d", got, s.Pending("good"))
	}
	t.Logf("good topic's message %v late behind a stuck topic", got[0].at.Sub(due))
	if s.Pending("bad") != 1 {
		t.Errorf("stuck message not pending: %d", s.Pending("bad"))
	}
}

// A start with pending scheduled messages says how many it recovered.
func TestOpenLogsRecoveredPending(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	s, _ := newTest(t, fs, clk, nil)
	for i := range 3 {
		if _, err := s.Schedule(context.Background(), []string{"a", "b", "a"}[i], msg(i), base().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	core, logs := observer.New(zapcore.InfoLevel)
	again := New(Options{FS: fs, Dir: "data/.scheduled", BucketWidth: time.Second, Now: clk.Now, Logger: zap.New(core)}, &recTarget{now: clk.Now})
	if err := again.Open(); err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, again)
	got := logs.FilterMessage("scheduled messages: pending ones recovered").All()
	if len(got) != 1 || got[0].ContextMap()["pending"] != int64(3) || got[0].ContextMap()["topics"] != int64(2) {
		t.Fatalf("log lines %v; want one saying 3 pending over 2 topics", logs.All())
	}
}
