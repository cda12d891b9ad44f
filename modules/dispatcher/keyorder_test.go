package dispatcher

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// keyMsg is the stored JSON of message n of topic with ordering key key
// ("" for none).
func keyMsg(t testing.TB, topic string, n int, key string) []byte {
	t.Helper()
	b, err := contract.EncodeKeyedMessage(topic, json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), fmt.Sprintf("m-%d", n), key, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// stuckKeyConsumer answers 503 to every push of key and ACKs the others.
func stuckKeyConsumer(t testing.TB, key string) *consumer {
	return newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Key == key {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		answer(w, ACK)
	})
}

// orderModel is a consumer's view of ordering "key": it fails the test
// when a key's message is pushed while an earlier message of that key is
// unfinished or another push of that key is outstanding.
type orderModel struct {
	t          *testing.T
	maxResends int
	keys       []string // by offset

	mu       sync.Mutex
	inFlight map[string]int64 // key -> offset outstanding
	nacks    map[int64]int
	finished map[int64]bool
	pushes   map[int64]int
}

func newOrderModel(t *testing.T, keys []string, maxResends int) *orderModel {
	return &orderModel{t: t, keys: keys, maxResends: maxResends, inFlight: map[string]int64{},
		nacks: map[int64]int{}, finished: map[int64]bool{}, pushes: map[int64]int{}}
}

// begin checks a push of off; it returns false (and the test fails) on a
// violation.
func (o *orderModel) begin(off int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.pushes[off]++
	k := o.keys[off]
	if k == "" {
		return true
	}
	if prev, busy := o.inFlight[k]; busy {
		o.t.Errorf("key %q: offset %d pushed while %d is outstanding", k, off, prev)
		return false
	}
	for e := int64(0); e < off; e++ {
		if o.keys[e] == k && !o.finished[e] {
			o.t.Errorf("key %q: offset %d pushed before %d was finished", k, off, e)
			return false
		}
	}
	o.inFlight[k] = off
	return true
}

// end records the consumer's answer to off.
func (o *orderModel) end(off int64, out Outcome, normal bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if k := o.keys[off]; k != "" {
		delete(o.inFlight, k)
	}
	switch {
	case normal && out == ACK:
		o.finished[off] = true
	case normal && out == NACK:
		o.nacks[off]++
		if o.nacks[off] > o.maxResends {
			o.finished[off] = true // dead-lettered
		}
	}
}

func (o *orderModel) allFinished() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.finished) == len(o.keys)
}

// Under ordering "key", a key whose consumer answers 503 is parked alone:
// every other key's messages are delivered, in offset order per key,
// while the checkpoint waits at the parked key's first message; the status
// names the parked key. Once the consumer answers it, everything is
// delivered and the checkpoint reaches the end.
func TestKeyOrderingParksOnlyTheFailingKey(t *testing.T) {
	var keys []string
	tp := newMemTopic(t, t.TempDir(), "t")
	for i := range 40 {
		k := fmt.Sprintf("k%d", i%4)
		keys = append(keys, k)
		tp.appendStored(keyMsg(t, "t", i, k))
	}
	model := newOrderModel(t, keys, 3)
	var mu sync.Mutex
	stuck := true
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if !model.begin(r.Offset) {
			answer(w, ACK)
			model.end(r.Offset, ACK, true)
			return
		}
		mu.Lock()
		fail := stuck && r.Key == "k1"
		mu.Unlock()
		if fail {
			model.end(r.Offset, "", false)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		model.end(r.Offset, ACK, true)
		answer(w, ACK)
	})
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(4).WithOrdering(OrderKey)
	m := startManager(t, newMemSource(tp), testOptions(), d)

	eventually(t, "the other keys delivered", func() bool {
		st := status(m, "d", "t")
		return st.Delivered == 30 && st.ParkedKeys == 1
	})
	st := status(m, "d", "t")
	if st.Committed != 1 {
		t.Errorf("committed %d, want 1 (the parked key's first message holds it)", st.Committed)
	}
	if st.Ordering != OrderKey || len(st.Parked) != 1 || st.Parked[0].Key != "k1" || st.Parked[0].Offset != 1 || st.Parked[0].Attempts < 1 {
		t.Errorf("status: ordering %q, parked %+v; want key k1 at offset 1", st.Ordering, st.Parked)
	}
	if st.Parked[0].LastError == "" || st.Parked[0].NextRetry.IsZero() || st.Parked[0].Since.IsZero() {
		t.Errorf("parked key without its error, since or next retry: %+v", st.Parked[0])
	}
	for _, r := range c.requests() {
		if r.Key == "k1" && r.Offset != 1 {
			t.Errorf("k1's offset %d pushed while offset 1 is parked", r.Offset)
		}
	}
	mu.Lock()
	stuck = false
	mu.Unlock()
	waitCommitted(t, m, "d", "t", 40)
	if !model.allFinished() {
		t.Error("not every message finished")
	}
	eventually(t, "the status to show no parked key", func() bool {
		st := status(m, "d", "t")
		return st.ParkedKeys == 0 && len(st.Parked) == 0 && st.Unacked == 0 && st.Delivered == 40
	})
}

// max-unacked bounds how far the other keys run ahead of a parked one, and
// the status says which key holds the window.
func TestKeyOrderingMaxUnackedNamesTheHoldingKey(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t")
	for i := range 30 {
		k := "other"
		if i == 2 {
			k = "stuck"
		}
		tp.appendStored(keyMsg(t, "t", i, k))
	}
	c := stuckKeyConsumer(t, "stuck")
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(2).WithOrdering(OrderKey).WithMaxUnacked(10)
	m := startManager(t, newMemSource(tp), testOptions(), d)
	// The status is published at most every keySnapEvery.
	eventually(t, "the window to fill", func() bool {
		st := status(m, "d", "t")
		return st.Unacked == 10 && st.Delivered == 11 && st.HeldBy == "stuck" && st.Committed == 2
	})
	time.Sleep(50 * time.Millisecond) // nothing past the window may come
	st := status(m, "d", "t")
	if st.Delivered != 11 || st.Committed != 2 || st.HeldBy != "stuck" || st.MaxUnacked != 10 {
		t.Errorf("delivered %d committed %d held by %q max %d; want 11, 2, \"stuck\", 10", st.Delivered, st.Committed, st.HeldBy, st.MaxUnacked)
	}
	for _, r := range c.requests() {
		if r.Offset >= 12 {
			t.Errorf("offset %d pushed past the window (checkpoint 2, max-unacked 10)", r.Offset)
		}
	}
}

// A NACK parks the key (its resend waits the backoff) and NACK exhaustion
// dead-letters that message and releases the key: the key's next message
// follows.
func TestKeyOrderingNACKExhaustionReleasesTheKey(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t")
	keys := []string{"a", "a", "b", "a"}
	for i, k := range keys {
		tp.appendStored(keyMsg(t, "t", i, k))
	}
	model := newOrderModel(t, keys, 3)
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		model.begin(r.Offset)
		out := ACK
		if r.Offset == 0 {
			out = NACK
		}
		model.end(r.Offset, out, true)
		answer(w, out)
	})
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(4).WithOrdering(OrderKey)
	m := startWithPublisher(t, src, pub, testOptions(), d)
	waitCommitted(t, m, "d", "t", 4)
	if n := len(pub.seen["dead-letter.d"]); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	var zero []int64
	for _, r := range c.requests() {
		if r.Offset == 0 {
			zero = append(zero, int64(r.Attempt))
		}
	}
	if !slices.Equal(zero, []int64{1, 2, 3, 4}) {
		t.Errorf("offset 0 attempts %v, want 1..4", zero)
	}
}

// A property test of ordering "key": random keys (and messages without
// one), random max-in-flight and batches, and a consumer answering ACK,
// NACK, 503 or a dropped connection at random. Whatever the answers, a key's
// message is never pushed while an earlier one of that key is unfinished
// or outstanding, every message is finished, and the checkpoint reaches the
// end.
func TestKeyOrderingProperty(t *testing.T) {
	for round := range 12 {
		seed := uint64(round)*7919 + 1
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, seed))
			n := 60 + rng.IntN(120)
			nKeys := 1 + rng.IntN(8)
			tp := newMemTopic(t, t.TempDir(), "t")
			keys := make([]string, n)
			for i := range keys {
				if rng.IntN(6) > 0 {
					keys[i] = fmt.Sprintf("key-%d", rng.IntN(nKeys))
				}
				tp.appendStored(keyMsg(t, "t", i, keys[i]))
			}
			model := newOrderModel(t, keys, 3)
			var mu sync.Mutex
			crng := rand.New(rand.NewPCG(seed, 2))
			mif := 1 + rng.IntN(8)
			batch := Batch{}
			if rng.IntN(3) == 0 {
				batch = Batch{MaxMessages: 1 + rng.IntN(5)}
			}
			c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
				var offs []int64
				if batch.MaxMessages > 0 {
					var ms []struct{ Offset int64 }
					if err := json.Unmarshal([]byte(r.Body), &ms); err != nil {
						t.Errorf("batch body: %v", err)
					}
					for _, x := range ms {
						offs = append(offs, x.Offset)
					}
				} else {
					offs = []int64{r.Offset}
				}
				seen := map[string]bool{}
				for _, o := range offs {
					if k := keys[o]; k != "" && seen[k] {
						t.Errorf("a batch holds two messages of key %q", k)
					}
					seen[keys[o]] = true
					model.begin(o)
				}
				mu.Lock()
				p := crng.IntN(10)
				mu.Unlock()
				time.Sleep(time.Duration(p%3) * time.Millisecond)
				switch {
				case p < 6 || batch.MaxMessages > 0 && p < 7:
					for _, o := range offs {
						model.end(o, ACK, true)
					}
					if batch.MaxMessages > 0 {
						w.Header().Set("Content-Type", "application/json")
						fmt.Fprint(w, `{"acknowledgement":"ACK"}`)
						return
					}
					answer(w, ACK)
				case p < 8 && batch.MaxMessages == 0:
					model.end(offs[0], NACK, true)
					answer(w, NACK)
				case p < 9:
					for _, o := range offs {
						model.end(o, "", false)
					}
					w.WriteHeader(http.StatusServiceUnavailable)
				default:
					for _, o := range offs {
						model.end(o, "", false)
					}
					if hj, ok := w.(http.Hijacker); ok {
						conn, _, err := hj.Hijack()
						if err == nil {
							conn.Close()
							return
						}
					}
					w.WriteHeader(http.StatusBadGateway)
				}
			})
			d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(mif).WithOrdering(OrderKey).WithBatch(batch)
			opts := testOptions()
			opts.BackoffInitial, opts.BackoffMax = time.Millisecond, 4*time.Millisecond
			m := startManager(t, newMemSource(tp), opts, d)
			waitCommitted(t, m, "d", "t", int64(n))
			if !model.allFinished() {
				t.Errorf("not every message finished (max-in-flight %d, batch %d)", mif, batch.MaxMessages)
			}
		})
	}
}

// ordering "topic" is refused with several pushes at once or batches; the
// default is topic for max-in-flight 1 without batches and none otherwise.
func TestOrderingSettings(t *testing.T) {
	h := Host{Protocol: HTTP, Address: "localhost", Port: 8081}
	base := New("d", h, MustPattern("t"))
	if o := base.Ordering(); o != OrderTopic {
		t.Errorf("default ordering %q, want topic", o)
	}
	if o := base.WithMaxInFlight(4).Ordering(); o != OrderNone {
		t.Errorf("max-in-flight 4: default ordering %q, want none", o)
	}
	if o := base.WithBatch(Batch{MaxMessages: 5}).Ordering(); o != OrderNone {
		t.Errorf("batch: default ordering %q, want none", o)
	}
	for name, tc := range map[string]struct {
		d    *Dispatcher
		want string
	}{
		"topic with max-in-flight": {base.WithOrdering(OrderTopic).WithMaxInFlight(4), `ordering: "topic" needs max-in-flight 1 and no batch`},
		"topic with batch":         {base.WithOrdering(OrderTopic).WithBatch(Batch{MaxMessages: 3}), `got max-in-flight 1, batch.max-messages 3`},
		"unknown":                  {base.WithOrdering("fifo"), `ordering: must be "topic", "key" or "none"; got "fifo"`},
		"max-unacked without key":  {base.WithMaxUnacked(10), `max-unacked: applies to ordering "key" only (the ordering is "topic")`},
		"max-unacked too large":    {base.WithOrdering(OrderKey).WithMaxUnacked(MaxUnackedLimit + 1), `max-unacked: must be 1..100000000`},
	} {
		err := tc.d.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, tc.want)
		}
	}
	// GET, edit the ordering, PUT: a key dispatcher shown with its
	// default max-unacked switches to none without another change.
	shown := base.WithOrdering(OrderKey).WithMaxInFlight(8).Settings()
	shown.Ordering = OrderNone
	if _, err := FromSettings(shown, "d", SourceAPI); err != nil {
		t.Errorf("key → none from what GET shows: %v", err)
	}
	if err := base.WithOrdering(OrderKey).WithMaxInFlight(8).WithMaxUnacked(500).Validate(); err != nil {
		t.Errorf("key with max-in-flight 8, max-unacked 500: %v", err)
	}
}

// The messages finished past a parked key are recorded beside the
// checkpoint: after a restart only the parked key's messages are pushed
// again, whichever ordering the dispatcher has then (a worker with
// ordering topic or none passes over what was recorded too).
//
// A backend that records no finished offsets (JetStream) delivers them all
// again after the restart: at-least-once, never a skip.
func TestKeyOrderingRestartDeliversOnlyWhatWasNotFinished(t *testing.T) {
	for _, then := range []Ordering{OrderKey, OrderTopic, OrderNone, "key, no recorder"} {
		t.Run(string(then), func(t *testing.T) {
			tp := newMemTopic(t, t.TempDir(), "t")
			plain := then == "key, no recorder"
			if plain {
				tp.plainCheckpoints, then = true, OrderKey
			}
			var stuckOffs []int64
			for i := range 30 {
				k := fmt.Sprintf("k%d", i%3)
				if k == "k1" {
					stuckOffs = append(stuckOffs, int64(i))
				}
				tp.appendStored(keyMsg(t, "t", i, k))
			}
			first := stuckKeyConsumer(t, "k1")
			d := New("d", first.host(t), MustPattern("t")).WithMaxInFlight(4).WithOrdering(OrderKey)
			m := startManager(t, newMemSource(tp), testOptions(), d)
			eventually(t, "the other keys delivered", func() bool { return status(m, "d", "t").Delivered == 20 })
			stopManager(t, m)
			tp.closeCheckpoints() // reopened from the files
			wantCheckpoint(t, tp.dir, "d", 1)

			second := newConsumer(t, nil)
			d2 := New("d", second.host(t), MustPattern("t")).WithOrdering(then)
			if then != OrderTopic {
				d2 = d2.WithMaxInFlight(4)
			}
			m2 := startManager(t, newMemSource(tp), testOptions(), d2)
			waitCommitted(t, m2, "d", "t", 30)
			got := offsets(second.requests())
			slices.Sort(got)
			if plain {
				if want := 29; len(got) != want || got[0] != 1 {
					t.Errorf("without a recorder: after the restart pushed %v, want every offset from the checkpoint, 1..29", got)
				}
				return
			}
			if !slices.Equal(got, stuckOffs) {
				t.Errorf("after the restart pushed %v, want only the parked key's %v", got, stuckOffs)
			}
		})
	}
}

// "Retry me later": a NACK's retryAfter (a duration string or seconds) is
// read per message; a bad one makes the answer abnormal, naming it.
func TestParseNACKRetryAfter(t *testing.T) {
	for body, want := range map[string]time.Duration{
		`{"acknowledgement":"NACK","retryAfter":"30s"}`: 30 * time.Second,
		`{"acknowledgement":"NACK","retryAfter":1.5}`:   1500 * time.Millisecond,
		`{"acknowledgement":"NACK","retryAfter":null}`:  0,
		`{"acknowledgement":"NACK"}`:                    0,
		`{"acknowledgement":"ACK","retryAfter":"30s"}`:  0,
	} {
		_, got, err := parseAnswer([]byte(body))
		if err != nil || got != want {
			t.Errorf("%s: %v, %v; want %v", body, got, err, want)
		}
	}
	for body, want := range map[string]string{
		`{"acknowledgement":"NACK","retryAfter":"soon"}`: `"retryAfter" "soon" is not a duration >= 0 such as "30s"`,
		`{"acknowledgement":"NACK","retryAfter":-1}`:     `"retryAfter" -1 is not 0..86400 seconds`,
		`{"acknowledgement":"NACK","retryAfter":[1]}`:    `"retryAfter" is neither a duration string`,
	} {
		if _, _, err := parseAnswer([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", body, err, want)
		}
	}
	ms := []Delivery{{Offset: 3}, {Offset: 4}}
	_, ras, err := parseBatchAnswer([]byte(`{"results":[{"offset":3,"acknowledgement":"NACK","retryAfter":"2s"},{"offset":4,"acknowledgement":"ACK"}]}`), ms)
	if err != nil || !slices.Equal(ras, []time.Duration{2 * time.Second, 0}) {
		t.Errorf("batch results: %v, %v; want [2s 0]", ras, err)
	}
	_, ras, err = parseBatchAnswer([]byte(`{"acknowledgement":"NACK","retryAfter":"1s"}`), ms)
	if err != nil || !slices.Equal(ras, []time.Duration{time.Second, time.Second}) {
		t.Errorf("batch, one answer: %v, %v; want [1s 1s]", ras, err)
	}
}

// A NACK that asks to be retried later defers that message, capped by
// backoff-max: under ordering topic the topic waits, under none that
// message alone waits (the others are delivered meanwhile), under key its
// key waits and the other keys go on. Under ack-mode status a NACK's
// Retry-After header asks the same.
func TestNACKRetryAfter(t *testing.T) {
	const wait = 300 * time.Millisecond
	for _, tc := range []struct {
		name     string
		d        func(*Dispatcher) *Dispatcher
		status   bool
		keys     []string
		overtake bool // offset 1 is ACKed before offset 0's second attempt
	}{
		{"topic", func(d *Dispatcher) *Dispatcher { return d }, false, []string{"a", "a", "a"}, false},
		{"topic, ack-mode status", func(d *Dispatcher) *Dispatcher { return d.WithAckMode(AckStatus) }, true, []string{"a", "a", "a"}, false},
		{"none", func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(4).WithOrdering(OrderNone) }, false, []string{"a", "a", "a"}, true},
		{"key, same key", func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(4).WithOrdering(OrderKey) }, false, []string{"a", "a", "b"}, false},
		{"key, other keys", func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(4).WithOrdering(OrderKey) }, false, []string{"a", "b", "c"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newMemTopic(t, t.TempDir(), "t")
			for i, k := range tc.keys {
				tp.appendStored(keyMsg(t, "t", i, k))
			}
			var mu sync.Mutex
			var first, second, ack1 time.Time
			c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				if r.Offset == 0 && first.IsZero() {
					first = time.Now()
					if tc.status {
						w.Header().Set("Retry-After", "1")
						w.WriteHeader(http.StatusUnprocessableEntity)
						return
					}
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprint(w, `{"acknowledgement":"NACK","retryAfter":"1h"}`)
					return
				}
				switch {
				case r.Offset == 0:
					second = time.Now()
				case r.Offset == 1 && ack1.IsZero():
					ack1 = time.Now()
				}
				if tc.status {
					w.WriteHeader(http.StatusOK)
					return
				}
				answer(w, ACK)
			})
			opts := testOptions()
			opts.BackoffMax = wait // caps the hour asked for
			d := tc.d(New("d", c.host(t), MustPattern("t")))
			m := startManager(t, newMemSource(tp), opts, d)
			waitCommitted(t, m, "d", "t", 3)
			mu.Lock()
			defer mu.Unlock()
			if gap := second.Sub(first); gap < wait || gap > 30*time.Second {
				t.Errorf("offset 0 sent again %v after its NACK, want backoff-max %v (the hour asked for, capped)", gap, wait)
			}
			if tc.status && second.Sub(first) < wait {
				t.Errorf("Retry-After on a status-mode NACK not honoured")
			}
			if overtook := ack1.Before(second); overtook != tc.overtake {
				t.Errorf("offset 1 answered before offset 0's resend: %v, want %v", overtook, tc.overtake)
			}
		})
	}
}

// Under the interval commit policy, the messages finished past a parked
// key are recorded on the policy's schedule while the worker runs (the
// checkpoint does not move, so no commit would carry them).
func TestKeyOrderingIntervalPolicyRecordsFinished(t *testing.T) {
	tp := newMemTopic(t, t.TempDir(), "t")
	const n = 200
	for i := range n {
		tp.appendStored(keyMsg(t, "t", i, fmt.Sprintf("k%d", i%2)))
	}
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Key == "k0" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		time.Sleep(5 * time.Millisecond) // k1 keeps the worker busy: it is never idle
		answer(w, ACK)
	})
	d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(4).WithOrdering(OrderKey).
		WithCommitPolicy(CommitPolicy{Mode: Interval, Interval: 20 * time.Millisecond, MaxCount: 1000})
	m := startManager(t, newMemSource(tp), testOptions(), d)
	recorded := func() int {
		cp, err := storage.OpenCheckpoint(vfs.OS{}, tp.dir, "d", n, nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(cp.Finished())
	}
	eventually(t, "finished offsets recorded while k1 is still being delivered", func() bool {
		return recorded() >= 5 && status(m, "d", "t").Delivered < n/2-10
	})
}

// A key-ordered worker whose checkpoint retention passed goes on from the
// log start offset without a bit per deleted offset.
func TestKeyOrderingRetentionGapAtTheCheckpoint(t *testing.T) {
	w := &worker{kw: &keyWindow{}}
	w.kw.fin.Reset(5)
	w.next.Store(5)
	w.readNext = 5
	w.finishGap(5, 1<<40)
	b := &w.kw.fin
	if b.Words() > 1 || b.FirstUnset(5) != 1<<40 {
		t.Fatalf("gap at the checkpoint: %d words, first unset %d; want at most 1 word, %d", b.Words(), b.FirstUnset(5), int64(1<<40))
	}
}

// A stop waits up to StopGrace for the answers to the pushes in flight:
// a consumer that ACKs within it is not sent the message again after the
// restart; one slower than the grace is (at-least-once).
func TestStopWaitsForPushesInFlight(t *testing.T) {
	for _, tc := range []struct {
		name      string
		grace     time.Duration
		redeliver bool
	}{{"within the grace", 2 * time.Second, false}, {"past the grace", -1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newMemTopic(t, t.TempDir(), "t")
			tp.appendStored(keyMsg(t, "t", 0, "a"), keyMsg(t, "t", 1, "b"))
			started := make(chan struct{}, 2)
			c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
				started <- struct{}{}
				time.Sleep(300 * time.Millisecond)
				answer(w, ACK)
			})
			opts := testOptions()
			opts.StopGrace = tc.grace
			d := New("d", c.host(t), MustPattern("t")).WithMaxInFlight(2).WithOrdering(OrderKey)
			m := startManager(t, newMemSource(tp), opts, d)
			<-started
			<-started
			stopManager(t, m)
			tp.closeCheckpoints()
			again := newConsumer(t, nil)
			m2 := startManager(t, newMemSource(tp), opts, New("d", again.host(t), MustPattern("t")).WithMaxInFlight(2).WithOrdering(OrderKey))
			waitCommitted(t, m2, "d", "t", 2)
			if got := len(again.requests()); (got > 0) != tc.redeliver {
				t.Errorf("%d pushes after the restart; redelivery expected: %v", got, tc.redeliver)
			}
		})
	}
}
