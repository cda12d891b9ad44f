package schedule

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// oldFile is a bucket file as the encoder wrote it before the moving and
// dropped records existed (kinds 1 to 3 only): three scheduled records
// (due 1s, 2s, 3s after 1800000000000 ms; the second with a header), the
// first delivered, the third cancelled.
const oldFile = "700000006a1e60bc01e8535c18a30100001e313830303030303030303030302d3030303030303030303030303030613101747b22746f706963223a7b226e616d65223a2274227d2c22636f6e74656e74223a312c226964223a226d31222c2274696d657374616d70223a313739393939393939393030307d84000000c2886c1c01d0575c18a30100001e313830303030303030303030302d3030303030303030303030303030613201747b22746f706963223a7b226e616d65223a2274227d2c22636f6e74656e74223a322c226964223a226d32222c2274696d657374616d70223a313739393939393939393030302c2268656164657273223a7b226b223a2276227d7d700000008740c7f201b85b5c18a30100001e313830303030303030303030302d3030303030303030303030303030613301757b22746f706963223a7b226e616d65223a2275227d2c22636f6e74656e74223a332c226964223a226d33222c2274696d657374616d70223a313739393939393939393030307d200000006b5843cf021e313830303030303030303030302d303030303030303030303030303061312000000057f8de13031e313830303030303030303030302d30303030303030303030303030306133"

// TestOldFileRecovered: a file written before the moving and dropped
// records is recovered: the one pending entry is counted, moved once with
// its header added beside the producer's, and the file removed.
func TestOldFileRecovered(t *testing.T) {
	b, err := hex.DecodeString(oldFile)
	if err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	if err := fs.MkdirAll("data/.scheduled"); err != nil {
		t.Fatal(err)
	}
	name := "data/.scheduled/" + bucketName(1800000000000)
	if err := fs.WriteFile(name, b, true); err != nil {
		t.Fatal(err)
	}
	s, tgt := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Minute })
	if s.Pending("t") != 1 || s.Pending("u") != 0 {
		t.Fatalf("pending t %d, u %d; want 1, 0", s.Pending("t"), s.Pending("u"))
	}
	clk.Add(time.Minute)
	if n, _, err := s.MoveDue(context.Background()); err != nil || n != 1 {
		t.Fatalf("moved %d, err %v", n, err)
	}
	got := tgt.topics["t"]
	want := `{"topic":{"name":"t"},"content":2,"id":"m2","timestamp":1799999999000,"headers":{"k":"v","mmmq-schedule-id":"1800000000000-00000000000000a2"}}`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("topic t holds %q, want [%s]", got, want)
	}
	if _, _, err := s.MoveDue(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.ReadFile(name); !vfs.IsNotExist(err) {
		t.Errorf("file still there once every entry is done: %v", err)
	}
}

func TestWithScheduleID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"topic":{"name":"t"},"content":{"headers":{"x":"y"}},"id":"a","timestamp":1}`,
			`{"topic":{"name":"t"},"content":{"headers":{"x":"y"}},"id":"a","timestamp":1,"headers":{"mmmq-schedule-id":"S"}}`},
		{`{"topic":{"name":"t"},"content":1,"id":"a","timestamp":1,"headers":{"b":"2","a":"1"}}`,
			`{"topic":{"name":"t"},"content":1,"id":"a","timestamp":1,"headers":{"a":"1","b":"2","mmmq-schedule-id":"S"}}`},
		{`{"content":1,"headers":{"mmmq-schedule-id":"forged"}}`, `{"content":1,"headers":{"mmmq-schedule-id":"S"}}`},
		{`{}`, `{"headers":{"mmmq-schedule-id":"S"}}`},
	} {
		got, err := withScheduleID([]byte(c.in), "S")
		if err != nil || string(got) != c.want {
			t.Errorf("withScheduleID(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
		if id := scheduleIDOf(got); id != "S" {
			t.Errorf("scheduleIDOf(%s) = %q", got, id)
		}
	}
	if _, err := withScheduleID([]byte(`[1]`), "S"); err == nil {
		t.Error("an array took a header")
	}
}

// TestWindowedBucket: with a budget of 16 entries per window, 600
// messages of one bucket (some cancelled, more scheduled while it is being
// moved) are all moved once, in due order, none early, and no window ever
// holds more than 16 entries; a restart counts them right.
func TestWindowedBucket(t *testing.T) {
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	small := func(o *Options) { o.BucketWidth = time.Hour; o.MemoryBudget = 16 * entryCost * 2; o.MoveBatch = 5 }
	s, _ := newTest(t, fs, clk, small)
	if k := s.windowMax(); k != 16 {
		t.Fatalf("window of %d entries, want 16", k)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	due := map[string]int64{}
	ids := map[string]string{}
	for i := range 500 {
		at := base().Add(time.Duration(1+rng.IntN(600_000)) * time.Millisecond)
		id, err := s.Schedule(ctx, fmt.Sprintf("t%d", i%2), msg(i), at)
		if err != nil {
			t.Fatal(err)
		}
		due[string(msg(i))], ids[string(msg(i))] = at.UnixMilli(), id
	}
	cancelled := map[string]bool{}
	for i := 0; i < 500; i += 7 {
		m := string(msg(i))
		if ok, err := s.Cancel(fmt.Sprintf("t%d", i%2), ids[m]); !ok || err != nil {
			t.Fatalf("cancel %s: %v %v", m, ok, err)
		}
		cancelled[m] = true
	}
	s2, tgt2 := newTest(t, fs, clk, small)
	want := 500 - len(cancelled)
	if p := s2.PendingTotal(); p != want {
		t.Fatalf("after a restart %d pending, want %d", p, want)
	}
	s.Stop(ctx)
	s, tgt := s2, tgt2
	for step := 0; clk.Now().Before(base().Add(11 * time.Minute)); step++ {
		if step%10 == 0 {
			i := 500 + step
			at := clk.Now().Add(time.Duration(1+rng.IntN(60_000)) * time.Millisecond)
			if _, err := s.Schedule(ctx, "t0", msg(i), at); err != nil {
				t.Fatal(err)
			}
			due[string(msg(i))] = at.UnixMilli()
			want++
		}
		clk.Add(time.Duration(rng.IntN(3000)) * time.Millisecond)
		if _, _, err := s.MoveDue(ctx); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		if c := s.cur; c != nil && len(c.pending) > 16 {
			t.Fatalf("a window of %d entries", len(c.pending))
		}
		s.mu.Unlock()
	}
	clk.Add(time.Hour)
	if _, _, err := s.MoveDue(ctx); err != nil {
		t.Fatal(err)
	}
	got := tgt.deliveries()
	if len(got) != want {
		t.Fatalf("moved %d, want %d", len(got), want)
	}
	seen := map[string]bool{}
	last := int64(0)
	for _, d := range got {
		if due[d.stored] < last {
			t.Errorf("%s (due %d) moved after one due %d: not in due order", d.stored, due[d.stored], last)
		}
		last = max(last, due[d.stored])
		switch {
		case seen[d.stored]:
			t.Errorf("%s moved twice", d.stored)
		case cancelled[d.stored]:
			t.Errorf("cancelled %s moved", d.stored)
		case d.at.UnixMilli() < due[d.stored]:
			t.Errorf("%s early", d.stored)
		}
		seen[d.stored] = true
	}
	if s.PendingTotal() != 0 {
		t.Errorf("%d still pending", s.PendingTotal())
	}
}

// TestGroupCommit: concurrent schedules share fsyncs (a slow fsync makes
// them queue), and each is answered only after its record's fsync.
func TestGroupCommit(t *testing.T) {
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Hour })
	if _, err := s.Schedule(context.Background(), "t", msg(0), base().Add(time.Minute)); err != nil {
		t.Fatal(err) // the file exists: later fsyncs are the file's only
	}
	var mu sync.Mutex
	syncs := 0
	fs.SetHook(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			time.Sleep(5 * time.Millisecond)
			mu.Lock()
			syncs++
			mu.Unlock()
		}
		return nil
	})
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.Schedule(context.Background(), "t", msg(1+i), base().Add(time.Minute))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	fs.SetHook(nil)
	if syncs >= n/2 {
		t.Errorf("%d fsyncs for %d concurrent schedules: not grouped", syncs, n)
	}
	t.Logf("%d concurrent schedules, %d fsyncs", n, syncs)
}

// TestGroupCommitFsyncError: an fsync error answers every waiter of its
// batch with the error and fails the store: later schedules are refused
// (503), and nothing of the failed batch is moved.
func TestGroupCommitFsyncError(t *testing.T) {
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	s, tgt := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Hour })
	ctx := context.Background()
	if _, err := s.Schedule(ctx, "t", msg(0), base().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("EIO")
	fs.SetHook(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			time.Sleep(2 * time.Millisecond)
			return eio
		}
		return nil
	})
	var wg sync.WaitGroup
	var failed sync.Map
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Schedule(ctx, "t", msg(1+i), base().Add(time.Second)); err != nil {
				failed.Store(i, err)
			}
		}()
	}
	wg.Wait()
	fs.SetHook(nil)
	for i := range 16 {
		err, ok := failed.Load(i)
		if !ok {
			t.Fatalf("schedule %d acknowledged although its fsync failed", i)
		}
		if !errors.Is(err.(error), ErrFailed) || !errors.Is(err.(error), eio) {
			t.Errorf("schedule %d: %v, want the store failed with EIO", i, err)
		}
	}
	_, err := s.Schedule(ctx, "t", msg(99), base().Add(time.Second))
	if c := contract.Classify(err); err == nil || c.Status != http.StatusServiceUnavailable {
		t.Fatalf("after the fsync error: %v (status %d), want 503", err, c.Status)
	}
	clk.Add(time.Minute)
	s.MoveDue(ctx)
	if d := tgt.deliveries(); len(d) != 0 {
		t.Errorf("a failed store moved %d messages", len(d))
	}
}

// TestDropTopic: DropTopic drops a topic's pending messages in every
// bucket (and no other topic's), deletes the topic once they are dropped,
// refuses a schedule of that topic meanwhile, and the drop survives a
// restart.
func TestDropTopic(t *testing.T) {
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, fs, clk, nil)
	ctx := context.Background()
	for i := range 40 {
		topic := []string{"a", "b"}[i%2]
		if _, err := s.Schedule(ctx, topic, msg(i), base().Add(time.Duration(1+i)*300*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	var during error
	calls := 0
	n, err := s.DropTopic(ctx, "a", func() error {
		calls++
		if s.Pending("a") != 0 {
			t.Error("topic deleted before its scheduled messages were dropped")
		}
		_, during = s.Schedule(ctx, "a", msg(100), base().Add(time.Second))
		return nil
	})
	if err != nil || n != 20 || calls != 1 {
		t.Fatalf("dropped %d, err %v, del called %d times", n, err, calls)
	}
	if c := contract.Classify(during); c.Code != contract.CodeTopicBusy || c.Status != http.StatusConflict {
		t.Errorf("schedule during the deletion: %v, want 409 TOPIC_BUSY", during)
	}
	if _, err := s.Schedule(ctx, "a", msg(101), base().Add(time.Hour)); err != nil {
		t.Errorf("schedule after the deletion: %v", err)
	}
	if n, err := s.DropTopic(ctx, "c", func() error { return nil }); n != 0 || err != nil {
		t.Errorf("drop of a topic with nothing pending: %d, %v", n, err)
	}
	// A failed topic deletion keeps the marker (a restart would finish
	// it); the retry removes it.
	if _, err := s.Schedule(ctx, "d", msg(102), base().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	busy := errors.New("busy")
	if n, err := s.DropTopic(ctx, "d", func() error { return busy }); n != 1 || !errors.Is(err, busy) {
		t.Fatalf("failed deletion: %d, %v", n, err)
	}
	marker := "data/.scheduled/d" + dropExt
	if _, err := fs.ReadFile(marker); err != nil {
		t.Fatalf("marker gone after a failed deletion: %v", err)
	}
	if n, err := s.DropTopic(ctx, "d", func() error { return nil }); n != 0 || err != nil {
		t.Fatalf("retry: %d, %v", n, err)
	}
	if _, err := fs.ReadFile(marker); !vfs.IsNotExist(err) {
		t.Fatalf("marker left after the retry: %v", err)
	}
	s2, tgt2 := newTest(t, fs, clk, nil)
	if s2.Pending("a") != 1 || s2.Pending("b") != 20 {
		t.Fatalf("after a restart pending a %d, b %d; want 1, 20", s2.Pending("a"), s2.Pending("b"))
	}
	clk.Add(2 * time.Hour)
	if _, _, err := s2.MoveDue(ctx); err != nil {
		t.Fatal(err)
	}
	for _, d := range tgt2.deliveries() {
		if d.topic == "a" && d.stored != string(msg(101)) {
			t.Errorf("dropped %s delivered", d.stored)
		}
	}
	if len(tgt2.deliveries()) != 21 {
		t.Errorf("%d delivered, want 21", len(tgt2.deliveries()))
	}
}

// dropRound schedules messages of topics a and b, deletes a (its pending
// messages with it) with power lost at a random filesystem operation,
// reopens and moves everything: either topic a is gone and none of its
// messages arrives (nor is the topic created again), or it remains with
// every acknowledged message of it delivered. It returns the violations.
func dropRound(seed uint64, model vfs.CrashOptions, mod func(*Options)) (violations []string, gone bool) {
	rng := rand.New(rand.NewPCG(seed, 0x64726f70))
	model.Rand = rand.New(rand.NewPCG(seed, 9))
	clk := &fakeClock{t: base()}
	fs := vfs.NewMem()
	opts := Options{FS: fs, Dir: "data/.scheduled", BucketWidth: time.Duration(200+rng.IntN(2000)) * time.Millisecond, Now: clk.Now}
	if mod != nil {
		mod(&opts)
	}
	tgt := &recTarget{now: clk.Now}
	ctx := context.Background()
	tgt.Append(ctx, "a", []byte(`{"first":true}`)) // topic a exists
	s := New(opts, tgt)
	if err := s.Open(); err != nil {
		return []string{"open: " + err.Error()}, false
	}
	ackedA := 0
	for i := range 30 {
		topic := []string{"a", "b"}[rng.IntN(2)]
		if _, err := s.Schedule(ctx, topic, msg(i), clk.Now().Add(time.Duration(1+rng.IntN(5000))*time.Millisecond)); err == nil && topic == "a" {
			ackedA++
		}
	}
	// The flusher and the mover's next step may reach the filesystem at
	// once: the count is atomic (the crash point then depends a little on
	// their interleaving; the property holds for any).
	var ops atomic.Int64
	crashAt := int64(1 + rng.IntN(12))
	fs.SetHook(func(vfs.Op, string) error {
		if ops.Add(1) >= crashAt {
			return errPowerLost
		}
		return nil
	})
	s.DropTopic(ctx, "a", func() error { return tgt.DeleteTopic("a") })
	fs.SetHook(nil)
	s.Stop(ctx)
	tgt.mu.Lock()
	goneBefore := tgt.deleted["a"] > 0
	tgt.mu.Unlock()

	opts.FS = fs.Crash(model)
	s2 := New(opts, tgt)
	if err := s2.Open(); err != nil {
		return []string{"reopen: " + err.Error()}, false
	}
	defer s2.Stop(ctx)
	pendingA := s2.Pending("a")
	clk.Add(time.Hour)
	if _, _, err := s2.MoveDue(ctx); err != nil {
		violations = append(violations, "move: "+err.Error())
	}
	tgt.mu.Lock()
	defer tgt.mu.Unlock()
	gone = tgt.deleted["a"] > 0
	deliveredA := 0
	for _, d := range tgt.got {
		if d.topic == "a" && d.stored != `{"first":true}` {
			deliveredA++
		}
	}
	switch {
	case gone && deliveredA > 0:
		violations = append(violations, fmt.Sprintf("topic a deleted, yet %d of its scheduled messages delivered (the topic created again)", deliveredA))
	case !gone && deliveredA < ackedA:
		violations = append(violations, fmt.Sprintf("topic a kept, but only %d of its %d scheduled messages delivered (pending after the restart: %d)", deliveredA, ackedA, pendingA))
	case goneBefore && !gone:
		violations = append(violations, "topic a deleted before the crash is back")
	}
	return violations, gone
}

// TestDropTopicPowerLoss: under every crash model, a power loss at any
// point of a topic deletion leaves the topic and its pending scheduled
// messages both gone or both there.
func TestDropTopicPowerLoss(t *testing.T) {
	for _, m := range crashModels {
		t.Run(m.name, func(t *testing.T) {
			gone := 0
			for seed := range uint64(rounds(t)) {
				v, g := dropRound(seed, m.opts, nil)
				for _, x := range v {
					t.Errorf("seed %d: %s", seed, x)
				}
				if g {
					gone++
				}
			}
			if gone == 0 || gone == rounds(t) {
				t.Fatalf("%d of %d rounds ended with the topic gone: the crash points do not cover both outcomes", gone, rounds(t))
			}
			t.Logf("%s: %d rounds, topic gone with its messages in %d, both kept in the rest", m.name, rounds(t), gone)
		})
	}
}

// TestDropTopicPowerLossNegativeControl: without the marker file a crash
// between the dropped records and the topic's deletion leaves the topic
// without its scheduled messages, so the test above can fail.
func TestDropTopicPowerLossNegativeControl(t *testing.T) {
	bad := 0
	for seed := range uint64(rounds(t)) {
		v, _ := dropRound(seed, crashModels[0].opts, func(o *Options) { o.skipDropMarker = true })
		for _, x := range v {
			if strings.HasPrefix(x, "topic a kept") {
				bad++
			}
		}
	}
	if bad == 0 {
		t.Fatal("no round lost topic a's scheduled messages without the marker: the test cannot fail")
	}
	t.Logf("without the marker, %d of %d rounds kept topic a but lost its scheduled messages", bad, rounds(t))
}
