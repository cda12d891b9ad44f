package dedup

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// clock is a settable clock for the window.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.UnixMilli(1_800_000_000_000).UnixNano())
	return c
}

// memLog is a Source holding stored messages in memory.
type memLog struct {
	mu      sync.Mutex
	entries [][]byte
	start   int64
	corrupt map[int64]bool // offsets ReadBatch reports as corrupt
	failing bool           // ReadBatch fails (an I/O error)
}

func (l *memLog) HighWatermark() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.start + int64(len(l.entries))
}
func (l *memLog) StartOffset() int64 { return l.start }
func (l *memLog) ReadBatch(from int64, max int) ([]contract.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing {
		return nil, errors.New("read: input/output error")
	}
	var out []contract.Entry
	for off := from; off < l.start+int64(len(l.entries)) && len(out) < max; off++ {
		if l.corrupt[off] {
			return out, &contract.CorruptionError{Topic: "t", Offset: off, Reason: "crc mismatch"}
		}
		out = append(out, contract.Entry{Offset: off, Payload: l.entries[off-l.start]})
	}
	return out, nil
}

// add stores a message with id at time at (fromProducer as given).
func (l *memLog) add(t *testing.T, id string, fromProducer bool, at time.Time) {
	t.Helper()
	producerID := ""
	if fromProducer {
		producerID = id
	}
	b, err := contract.EncodeMessage("t", []byte(`1`), producerID, nil, at)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.entries = append(l.entries, b)
	l.mu.Unlock()
}

func newTracker(t *testing.T, c *clock, opts Options) *Tracker {
	t.Helper()
	if opts.Window == 0 {
		opts.Window = time.Minute
	}
	opts.Now = c.now
	return New(opts)
}

// begin runs Begin for ids and fails the test on error.
func begin(t *testing.T, w *Window, level contract.AckLevel, ids ...string) (*Claim, []Result) {
	t.Helper()
	res := make([]Result, len(ids))
	c, err := w.Begin(context.Background(), ids, level, res)
	if err != nil {
		t.Fatal(err)
	}
	return c, res
}

func TestNilTrackerIsOff(t *testing.T) {
	if tr := New(Options{}); tr != nil {
		t.Fatal("window 0 must turn deduplication off")
	}
	var tr *Tracker
	w := tr.Open("t", &memLog{})
	c, res := begin(t, w, contract.Durable, "a", "a")
	if c != nil || res[0].Verdict != Store || res[1].Verdict != Store || res[1].Index != 1 {
		t.Fatalf("nil window: %v %+v", c, res)
	}
	c.Resolve(0, nil) // no-op on nil
	w.Reset()
	w.Close()
}

// TestDuplicateWithinWindow: the second publish of an id is a duplicate
// with the first offset until the window ends; then it is new again. An
// id without producer marks ("") is never one; ids are per window (topic).
func TestDuplicateWithinWindow(t *testing.T) {
	c := newClock()
	tr := newTracker(t, c, Options{Window: time.Minute})
	w := tr.Open("t", &memLog{})
	claim, res := begin(t, w, contract.Durable, "a", "")
	if claim == nil || res[0] != (Result{Verdict: Store, Index: 0}) || res[1] != (Result{Verdict: Store, Index: 1}) {
		t.Fatalf("first: %+v", res)
	}
	claim.Resolve(40, nil)
	if first, err := claim.Outcome(); first != 40 || err != nil {
		t.Fatalf("outcome %d %v", first, err)
	}
	c.advance(59 * time.Second)
	claim2, res := begin(t, w, contract.Durable, "a", "")
	if res[0] != (Result{Verdict: Duplicate, Offset: 40}) || res[1].Verdict != Store || res[1].Index != 0 {
		t.Fatalf("within the window: %+v", res)
	}
	if claim2 != nil {
		t.Fatal("nothing new with an id was claimed, yet a claim came back")
	}
	other := tr.Open("u", &memLog{})
	oc, res := begin(t, other, contract.Durable, "a")
	if res[0].Verdict != Store {
		t.Fatalf("same id on another topic: %+v", res)
	}
	oc.Resolve(0, nil)
	c.advance(2 * time.Second)
	if s := tr.Stats(); s.IDs != 1 || s.Bytes != EntryBytes {
		t.Fatalf("stats once t's id expired: %+v, want only u's id counted", s)
	}
	claim3, res := begin(t, w, contract.Durable, "a")
	if claim3 == nil || res[0].Verdict != Store {
		t.Fatalf("after the window: %+v", res)
	}
	claim3.Resolve(50, nil)
	if _, res := begin(t, w, contract.Durable, "a"); res[0] != (Result{Verdict: Duplicate, Offset: 50}) {
		t.Fatalf("after republishing: %+v", res)
	}
	if s := tr.Stats(); s.Duplicates != 2 || s.IDs != 2 {
		t.Fatalf("stats %+v, want 2 duplicates, 2 ids (one per topic)", s)
	}
}

// TestDuplicateInOneCall: a repeated id within one call is a duplicate of
// the earlier message of the call; only the first is stored.
func TestDuplicateInOneCall(t *testing.T) {
	w := newTracker(t, newClock(), Options{}).Open("t", &memLog{})
	claim, res := begin(t, w, contract.Durable, "a", "b", "a", "", "b")
	want := []Result{{Verdict: Store, Index: 0}, {Verdict: Store, Index: 1}, {Verdict: DuplicateInCall, Of: 0},
		{Verdict: Store, Index: 2}, {Verdict: DuplicateInCall, Of: 1}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", res, want)
	}
	claim.Resolve(7, nil)
	if _, res := begin(t, w, contract.Durable, "b"); res[0] != (Result{Verdict: Duplicate, Offset: 8}) {
		t.Fatalf("b after the call: %+v, want offset 8 (7 + its index 1)", res)
	}
}

// startWaiting runs Begin(ids) on a goroutine and returns once it waits
// for another call's claim; the result arrives on the channel.
func startWaiting(t *testing.T, w *Window, level contract.AckLevel, ids ...string) <-chan []Result {
	t.Helper()
	waiting := make(chan struct{}, 1)
	w.waiting = func() { waiting <- struct{}{} }
	t.Cleanup(func() { w.waiting = nil })
	out := make(chan []Result, 1)
	go func() {
		res := make([]Result, len(ids))
		c, err := w.Begin(context.Background(), ids, level, res)
		if err != nil {
			t.Error(err)
		}
		if c != nil {
			c.Resolve(99, nil)
		}
		out <- res
	}()
	select {
	case <-waiting:
	case r := <-out:
		t.Fatalf("Begin did not wait for the claim in flight: %+v", r)
	}
	return out
}

// TestDuplicateWaitsForOriginal: a publish of an id whose original is
// still being committed waits; it answers the original's offset when the
// original was stored, and is tried as a new message when it failed. An
// ACCEPTED duplicate does not wait.
func TestDuplicateWaitsForOriginal(t *testing.T) {
	w := newTracker(t, newClock(), Options{}).Open("t", &memLog{})
	orig, _ := begin(t, w, contract.Durable, "a")
	if _, res := begin(t, w, contract.Accepted, "a"); res[0] != (Result{Verdict: Duplicate, Offset: -1}) {
		t.Fatalf("ACCEPTED duplicate of a claim in flight: %+v", res)
	}
	got := startWaiting(t, w, contract.Durable, "a")
	orig.Resolve(12, nil)
	if res := <-got; res[0] != (Result{Verdict: Duplicate, Offset: 12}) {
		t.Fatalf("after the original was stored: %+v", res)
	}

	orig, _ = begin(t, w, contract.Written, "b")
	got = startWaiting(t, w, contract.Written, "b")
	orig.Resolve(-1, errors.New("fsync: input/output error"))
	if res := <-got; res[0] != (Result{Verdict: Store, Index: 0}) {
		t.Fatalf("after the original failed: %+v, want to be stored as new", res)
	}
	// The retry's claim resolved at 99 (startWaiting): b is remembered there.
	if _, res := begin(t, w, contract.Durable, "b"); res[0] != (Result{Verdict: Duplicate, Offset: 99}) {
		t.Fatalf("b after the retry: %+v", res)
	}
}

// TestCrossedCallsDoNotDeadlock: calls claiming the same ids in opposite
// orders, concurrently, all finish, and every id is stored exactly once.
func TestCrossedCallsDoNotDeadlock(t *testing.T) {
	w := newTracker(t, newClock(), Options{}).Open("t", &memLog{})
	var mu sync.Mutex
	next := int64(0)
	stores := map[string]int{}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				ids := []string{fmt.Sprint("x", i), fmt.Sprint("y", i)}
				if g%2 == 1 {
					ids[0], ids[1] = ids[1], ids[0]
				}
				res := make([]Result, 2)
				c, err := w.Begin(context.Background(), ids, contract.Durable, res)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				first := next
				for j, r := range res {
					if r.Verdict == Store {
						stores[ids[j]]++
						next++
					}
				}
				mu.Unlock()
				runtime.Gosched()
				c.Resolve(first, nil)
			}
		}()
	}
	wg.Wait()
	for id, n := range stores {
		if n != 1 {
			t.Fatalf("%s stored %d times", id, n)
		}
	}
	if len(stores) != 400 {
		t.Fatalf("%d ids stored, want 400", len(stores))
	}
}

// TestBeginHonoursContext: a wait for another call's claim ends with ctx.
func TestBeginHonoursContext(t *testing.T) {
	w := newTracker(t, newClock(), Options{}).Open("t", &memLog{})
	begin(t, w, contract.Durable, "a") // never resolved
	ctx, cancel := context.WithCancel(context.Background())
	w.waiting = cancel
	if _, err := w.Begin(ctx, []string{"a"}, contract.Durable, make([]Result, 1)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Begin: %v", err)
	}
}

// TestRebuildFromLog: a new window (a restart) remembers the producer ids
// the log stored within the window, at their offsets; not generated ids,
// not older ones, at most MaxIDs (the newest).
func TestRebuildFromLog(t *testing.T) {
	c := newClock()
	l := &memLog{start: 5}
	l.add(t, "old", true, c.now().Add(-3*time.Minute))
	l.add(t, "gen", false, c.now().Add(-30*time.Second))
	for i := 0; i < 10; i++ {
		l.add(t, fmt.Sprint("p", i), true, c.now().Add(-time.Duration(10-i)*time.Second))
	}
	tr := newTracker(t, c, Options{Window: 2 * time.Minute, MaxIDs: 8})
	w := tr.Open("t", l)
	_, res := begin(t, w, contract.Durable, "old", "gen", "p1", "p2", "p9")
	want := []Result{{Verdict: Store, Index: 0}, {Verdict: Store, Index: 1}, {Verdict: Store, Index: 2},
		{Verdict: Duplicate, Offset: 9}, {Verdict: Duplicate, Offset: 16}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("after rebuild got %+v\nwant %+v (p1 is older than the newest 8 ids)", res, want)
	}
	if s := tr.Stats(); s.Rebuilt != 8 {
		t.Fatalf("rebuilt %d ids, want 8 (p2..p9)", s.Rebuilt)
	}
	// Reset forgets and rebuilds on the next call.
	l.add(t, "later", true, c.now())
	w.Reset()
	if _, res := begin(t, w, contract.Durable, "later"); res[0] != (Result{Verdict: Duplicate, Offset: 17}) {
		t.Fatalf("after Reset: %+v", res)
	}
}

// TestRebuildSkipsMessagesWithoutIDs: max-ids counts producer ids, not
// entries: ids published before many messages without one (other clients,
// bulk batches) are found again after a restart (an operator trial found
// them forgotten when the rebuild read only the last max-ids entries).
func TestRebuildSkipsMessagesWithoutIDs(t *testing.T) {
	c := newClock()
	l := &memLog{}
	l.add(t, "a", true, c.now().Add(-time.Minute))
	l.add(t, "b", true, c.now().Add(-time.Minute))
	for i := 0; i < 50; i++ {
		l.add(t, "", false, c.now().Add(-30*time.Second))
	}
	tr := newTracker(t, c, Options{Window: 2 * time.Minute, MaxIDs: 3})
	_, res := begin(t, tr.Open("t", l), contract.Durable, "a", "b")
	if res[0] != (Result{Verdict: Duplicate, Offset: 0}) || res[1] != (Result{Verdict: Duplicate, Offset: 1}) {
		t.Fatalf("after 50 messages without ids and a restart: %+v, want both duplicates", res)
	}
}

// TestRebuildSkipsCorruptEntries: a corrupt entry is skipped (its id is
// lost: a retry is stored again) and the ids on both sides of it are found.
func TestRebuildSkipsCorruptEntries(t *testing.T) {
	c := newClock()
	l := &memLog{corrupt: map[int64]bool{1: true, 2: true}}
	for _, id := range []string{"a", "b", "c", "d"} {
		l.add(t, id, true, c.now())
	}
	_, res := begin(t, newTracker(t, c, Options{}).Open("t", l), contract.Durable, "a", "b", "c", "d")
	want := []Result{{Verdict: Duplicate, Offset: 0}, {Verdict: Store, Index: 0}, {Verdict: Store, Index: 1}, {Verdict: Duplicate, Offset: 3}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %+v", res, want)
	}
}

// TestEvictionCaps: over MaxIDs a topic forgets its oldest ids, over
// MaxBytes the oldest of any topic go; both are counted as evictions
// (their window had not ended), and Close gives the memory back.
func TestEvictionCaps(t *testing.T) {
	c := newClock()
	tr := newTracker(t, c, Options{MaxIDs: 3, MaxBytes: 5 * EntryBytes})
	a, b := tr.Open("a", &memLog{}), tr.Open("b", &memLog{})
	store := func(w *Window, id string, off int64) {
		c.advance(time.Millisecond)
		claim, _ := begin(t, w, contract.Durable, id)
		claim.Resolve(off, nil)
	}
	for i := 0; i < 4; i++ {
		store(a, fmt.Sprint("a", i), int64(i))
	}
	if _, res := begin(t, a, contract.Durable, "a0"); res[0].Verdict != Store {
		t.Fatalf("a0 over max-ids: %+v, want forgotten", res)
	}
	if s := tr.Stats(); s.IDs != 3 || s.Evicted != 1 || s.Bytes != 3*EntryBytes {
		t.Fatalf("after max-ids: %+v", s)
	}
	store(b, "b0", 0)
	store(b, "b1", 1)
	store(b, "b2", 2) // 6 ids: over 5 * EntryBytes; the next Begin evicts the oldest of all
	begin(t, b, contract.Durable, "probe")
	if _, res := begin(t, a, contract.Durable, "a1"); res[0].Verdict != Store {
		t.Fatalf("a1, the oldest id of all, survived the max-bytes cap: %+v", res)
	}
	if _, res := begin(t, b, contract.Durable, "b0"); res[0].Verdict != Duplicate {
		t.Fatalf("b0 was evicted instead of the oldest: %+v", res)
	}
	if s := tr.Stats(); s.Bytes > 5*EntryBytes || s.Evicted != 2 {
		t.Fatalf("after max-bytes: %+v", s)
	}
	a.Close()
	b.Close()
	if s := tr.Stats(); s.IDs != 0 || s.Bytes != 0 {
		t.Fatalf("after Close: %+v", s)
	}
}

// TestEntryBytesCoversMemory measures the heap one remembered id costs
// (map entry and ring slot) and checks that EntryBytes, the figure counted
// against max-bytes and given in the README, is not below it.
func TestEntryBytesCoversMemory(t *testing.T) {
	const n = 100000
	c := newClock()
	tr := newTracker(t, c, Options{MaxIDs: n})
	w := tr.Open("t", &memLog{})
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint("id-", i)
	}
	res := make([]Result, 1)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, id := range ids {
		claim, err := w.Begin(context.Background(), []string{id}, contract.Durable, res)
		if err != nil {
			t.Fatal(err)
		}
		claim.Resolve(int64(i), nil)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes of heap per remembered id (EntryBytes = %d)", per, EntryBytes)
	if per > EntryBytes {
		t.Fatalf("%.0f bytes per id, more than EntryBytes (%d)", per, EntryBytes)
	}
	runtime.KeepAlive(w)
}

// BenchmarkBeginResolve is the window's own CPU cost per published id: a
// Begin that finds the id new and claims it, and the Resolve that
// remembers it, on a window that holds max-ids ids (each new id evicts the
// oldest), as a publish with a producer id pays it on top of a publish
// without one.
//
//	go test -run '^$' -bench BeginResolve ./modules/dedup/
func BenchmarkBeginResolve(b *testing.B) {
	c := newClock()
	tr := New(Options{Window: time.Hour, MaxIDs: 100000, Now: c.now})
	w := tr.Open("t", &memLog{})
	ids := make([]string, 200000)
	for i := range ids {
		ids[i] = fmt.Sprintf("producer-7-%d", i)
	}
	res := make([]Result, 1)
	one := make([]string, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		one[0] = ids[i%len(ids)]
		claim, err := w.Begin(context.Background(), one, contract.Durable, res)
		if err != nil {
			b.Fatal(err)
		}
		if claim != nil {
			claim.Resolve(int64(i), nil)
		}
	}
}

// TestRebuildRetriedAfterReadError: a rebuild that fails to read the log
// leaves the window unloaded, so the next publish with an id tries again
// (a review found the window left empty until the next restart).
func TestRebuildRetriedAfterReadError(t *testing.T) {
	c := newClock()
	l := &memLog{failing: true}
	l.add(t, "a", true, c.now())
	w := newTracker(t, c, Options{}).Open("t", l)
	claim, res := begin(t, w, contract.Durable, "b")
	if res[0].Verdict != Store {
		t.Fatalf("while the log fails: %+v", res)
	}
	claim.Resolve(1, nil)
	l.mu.Lock()
	l.failing = false
	l.mu.Unlock()
	if _, res := begin(t, w, contract.Durable, "a"); res[0] != (Result{Verdict: Duplicate, Offset: 0}) {
		t.Fatalf("after the log reads again: %+v, want a found by the retried rebuild", res)
	}
}

// TestRebuildPassesOverScheduledMessages: a message the scheduler moved
// into the topic (header mmmq-schedule-id, a producer id, the timestamp of
// its publish, older than the window) neither makes a later direct publish
// of its id a duplicate after a restart (the two are independent) nor ends
// the backwards scan before the direct publishes stored before it.
func TestRebuildPassesOverScheduledMessages(t *testing.T) {
	c := newClock()
	l := &memLog{}
	l.add(t, "a", true, c.now().Add(-10*time.Second))
	moved, err := contract.EncodeMessage("t", []byte(`1`), "s", map[string]string{contract.HeaderScheduleID: "x-1"}, c.now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	l.entries = append(l.entries, moved)
	_, res := begin(t, newTracker(t, c, Options{}).Open("t", l), contract.Durable, "a", "s")
	want := []Result{{Verdict: Duplicate, Offset: 0}, {Verdict: Store, Index: 0}}
	if fmt.Sprint(res) != fmt.Sprint(want) {
		t.Fatalf("got %+v, want %+v (a: published directly before the moved message; s: only scheduled)", res, want)
	}
}
