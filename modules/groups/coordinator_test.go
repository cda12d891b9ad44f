package groups

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

const testTopic = "order.created"

// env is a registry in a temp dir with one topic and a coordinator over it.
type env struct {
	t    *testing.T
	root string
	reg  *topicqueue.Registry
	q    *topicqueue.TopicQueue
	c    *Coordinator
	opts Options
	// notified gets a value (at most one pending) each time a fetch asks the
	// topic's log for a Notify channel, which it does right before it
	// blocks: see waitingFetch.
	notified chan struct{}
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	e := &env{t: t, root: t.TempDir(), opts: opts, notified: make(chan struct{}, 1)}
	e.open()
	t.Cleanup(func() { e.close() })
	return e
}

func (e *env) open() {
	e.t.Helper()
	local := &topicqueue.LocalBackend{Root: e.root, Storage: storage.Options{Logger: zaptest.NewLogger(e.t)}}
	e.reg = topicqueue.New(topicqueue.Options{Root: e.root, Backend: &topicqueuetest.NotifyingBackend{Backend: local, Notified: e.notified}})
	var err error
	if _, statErr := os.Stat(filepath.Join(e.root, testTopic)); statErr == nil {
		e.q, err = e.reg.Open(testTopic)
	} else {
		e.q, err = e.reg.GetOrCreate(testTopic)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	opts := e.opts
	opts.Logger = zaptest.NewLogger(e.t)
	e.c = New(e.reg, opts)
}

func (e *env) close() {
	if e.reg == nil {
		return
	}
	_ = e.c.Stop(context.Background())
	if err := e.reg.Close(); err != nil {
		e.t.Error(err)
	}
	e.reg = nil
}

// waitingFetch waits until a fetch started by the test is blocked waiting
// for the topic: it has taken its Notify channel, so a publish, release,
// drain, cancel or close that happens from now on ends its wait.
func (e *env) waitingFetch() { <-e.notified }

func (e *env) reopen() {
	e.t.Helper()
	e.close()
	e.open()
}

// publish appends n durable messages {"n":<i>} and returns the first offset.
func (e *env) publish(n int) int64 {
	e.t.Helper()
	first := int64(-1)
	for i := 0; i < n; i++ {
		off, err := e.q.Log().Append(context.Background(), []byte(fmt.Sprintf(`{"n":%d}`, e.q.HighWatermark())), contract.Durable)
		if err != nil {
			e.t.Fatal(err)
		}
		if first < 0 {
			first = off
		}
	}
	return first
}

func (e *env) acquire(group string) string {
	e.t.Helper()
	s, err := e.c.Acquire(testTopic, group)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) fetch(group, session string, max int, wait time.Duration) Batch {
	e.t.Helper()
	b, err := e.c.Fetch(context.Background(), testTopic, group, session, max, wait)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

func offsets(es []storage.Entry) []int64 {
	out := []int64{}
	for _, e := range es {
		out = append(out, e.Offset)
	}
	return out
}

func wantOffsets(t *testing.T, b Batch, from, to int64) {
	t.Helper()
	got := offsets(b.Entries)
	var want []int64
	for o := from; o < to; o++ {
		want = append(want, o)
	}
	if fmt.Sprint(got) != fmt.Sprint(append([]int64{}, want...)) {
		t.Fatalf("offsets = %v, want %v", got, want)
	}
}

func TestFirstFetchStartsAtZero(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(3)
	s := e.acquire("g")
	b := e.fetch("g", s, 10, 0)
	wantOffsets(t, b, 0, 3)
	if b.Committed != 0 || b.Next != 3 {
		t.Fatalf("committed=%d next=%d, want 0 3", b.Committed, b.Next)
	}
	if string(b.Entries[1].Payload) != `{"n":1}` {
		t.Fatalf("payload %q", b.Entries[1].Payload)
	}
}

func TestFetchRespectsHighWatermarkAndMax(t *testing.T) {
	e := newEnv(t, Options{MaxFetch: 4})
	e.publish(6)
	s := e.acquire("g")
	wantOffsets(t, e.fetch("g", s, 2, 0), 0, 2)
	wantOffsets(t, e.fetch("g", s, 100, 0), 2, 6) // clamped to MaxFetch=4, then the high watermark
	b := e.fetch("g", s, 100, 0)
	wantOffsets(t, b, 0, 0)
	if b.Next != 6 || e.q.HighWatermark() != 6 {
		t.Fatalf("next=%d hw=%d", b.Next, e.q.HighWatermark())
	}
	// An ACCEPTED publish is not visible before it is durable: the fetch
	// never returns an offset at or beyond the high watermark.
	e.publish(1)
	b = e.fetch("g", s, 100, 0)
	for _, en := range b.Entries {
		if en.Offset >= e.q.HighWatermark() {
			t.Fatalf("offset %d at or beyond the high watermark %d", en.Offset, e.q.HighWatermark())
		}
	}
	wantOffsets(t, b, 6, 7)
}

func TestLongPollWakesOnPublish(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.acquire("g")
	done := make(chan Batch, 1)
	start := time.Now()
	go func() {
		b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 10, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- b
	}()
	e.waitingFetch()
	e.publish(1)
	select {
	case b := <-done:
		wantOffsets(t, b, 0, 1)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("long poll took %s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not wake on publish")
	}
}

func TestLongPollEmptyAfterWait(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.acquire("g")
	start := time.Now()
	b := e.fetch("g", s, 10, 150*time.Millisecond)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("returned after %s, before the wait", d)
	}
	if len(b.Entries) != 0 {
		t.Fatalf("got %d entries, want 0", len(b.Entries))
	}
}

func TestAckCommitsDurably(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(5)
	s := e.acquire("g")
	wantOffsets(t, e.fetch("g", s, 5, 0), 0, 5)
	c, err := e.c.Ack(testTopic, "g", s, 2)
	if err != nil || c != 3 {
		t.Fatalf("ack = %d, %v; want 3", c, err)
	}
	// The checkpoint file holds 3 (8 bytes big-endian), the dispatcher format.
	raw, err := os.ReadFile(filepath.Join(e.root, testTopic, storage.CheckpointDir, "g"+storage.CheckpointExt))
	if err != nil || !bytes.Equal(raw, []byte{0, 0, 0, 0, 0, 0, 0, 3}) {
		t.Fatalf("checkpoint file = %v, %v", raw, err)
	}
	e.reopen()
	if got, err := e.c.Committed(testTopic, "g"); err != nil || got != 3 {
		t.Fatalf("committed after reopen = %d, %v; want 3", got, err)
	}
	s = e.acquire("g")
	wantOffsets(t, e.fetch("g", s, 10, 0), 3, 5)
}

func TestAckBeyondDelivered(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(5)
	s := e.acquire("g")
	if _, err := e.c.Ack(testTopic, "g", s, 0); !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("ack before any fetch: %v, want ErrNotDelivered", err)
	}
	wantOffsets(t, e.fetch("g", s, 2, 0), 0, 2)
	for _, off := range []int64{2, 4, 100} {
		if _, err := e.c.Ack(testTopic, "g", s, off); !errors.Is(err, ErrNotDelivered) {
			t.Fatalf("ack %d: %v, want ErrNotDelivered", off, err)
		}
	}
	if c, _ := e.c.Committed(testTopic, "g"); c != 0 {
		t.Fatalf("committed = %d after refused acks, want 0", c)
	}
}

func TestAckNeverMovesBack(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(5)
	s := e.acquire("g")
	e.fetch("g", s, 5, 0)
	if c, err := e.c.Ack(testTopic, "g", s, 3); err != nil || c != 4 {
		t.Fatalf("ack 3 = %d, %v", c, err)
	}
	for _, off := range []int64{3, 1, 0} {
		if c, err := e.c.Ack(testTopic, "g", s, off); err != nil || c != 4 {
			t.Fatalf("ack %d = %d, %v; want the unchanged 4", off, c, err)
		}
	}
	e.reopen()
	if c, _ := e.c.Committed(testTopic, "g"); c != 4 {
		t.Fatalf("committed after reopen = %d, want 4", c)
	}
}

func TestGroupBusy(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(1)
	s := e.acquire("g")
	if _, err := e.c.Acquire(testTopic, "g"); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("second acquire: %v, want ErrGroupBusy", err)
	}
	e.acquire("other") // another group of the same topic is independent
	// The holder keeps working.
	wantOffsets(t, e.fetch("g", s, 10, 0), 0, 1)
}

func TestLeaseExpiryRedeliversAndRefusesStaleAck(t *testing.T) {
	e := newEnv(t, Options{LeaseTimeout: 50 * time.Millisecond})
	e.publish(5)
	s1 := e.acquire("g")
	wantOffsets(t, e.fetch("g", s1, 5, 0), 0, 5)
	if _, err := e.c.Ack(testTopic, "g", s1, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(120 * time.Millisecond)
	// Lazily released by the next request: a second consumer gets the group
	// and redelivery starts at the committed offset.
	s2 := e.acquire("g")
	wantOffsets(t, e.fetch("g", s2, 10, 0), 2, 5)
	// The stale consumer can neither commit nor fetch.
	if _, err := e.c.Ack(testTopic, "g", s1, 4); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("stale ack: %v, want ErrSessionExpired", err)
	}
	if _, err := e.c.Fetch(context.Background(), testTopic, "g", s1, 1, 0); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("stale fetch: %v, want ErrSessionExpired", err)
	}
	if c, _ := e.c.Committed(testTopic, "g"); c != 2 {
		t.Fatalf("committed = %d, want 2", c)
	}
	// An expired session is refused even when nobody took the group over.
	time.Sleep(120 * time.Millisecond)
	if _, err := e.c.Ack(testTopic, "g", s2, 2); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ack after expiry: %v, want ErrSessionExpired", err)
	}
	if _, err := e.c.Ack(testTopic, "g", "unknown", 0); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ack from an unknown session: %v, want ErrSessionExpired", err)
	}
}

func TestLeaseRenewedByFetchAndAck(t *testing.T) {
	e := newEnv(t, Options{LeaseTimeout: 300 * time.Millisecond})
	e.publish(10)
	s := e.acquire("g")
	for i := int64(0); i < 6; i++ {
		time.Sleep(100 * time.Millisecond)
		wantOffsets(t, e.fetch("g", s, 1, 0), i, i+1)
		time.Sleep(100 * time.Millisecond)
		if _, err := e.c.Ack(testTopic, "g", s, i); err != nil {
			t.Fatalf("ack %d after %d renewals: %v", i, i, err)
		}
	}
}

func TestWaitingFetchHoldsLease(t *testing.T) {
	e := newEnv(t, Options{LeaseTimeout: 150 * time.Millisecond})
	s := e.acquire("g")
	b := e.fetch("g", s, 1, 500*time.Millisecond) // longer than the lease
	if len(b.Entries) != 0 {
		t.Fatal("unexpected entries")
	}
	if _, err := e.c.Acquire(testTopic, "g"); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("acquire right after a long fetch: %v, want ErrGroupBusy (the fetch renewed the lease)", err)
	}
}

func TestJanitorReleasesExpiredLeases(t *testing.T) {
	e := newEnv(t, Options{LeaseTimeout: 30 * time.Millisecond, JanitorInterval: 10 * time.Millisecond})
	if err := e.c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.acquire("g")
	deadline := time.Now().Add(5 * time.Second)
	for {
		// Look at the state directly: every public call would release lazily.
		e.c.mu.Lock()
		g := e.c.groups[key{testTopic, "g"}]
		e.c.mu.Unlock()
		g.mu.Lock()
		free := g.lease == nil
		g.mu.Unlock()
		if free {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("janitor did not release the expired lease")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRedeliveryAfterRelease(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(5)
	s1 := e.acquire("g")
	wantOffsets(t, e.fetch("g", s1, 5, 0), 0, 5)
	if _, err := e.c.Ack(testTopic, "g", s1, 2); err != nil {
		t.Fatal(err)
	}
	if ok, err := e.c.Release(testTopic, "g", s1); err != nil || !ok {
		t.Fatalf("release = %v, %v", ok, err)
	}
	if ok, _ := e.c.Release(testTopic, "g", s1); ok {
		t.Fatal("second release reported released")
	}
	if _, err := e.c.Ack(testTopic, "g", s1, 3); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ack after release: %v", err)
	}
	s2 := e.acquire("g")
	wantOffsets(t, e.fetch("g", s2, 10, 0), 3, 5)
}

func TestReleaseDuringWait(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.acquire("g")
	errc := make(chan error, 1)
	go func() {
		_, err := e.c.Fetch(context.Background(), testTopic, "g", s, 1, 200*time.Millisecond)
		errc <- err
	}()
	e.waitingFetch()
	e.c.Release(testTopic, "g", s)
	s2 := e.acquire("g") // free at once although a fetch of s is waiting
	e.publish(1)
	if err := <-errc; !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("fetch of a released session: %v, want ErrSessionExpired", err)
	}
	wantOffsets(t, e.fetch("g", s2, 1, 0), 0, 1)
}

func TestDrainAndCancelEndWaits(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.acquire("g")
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := e.c.Fetch(ctx, testTopic, "g", s, 1, 10*time.Second)
		errc <- err
	}()
	e.waitingFetch()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled fetch: %v", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 1, 10*time.Second)
		if err != nil || len(b.Entries) != 0 {
			t.Errorf("drained fetch = %v, %v", b.Entries, err)
		}
	}()
	e.waitingFetch()
	e.c.Drain(context.Background())
	wg.Wait()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("drain took %s", d)
	}
}

func TestTopicCloseEndsWait(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.acquire("g")
	errc := make(chan error, 1)
	go func() {
		_, err := e.c.Fetch(context.Background(), testTopic, "g", s, 1, 10*time.Second)
		errc <- err
	}()
	e.waitingFetch()
	if err := e.reg.Close(); err != nil { // the topic closes; the coordinator is not drained
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("fetch on a closed topic: %v, want contract.ErrClosed", err)
	}
}

func TestNameTakenByDispatcher(t *testing.T) {
	e := newEnv(t, Options{Reserved: func(n string) bool { return n == "order-dispatcher" }})
	e.publish(1)
	if _, err := e.c.Acquire(testTopic, "order-dispatcher"); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("acquire: %v, want ErrNameTaken", err)
	}
	if _, err := e.c.Ack(testTopic, "order-dispatcher", "x", 0); !errors.Is(err, ErrNameTaken) {
		t.Fatalf("ack: %v, want ErrNameTaken", err)
	}
	if _, err := os.Stat(filepath.Join(e.root, testTopic, storage.CheckpointDir, "order-dispatcher"+storage.CheckpointExt)); !os.IsNotExist(err) {
		t.Fatalf("checkpoint of the dispatcher name touched: %v", err)
	}
}

func TestUnknownTopicAndInvalidNames(t *testing.T) {
	e := newEnv(t, Options{})
	if _, err := e.c.Acquire("no.such.topic", "g"); !errors.Is(err, ErrUnknownTopic) {
		t.Fatalf("acquire: %v, want ErrUnknownTopic", err)
	}
	if _, ok := e.reg.Get("no.such.topic"); ok {
		t.Fatal("fetching created the topic")
	}
	if _, err := os.Stat(filepath.Join(e.root, "no.such.topic")); !os.IsNotExist(err) {
		t.Fatalf("topic directory created: %v", err)
	}
	for _, tc := range []struct{ topic, group string }{
		{"bad..topic", "g"}, {"", "g"}, {testTopic, ""}, {testTopic, ".hidden"}, {testTopic, "a/b"}, {testTopic, string(bytes.Repeat([]byte("x"), 201))},
	} {
		if _, err := e.c.Acquire(tc.topic, tc.group); !errors.Is(err, ErrInvalidName) {
			t.Errorf("acquire(%q, %q): %v, want ErrInvalidName", tc.topic, tc.group, err)
		}
	}
}

func TestCorruptEntrySkipped(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(3)
	e.close()
	// Flip one payload byte of offset 1 ({"n":1}); recovery checks only the
	// last entry, so the damage is found at read time.
	seg := filepath.Join(e.root, testTopic, "0000000000000000000.mmm")
	raw, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(raw, []byte(`{"n":1}`))
	if i < 0 {
		t.Fatal("entry not found")
	}
	raw[i+5] = '7'
	if err := os.WriteFile(seg, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	e.open()
	s := e.acquire("g")
	b := e.fetch("g", s, 10, 0)
	if got := fmt.Sprint(offsets(b.Entries)); got != "[0 2]" {
		t.Fatalf("offsets = %s, want [0 2] (offset 1 skipped)", got)
	}
	if c, err := e.c.Ack(testTopic, "g", s, 2); err != nil || c != 3 {
		t.Fatalf("ack past the skipped offset = %d, %v", c, err)
	}
}

func TestConcurrentFetchersNeverShareOffsets(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(200)
	s := e.acquire("g")
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 7, 0)
				if err != nil {
					t.Error(err)
					return
				}
				if len(b.Entries) == 0 {
					return
				}
				mu.Lock()
				for _, en := range b.Entries {
					seen[en.Offset]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 200 {
		t.Fatalf("saw %d distinct offsets, want 200", len(seen))
	}
	for o, n := range seen {
		if n != 1 {
			t.Fatalf("offset %d delivered %d times within one session", o, n)
		}
	}
}

// A client inventing group names cannot grow the coordinator beyond
// MaxGroups; known pairs keep working.
func TestMaxGroups(t *testing.T) {
	e := newEnv(t, Options{MaxGroups: 2})
	e.publish(1)
	e.acquire("g1")
	e.acquire("g2")
	if _, err := e.c.Acquire(testTopic, "g3"); !errors.Is(err, ErrTooManyGroups) {
		t.Fatalf("third group: %v, want ErrTooManyGroups", err)
	}
	if st, code := HTTPStatus(fmt.Errorf("x: %w", ErrTooManyGroups)); st != 503 || code != contract.CodeTooManyGroups {
		t.Fatalf("HTTPStatus = %d %s", st, code)
	}
	if _, err := e.c.Committed(testTopic, "g1"); err != nil {
		t.Fatalf("known group: %v", err)
	}
}

// While the holder waits in a long poll its lease keeps running down, but
// the group stays busy until the poll returns and renews it: GROUP_BUSY
// must then report at least a whole lease, never 0.
func TestBusyDuringLongPollReportsAWholeLease(t *testing.T) {
	e := newEnv(t, Options{LeaseTimeout: 100 * time.Millisecond})
	s := e.acquire("g")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.c.Fetch(ctx, testTopic, "g", s, 1, 10*time.Second)
	}()
	e.waitingFetch()
	time.Sleep(400 * time.Millisecond) // well past the lease; the poll still waits
	_, err := e.c.Acquire(testTopic, "g")
	var be *BusyError
	if !errors.As(err, &be) || be.LeaseLeft < 100*time.Millisecond {
		t.Fatalf("acquire during the poll: %v (%+v), want busy for a whole lease", err, be)
	}
	cancel() // ends the poll
	<-done
}

// Releasing a session ends its waiting long poll at once (SESSION_EXPIRED)
// instead of at the wait timeout.
func TestReleaseEndsWaitingFetch(t *testing.T) {
	e := newEnv(t, Options{})
	s := e.acquire("g")
	errc := make(chan error, 1)
	go func() {
		_, err := e.c.Fetch(context.Background(), testTopic, "g", s, 1, 20*time.Second)
		errc <- err
	}()
	e.waitingFetch()
	if ok, err := e.c.Release(testTopic, "g", s); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrSessionExpired) {
			t.Fatalf("waiting fetch after release: %v, want ErrSessionExpired", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting fetch did not end when its session was released")
	}
}
