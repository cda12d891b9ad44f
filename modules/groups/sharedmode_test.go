package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
)

// publishKeyed appends one durable message per key (""  for none) and
// returns the first offset.
func (e *env) publishKeyed(keys ...string) int64 {
	e.t.Helper()
	first := int64(-1)
	for _, k := range keys {
		b, err := contract.EncodeKeyedMessage(testTopic, json.RawMessage(fmt.Sprint(e.q.HighWatermark())), "", k, nil, time.Now())
		if err != nil {
			e.t.Fatal(err)
		}
		off, err := e.q.Log().Append(context.Background(), b, contract.Durable)
		if err != nil {
			e.t.Fatal(err)
		}
		if first < 0 {
			first = off
		}
	}
	return first
}

func (e *env) join(group string) string {
	e.t.Helper()
	s, err := e.c.AcquireMode(testTopic, group, contract.GroupShared)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) ackOffsets(group, session string, offs ...int64) AckResult {
	e.t.Helper()
	r, err := e.c.AckOffsets(testTopic, group, session, offs)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func sharedEnv(t *testing.T, opts Options) *env {
	e := newEnv(t, opts)
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	return e
}

// Two sessions of a shared group fetch at once and get disjoint messages;
// per-message acks move the committed offset over the contiguous prefix.
func TestSharedSessionsGetDisjointMessages(t *testing.T) {
	e := sharedEnv(t, Options{})
	e.publish(10)
	a, b := e.join("g"), e.join("g")
	ba := e.fetch("g", a, 5, 0)
	bb := e.fetch("g", b, 5, 0)
	if !ba.Shared || len(ba.Entries) != 5 || len(bb.Entries) != 5 {
		t.Fatalf("fetched %d and %d (shared %v), want 5 and 5", len(ba.Entries), len(bb.Entries), ba.Shared)
	}
	got := append(offsets(ba.Entries), offsets(bb.Entries)...)
	slices.Sort(got)
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("offsets %v, want 0..9 once each", got)
	}
	if r := e.ackOffsets("g", b, offsets(bb.Entries)...); r.Committed != 0 || r.Acked != 5 {
		t.Fatalf("ack of the later half: %+v, want committed 0, acked 5", r)
	}
	if r := e.ackOffsets("g", a, offsets(ba.Entries)...); r.Committed != 10 {
		t.Fatalf("ack of the first half: %+v, want committed 10", r)
	}
	if r := e.ackOffsets("g", a, 3); r.Already != 1 || r.Acked != 0 {
		t.Fatalf("repeated ack: %+v, want already 1", r)
	}
	// An offset leased to the other session is refused, and nothing of
	// the request is acknowledged.
	e.publish(2)
	x := e.fetch("g", a, 1, 0)
	y := e.fetch("g", b, 1, 0)
	if _, err := e.c.AckOffsets(testTopic, "g", a, []int64{x.Entries[0].Offset, y.Entries[0].Offset}); !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("ack of another session's offset: %v, want ErrNotDelivered", err)
	}
	if r := e.ackOffsets("g", a, x.Entries[0].Offset); r.Acked != 1 {
		t.Fatalf("the refused request acknowledged something: %+v", r)
	}
}

// A group's mode is fixed by its first use; the other mode is GROUP_MODE.
func TestSharedModeIsFixedByFirstUse(t *testing.T) {
	e := sharedEnv(t, Options{Shared: []string{"work-*"}})
	e.publish(3)
	s := e.join("g")
	if _, err := e.c.AcquireMode(testTopic, "g", contract.GroupExclusive); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("exclusive on a shared group: %v, want ErrGroupMode", err)
	}
	if _, err := e.c.Acquire(testTopic, "g"); err != nil {
		t.Fatalf("a fetch without mode joins the shared group: %v", err)
	}
	if _, err := e.c.Ack(testTopic, "g", s, 0); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("cumulative ack of a shared group: %v, want ErrGroupMode", err)
	}
	if err := e.c.Seek(testTopic, "g", s, 0); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("from= on a shared group: %v, want ErrGroupMode", err)
	}
	x := e.acquire("x")
	if _, err := e.c.Ack(testTopic, "x", x, -1); err != nil { // stores nothing
		t.Fatal(err)
	}
	e.fetch("x", x, 1, 0)
	if _, err := e.c.Ack(testTopic, "x", x, 0); err != nil { // stores the checkpoint: exclusive from now on
		t.Fatal(err)
	}
	if _, err := e.c.AcquireMode(testTopic, "x", contract.GroupShared); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("shared on an exclusive group: %v, want ErrGroupMode", err)
	}
	if _, err := e.c.AckOffsets(testTopic, "x", x, []int64{0}); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("per-message ack of an exclusive group: %v, want ErrGroupMode", err)
	}
	if _, err := e.c.Nack(testTopic, "x", x, []int64{0}, 0); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("nack of an exclusive group: %v, want ErrGroupMode", err)
	}
	// A configured glob makes a new group shared without mode=.
	w, err := e.c.Acquire(testTopic, "work-1")
	if err != nil {
		t.Fatal(err)
	}
	if b := e.fetch("work-1", w, 10, 0); !b.Shared {
		t.Fatal("a group matching mmmq.broker.groups.shared is not shared")
	}
	// The modes survive a restart.
	e.reopen()
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	if _, err := e.c.AcquireMode(testTopic, "g", contract.GroupExclusive); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("after a restart, exclusive on a shared group: %v, want ErrGroupMode", err)
	}
	if _, err := e.c.AcquireMode(testTopic, "x", contract.GroupShared); !errors.Is(err, ErrGroupMode) {
		t.Fatalf("after a restart, shared on an exclusive group: %v, want ErrGroupMode", err)
	}
	// A glob naming a group stored as exclusive stops startup.
	c := New(e.reg, Options{Shared: []string{"x"}})
	if err := c.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "group x of topic "+testTopic) || !strings.Contains(err.Error(), "stored as exclusive") {
		t.Fatalf("start with a shared glob naming an exclusive group: %v", err)
	}
}

// Acks past a gap are recorded durably: after a restart only the
// unfinished message is handed out again, with its delivery count.
func TestSharedAcksPastTheCommittedOffsetSurviveARestart(t *testing.T) {
	e := sharedEnv(t, Options{})
	e.publish(4)
	s := e.join("g")
	b := e.fetch("g", s, 4, 0)
	if r := e.ackOffsets("g", s, 1, 3); r.Committed != 0 {
		t.Fatalf("committed %d, want 0", r.Committed)
	}
	e.reopen()
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	s = e.join("g")
	b = e.fetch("g", s, 10, 0)
	if got := offsets(b.Entries); fmt.Sprint(got) != "[0 2]" || fmt.Sprint(b.Deliveries) != "[2 2]" {
		t.Fatalf("after a restart: offsets %v deliveries %v, want [0 2] [2 2]", got, b.Deliveries)
	}
	if r := e.ackOffsets("g", s, 0, 2); r.Committed != 4 {
		t.Fatalf("committed %d, want 4", r.Committed)
	}
}

// An expired session's messages go to another session, counted.
func TestSharedLeaseExpiryHandsOutAgain(t *testing.T) {
	e := sharedEnv(t, Options{LeaseTimeout: 50 * time.Millisecond})
	e.publish(2)
	a := e.join("g")
	if b := e.fetch("g", a, 2, 0); len(b.Entries) != 2 {
		t.Fatalf("fetched %d, want 2", len(b.Entries))
	}
	time.Sleep(80 * time.Millisecond)
	b := e.join("g")
	got := e.fetch("g", b, 10, 0)
	if fmt.Sprint(offsets(got.Entries)) != "[0 1]" || fmt.Sprint(got.Deliveries) != "[2 2]" {
		t.Fatalf("after the expiry: %v deliveries %v, want [0 1] [2 2]", offsets(got.Entries), got.Deliveries)
	}
	if _, err := e.c.AckOffsets(testTopic, "g", a, []int64{0}); !errors.Is(err, ErrSessionExpired) {
		t.Fatalf("ack by the expired session: %v, want ErrSessionExpired", err)
	}
	l, err := e.c.List(testTopic)
	if err != nil {
		t.Fatal(err)
	}
	gi := l.Groups[0]
	if gi.Mode != contract.GroupShared || gi.InFlight == nil || *gi.InFlight != 2 || *gi.Redelivered != 2 || len(gi.Sessions) != 1 || gi.Sessions[0].InFlight != 2 {
		t.Fatalf("listing %+v", gi)
	}
}

// Key affinity: a key's next message is not handed out, to any session,
// while an earlier one is unfinished; other keys and keyless messages go on.
func TestSharedKeyAffinity(t *testing.T) {
	e := sharedEnv(t, Options{})
	e.publishKeyed("k1", "k2", "k1", "", "k1")
	a, b := e.join("g"), e.join("g")
	if got := e.fetch("g", a, 10, 0); fmt.Sprint(offsets(got.Entries)) != "[0 1 3]" {
		t.Fatalf("first fetch %v, want [0 1 3]", offsets(got.Entries))
	}
	if got := e.fetch("g", b, 10, 0); len(got.Entries) != 0 {
		t.Fatalf("k1's next message went to another session while offset 0 is leased: %v", offsets(got.Entries))
	}
	// A nack gives 0 back: it (not 2) is what the other session gets next.
	if _, err := e.c.Nack(testTopic, "g", a, []int64{0}, 0); err != nil {
		t.Fatal(err)
	}
	if got := e.fetch("g", b, 10, 0); fmt.Sprint(offsets(got.Entries)) != "[0]" {
		t.Fatalf("after the nack %v, want [0]", offsets(got.Entries))
	}
	e.ackOffsets("g", b, 0)
	if got := e.fetch("g", a, 10, 0); fmt.Sprint(offsets(got.Entries)) != "[2]" {
		t.Fatalf("after the ack of 0: %v, want [2]", offsets(got.Entries))
	}
	// A waiting fetch wakes when the key's head is finished.
	done := make(chan Batch, 1)
	go func() {
		bt, _ := e.c.Fetch(context.Background(), testTopic, "g", b, 10, 5*time.Second)
		done <- bt
	}()
	time.Sleep(20 * time.Millisecond)
	e.ackOffsets("g", a, 2)
	if got := <-done; fmt.Sprint(offsets(got.Entries)) != "[4]" {
		t.Fatalf("waiting fetch got %v, want [4]", offsets(got.Entries))
	}
}

// After max-deliveries a message goes to the group's dead-letter topic
// (counts survive restarts), is finished, and can be redriven.
func TestSharedMaxDeliveriesDeadLetters(t *testing.T) {
	e := sharedEnv(t, Options{MaxDeliveries: 2})
	e.publishKeyed("k")
	e.publishKeyed("k")
	s := e.join("g")
	if got := e.fetch("g", s, 10, 0); fmt.Sprint(offsets(got.Entries), got.Deliveries) != "[0] [1]" {
		t.Fatalf("first %v %v", offsets(got.Entries), got.Deliveries)
	}
	e.reopen() // the count is durable
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	s = e.join("g")
	if got := e.fetch("g", s, 10, 0); fmt.Sprint(offsets(got.Entries), got.Deliveries) != "[0] [2]" {
		t.Fatalf("second %v %v", offsets(got.Entries), got.Deliveries)
	}
	if _, err := e.c.Nack(testTopic, "g", s, []int64{0}, 0); err != nil {
		t.Fatal(err)
	}
	got := e.fetch("g", s, 10, 0)
	if fmt.Sprint(offsets(got.Entries), got.Deliveries) != "[1] [1]" || got.Committed != 1 {
		t.Fatalf("after the last delivery: %v %v committed %d, want [1] [1] committed 1", offsets(got.Entries), got.Deliveries, got.Committed)
	}
	dl, ok := e.reg.Get("dead-letter.g")
	if !ok || dl.HighWatermark() != 1 {
		t.Fatal("no dead letter in dead-letter.g")
	}
	es, err := dl.ReadBatch(0, 1)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Key     string            `json:"key"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal(es[0].Payload, &m); err != nil {
		t.Fatal(err)
	}
	h := m.Headers
	if h[dispatcher.HeaderDLGroup] != "g" || h[dispatcher.HeaderDLTopic] != testTopic || h[dispatcher.HeaderDLOffset] != "0" ||
		h[dispatcher.HeaderDLAttempts] != "2" || h[dispatcher.HeaderDLReason] != dispatcher.ReasonDeliveries || m.Key != "k" {
		t.Fatalf("dead letter %s", es[0].Payload)
	}
	l, _ := e.c.List(testTopic)
	if d := l.Groups[0].DeadLettered; d == nil || *d != 1 {
		t.Fatalf("deadLettered %v, want 1", d)
	}
	res, err := e.c.Redrive(context.Background(), testTopic, "g", -1, -1)
	if err != nil || len(res.Redriven) != 1 || res.Redriven[0].Topic != testTopic || res.Redriven[0].Offset != 2 {
		t.Fatalf("redrive %+v %v", res, err)
	}
}

// A nack with retryAfter holds the message back until it is due.
func TestSharedNackRetryAfter(t *testing.T) {
	e := sharedEnv(t, Options{})
	e.publish(1)
	s := e.join("g")
	e.fetch("g", s, 1, 0)
	if _, err := e.c.Nack(testTopic, "g", s, []int64{0}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if got := e.fetch("g", s, 1, 0); len(got.Entries) != 0 {
		t.Fatalf("handed out before its retryAfter: %v", offsets(got.Entries))
	}
	start := time.Now()
	got := e.fetch("g", s, 1, 5*time.Second)
	if fmt.Sprint(offsets(got.Entries), got.Deliveries) != "[0] [2]" {
		t.Fatalf("after retryAfter: %v %v", offsets(got.Entries), got.Deliveries)
	}
	if waited := time.Since(start); waited < 200*time.Millisecond {
		t.Fatalf("handed out again after %s, before retryAfter", waited)
	}
	if _, err := e.c.Nack(testTopic, "g", s, []int64{7}, 0); !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("nack of an offset never handed out: %v", err)
	}
}

// max-unacked bounds what the group reads past its committed offset.
func TestSharedMaxUnacked(t *testing.T) {
	e := sharedEnv(t, Options{MaxUnacked: 3})
	e.publish(10)
	s := e.join("g")
	if got := e.fetch("g", s, 10, 0); len(got.Entries) != 3 {
		t.Fatalf("fetched %d, want 3 (max-unacked)", len(got.Entries))
	}
	e.ackOffsets("g", s, 1, 2)
	if got := e.fetch("g", s, 10, 0); len(got.Entries) != 0 {
		t.Fatalf("fetched %v past max-unacked", offsets(got.Entries))
	}
	e.ackOffsets("g", s, 0)
	if got := e.fetch("g", s, 10, 0); fmt.Sprint(offsets(got.Entries)) != "[3 4 5]" {
		t.Fatalf("after the committed offset moved: %v, want [3 4 5]", offsets(got.Entries))
	}
}

// A seek of a shared group is refused while sessions live, and forgets
// acks and counts past the old offset.
func TestSharedSeek(t *testing.T) {
	e := sharedEnv(t, Options{LeaseTimeout: 50 * time.Millisecond})
	e.publish(3)
	s := e.join("g")
	e.fetch("g", s, 3, 0)
	e.ackOffsets("g", s, 2)
	if _, err := e.c.SeekCommitted(testTopic, "g", contract.SeekTarget{Kind: contract.SeekEarliest}); !errors.Is(err, ErrGroupBusy) {
		t.Fatalf("seek with a live session: %v, want ErrGroupBusy", err)
	}
	if _, err := e.c.Release(testTopic, "g", s); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.SeekCommitted(testTopic, "g", contract.SeekTarget{Kind: contract.SeekEarliest}); err != nil {
		t.Fatal(err)
	}
	s = e.join("g")
	if got := e.fetch("g", s, 10, 0); fmt.Sprint(offsets(got.Entries), got.Deliveries) != "[0 1 2] [1 1 1]" {
		t.Fatalf("after the seek: %v %v, want all three, first deliveries", offsets(got.Entries), got.Deliveries)
	}
}

// The property: with random keys, 1..8 sessions that fetch, ack, nack and
// die, and restarts of the coordinator (its state read again from disk),
//   - a message of a key is handed out only when every earlier message of
//     its key is finished;
//   - no message is finished twice (an ack that reports it acked);
//   - a message's delivery count never goes back, restarts included;
//   - the committed offset never passes an unfinished message;
//   - in the end every message is finished, at least once delivered.
//
// 8 seeds; MMMQ_LONG=1 (make crash) runs 200.
func TestSharedGroupProperty(t *testing.T) {
	seeds := uint64(8)
	if os.Getenv("MMMQ_LONG") == "1" {
		seeds = 200
	}
	var total propertyCounts
	for seed := uint64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { total.add(sharedProperty(t, seed)) })
	}
	t.Logf("shared group property: %d seeds, %d messages, %d hand-outs (%d again), %d acks, %d nacks, %d sessions ended, %d restarts: 0 violations",
		seeds, total.messages, total.handOuts, total.again, total.acks, total.nacks, total.ended, total.restarts)
}

// propertyCounts is what a run of sharedProperty did.
type propertyCounts struct{ messages, handOuts, again, acks, nacks, ended, restarts int }

func (p *propertyCounts) add(q propertyCounts) {
	p.messages += q.messages
	p.handOuts += q.handOuts
	p.again += q.again
	p.acks += q.acks
	p.nacks += q.nacks
	p.ended += q.ended
	p.restarts += q.restarts
}

func sharedProperty(t *testing.T, seed uint64) (pc propertyCounts) {
	rng := rand.New(rand.NewPCG(seed, 33))
	e := sharedEnv(t, Options{LeaseTimeout: time.Hour, MaxDeliveries: -1})
	const n = 300
	pc.messages = n
	keys := make([]string, n)
	for i := range keys {
		if rng.IntN(5) > 0 {
			keys[i] = fmt.Sprintf("k%d", rng.IntN(12))
		}
	}
	e.publishKeyed(keys...)
	finished := map[int64]bool{}
	lastCount := map[int64]uint32{}
	type sess struct {
		id   string
		held []int64
	}
	var sessions []*sess
	newSess := func() *sess { return &sess{id: e.join("g")} }
	for range 1 + rng.IntN(8) {
		sessions = append(sessions, newSess())
	}
	for step := 0; len(finished) < n && step < 20000; step++ {
		s := sessions[rng.IntN(len(sessions))]
		switch op := rng.IntN(10); {
		case op < 4:
			b, err := e.c.Fetch(context.Background(), testTopic, "g", s.id, 1+rng.IntN(6), 0)
			if err != nil {
				t.Fatalf("seed %d step %d fetch: %v", seed, step, err)
			}
			for i, en := range b.Entries {
				o := en.Offset
				if finished[o] {
					t.Fatalf("seed %d: offset %d handed out after it was finished", seed, o)
				}
				for p := int64(0); p < o; p++ {
					if keys[o] != "" && keys[p] == keys[o] && !finished[p] {
						t.Fatalf("seed %d: offset %d of key %s handed out before %d was finished", seed, o, keys[o], p)
					}
				}
				if c := b.Deliveries[i]; c <= lastCount[o] {
					t.Fatalf("seed %d: offset %d delivery count %d after %d: reset", seed, o, c, lastCount[o])
				}
				lastCount[o] = b.Deliveries[i]
				s.held = append(s.held, o)
				pc.handOuts++
				if b.Deliveries[i] > 1 {
					pc.again++
				}
			}
			b.Release()
		case op < 7 && len(s.held) > 0:
			i := rng.IntN(len(s.held))
			o := s.held[i]
			s.held = slices.Delete(s.held, i, i+1)
			r, err := e.c.AckOffsets(testTopic, "g", s.id, []int64{o})
			if err != nil {
				t.Fatalf("seed %d ack %d: %v", seed, o, err)
			}
			pc.acks++
			if r.Acked == 1 {
				if finished[o] {
					t.Fatalf("seed %d: offset %d finished twice", seed, o)
				}
				finished[o] = true
			}
			for p := int64(0); p < r.Committed; p++ {
				if !finished[p] {
					t.Fatalf("seed %d: committed %d passes unfinished %d", seed, r.Committed, p)
				}
			}
		case op < 8 && len(s.held) > 0:
			i := rng.IntN(len(s.held))
			o := s.held[i]
			s.held = slices.Delete(s.held, i, i+1)
			if _, err := e.c.Nack(testTopic, "g", s.id, []int64{o}, 0); err != nil {
				t.Fatalf("seed %d nack %d: %v", seed, o, err)
			}
			pc.nacks++
		case op == 8:
			// The session dies: its leases are given back.
			if _, err := e.c.Release(testTopic, "g", s.id); err != nil {
				t.Fatal(err)
			}
			*s = *newSess()
			pc.ended++
		default:
			if rng.IntN(10) == 0 {
				// Restart: every session is gone, state comes from disk.
				e.reopen()
				pc.restarts++
				e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
				for _, s := range sessions {
					*s = *newSess()
				}
			}
		}
	}
	if len(finished) != n {
		t.Fatalf("seed %d: %d of %d finished", seed, len(finished), n)
	}
	c, _ := e.c.Committed(testTopic, "g")
	if c != n {
		t.Fatalf("seed %d: committed %d, want %d", seed, c, n)
	}
	return pc
}

// The HTTP face of a shared group: mode=, per-message ack and nack, the
// refusals with their codes, the listing and redrive.
func TestHTTPSharedGroup(t *testing.T) {
	e, ts := newHTTP(t, Options{MaxDeliveries: 1})
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	e.publishKeyed("a", "b", "a")
	base := ts.URL + "/topics/" + testTopic + "/groups/w"

	if r := do(t, "POST", base+"/fetch?mode=bogus", "", ""); r.status != 400 || r.code() != contract.CodeBadRequest {
		t.Fatalf("mode=bogus: %d %s", r.status, r.raw)
	}
	r1 := do(t, "POST", base+"/fetch?mode=shared&max=10", "", "")
	if r1.status != 200 || r1.body["mode"] != "shared" || fmt.Sprint(r1.offsets()) != "[0 1]" {
		t.Fatalf("first shared fetch: %d %s", r1.status, r1.raw)
	}
	if d := r1.body["messages"].([]any)[0].(map[string]any)["deliveries"]; d != float64(1) {
		t.Fatalf("deliveries %v, want 1", d)
	}
	r2 := do(t, "POST", base+"/fetch?max=10", "", "") // joins as it is
	if r2.status != 200 || r2.session == r1.session || len(r2.offsets()) != 0 {
		t.Fatalf("second session: %d %s", r2.status, r2.raw)
	}
	if r := do(t, "POST", base+"/fetch?mode=exclusive", "", ""); r.status != 409 || r.code() != contract.CodeGroupMode ||
		!strings.Contains(r.raw, "shared") || !strings.Contains(r.raw, "exclusive") {
		t.Fatalf("mode=exclusive on a shared group: %d %s", r.status, r.raw)
	}
	for _, body := range []string{`{"offset":0}`} {
		if r := do(t, "POST", base+"/ack", r1.session, body); r.status != 409 || r.code() != contract.CodeGroupMode {
			t.Fatalf("ack %s: %d %s", body, r.status, r.raw)
		}
	}
	for _, body := range []string{`{}`, `{"offset":0,"offsets":[0]}`, `{"offsets":[]}`, `{"offsets":[-1]}`, `{"offsets":[0],"x":1}`} {
		if r := do(t, "POST", base+"/ack", r1.session, body); r.status != 400 || r.code() != contract.CodeBadRequest {
			t.Fatalf("ack %s: %d %s", body, r.status, r.raw)
		}
	}
	if r := do(t, "POST", base+"/ack", r2.session, `{"offsets":[0]}`); r.status != 409 || r.code() != contract.CodeNotDelivered {
		t.Fatalf("ack by the other session: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/nack", r1.session, `{"offsets":[1],"retryAfter":"forever"}`); r.status != 400 {
		t.Fatalf("nack with a bad retryAfter: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/ack", r1.session, `{"offsets":[0]}`); r.status != 200 || r.body["committed"] != float64(1) || r.body["acked"] != float64(1) {
		t.Fatalf("ack: %d %s", r.status, r.raw)
	}
	// b (offset 1) is nacked: with max-deliveries 1 it is dead-lettered on
	// the next fetch, which hands out a's next message (2).
	if r := do(t, "POST", base+"/nack", r1.session, `{"offsets":[1],"retryAfter":0}`); r.status != 200 || r.body["nacked"] != float64(1) {
		t.Fatalf("nack: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"/fetch?max=10", r2.session, ""); fmt.Sprint(r.offsets()) != "[2]" || r.body["committed"] != float64(2) {
		t.Fatalf("after the nack: %s", r.raw)
	}
	l := do(t, "GET", ts.URL+"/topics/"+testTopic+"/groups", "", "")
	g := l.body["groups"].([]any)[0].(map[string]any)
	if g["mode"] != "shared" || g["inFlight"] != float64(1) || g["deadLettered"] != float64(1) || len(g["sessions"].([]any)) != 2 {
		t.Fatalf("listing: %s", l.raw)
	}
	if r := do(t, "POST", base+"/redrive", "", `{}`); r.status != 200 || len(r.body["redriven"].([]any)) != 1 {
		t.Fatalf("redrive: %d %s", r.status, r.raw)
	}
	// An exclusive group refuses the shared forms.
	x := do(t, "POST", ts.URL+"/topics/"+testTopic+"/groups/x/fetch", "", "")
	if r := do(t, "POST", ts.URL+"/topics/"+testTopic+"/groups/x/nack", x.session, `{"offsets":[0]}`); r.status != 409 || r.code() != contract.CodeGroupMode {
		t.Fatalf("nack of an exclusive group: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", ts.URL+"/topics/"+testTopic+"/groups/x/ack", x.session, `{"offsets":[0]}`); r.status != 409 || r.code() != contract.CodeGroupMode {
		t.Fatalf("offsets ack of an exclusive group: %d %s", r.status, r.raw)
	}
}

// Retention deleting what a shared group had not read moves its committed
// offset over the gap (the max-unacked window does not fill with it), and
// a message deleted while it was handed out is finished as skipped.
func TestSharedRetentionGap(t *testing.T) {
	// One entry per segment: retention can delete any prefix.
	_, c, q := newCoordinatorOver(t, t.TempDir(), storage.Options{SegmentMaxBytes: 1}, Options{MaxUnacked: 2})
	publishAt(t, q, 1000, 2000, 3000, 4000, 5000, 6000, 7000)
	s, err := c.AcquireMode(testTopic, "g", contract.GroupShared)
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Fetch(context.Background(), testTopic, "g", s, 1, 0)
	if err != nil || fmt.Sprint(offsets(b.Entries)) != "[0]" {
		t.Fatalf("first fetch %v %v", offsets(b.Entries), err)
	}
	if _, err := c.Nack(testTopic, "g", s, []int64{0}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Log().(*storage.Log).ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 5); err != nil {
		t.Fatal(err)
	}
	b, err = c.Fetch(context.Background(), testTopic, "g", s, 10, 0)
	if err != nil || fmt.Sprint(offsets(b.Entries)) != "[5 6]" || b.Committed != 5 {
		t.Fatalf("after retention: %v committed %d, %v; want [5 6] committed 5", offsets(b.Entries), b.Committed, err)
	}
}

// A key with more messages waiting than one fetch reads does not hide the
// messages after them.
func TestSharedManyWaitingBehindAKey(t *testing.T) {
	defer func(n int) { maxScan = n }(maxScan)
	maxScan = 3
	e := sharedEnv(t, Options{})
	e.publishKeyed("hot", "hot", "hot", "hot", "hot", "hot", "hot", "", "other")
	s := e.join("g")
	if got := e.fetch("g", s, 1, 0); fmt.Sprint(offsets(got.Entries)) != "[0]" {
		t.Fatalf("first %v", offsets(got.Entries))
	}
	if got := e.fetch("g", s, 10, 0); fmt.Sprint(offsets(got.Entries)) != "[7 8]" {
		t.Fatalf("past the waiting key: %v, want [7 8]", offsets(got.Entries))
	}
}

// A fetch with a session and the other group's mode is refused before
// anything is delivered: the session does not move.
func TestHTTPModeMismatchWithASessionDeliversNothing(t *testing.T) {
	e, ts := newHTTP(t, Options{})
	e.publish(3)
	base := ts.URL + "/topics/" + testTopic + "/groups/x"
	r := do(t, "POST", base+"/fetch?max=1", "", "")
	if r.status != 200 || fmt.Sprint(r.offsets()) != "[0]" {
		t.Fatalf("first fetch: %s", r.raw)
	}
	if r2 := do(t, "POST", base+"/fetch?mode=shared&max=1", r.session, ""); r2.status != 409 || r2.code() != contract.CodeGroupMode {
		t.Fatalf("mode=shared with an exclusive session: %d %s", r2.status, r2.raw)
	}
	if r3 := do(t, "POST", base+"/fetch?max=1", r.session, ""); fmt.Sprint(r3.offsets()) != "[1]" {
		t.Fatalf("after the refusal the session moved: %s", r3.raw)
	}
}

// Acks recorded past the committed offset before a restart join the
// prefix as soon as the message before them is acknowledged, however
// little the fetch after the restart read.
func TestSharedPrefixCommitsOverAcksRecordedBeforeARestart(t *testing.T) {
	e := sharedEnv(t, Options{})
	e.publish(4)
	s := e.join("g")
	e.fetch("g", s, 4, 0)
	e.ackOffsets("g", s, 1, 2, 3)
	e.reopen()
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	s = e.join("g")
	if got := e.fetch("g", s, 1, 0); fmt.Sprint(offsets(got.Entries)) != "[0]" {
		t.Fatalf("after the restart %v, want [0]", offsets(got.Entries))
	}
	if r := e.ackOffsets("g", s, 0); r.Committed != 4 {
		t.Fatalf("committed %d, want 4", r.Committed)
	}
}

// Refused requests leave nothing behind: acks, nacks and releases of a
// group never used are SESSION_EXPIRED (or nothing to release) and the
// group is not tracked; a glob-named group cannot be made exclusive; no
// shared group dead-letters into the topic it reads; an oversized ack body
// is 413, mode= twice is 400, a malformed ack names what is wrong.
func TestSharedRefusalsChangeNothing(t *testing.T) {
	e, ts := newHTTP(t, Options{Shared: []string{"work-*"}})
	e.publish(1)
	base := ts.URL + "/topics/" + testTopic + "/groups/"
	for _, c := range []struct{ path, body string }{
		{"ghost1/ack", `{"offsets":[0]}`}, {"ghost2/nack", `{"offsets":[0]}`}, {"ghost3/ack", `{"offset":0}`},
	} {
		if r := do(t, "POST", base+c.path, "some-session", c.body); r.status != 409 || r.code() != contract.CodeSessionExpired {
			t.Fatalf("%s: %d %s, want 409 SESSION_EXPIRED", c.path, r.status, r.raw)
		}
	}
	if r := do(t, "DELETE", base+"ghost4/session", "some-session", ""); r.status != 200 || r.body["released"] != false {
		t.Fatalf("release of a group never used: %d %s", r.status, r.raw)
	}
	if gs := e.c.Groups(testTopic); len(gs) != 0 {
		t.Fatalf("refused requests left groups behind: %+v", gs)
	}
	if r := do(t, "POST", base+"work-1/fetch?mode=exclusive", "", ""); r.status != 409 || r.code() != contract.CodeGroupMode {
		t.Fatalf("mode=exclusive of a glob-named group: %d %s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"g/fetch?mode=shared&mode=exclusive", "", ""); r.status != 400 {
		t.Fatalf("mode twice: %d %s", r.status, r.raw)
	}
	s := do(t, "POST", base+"g/fetch?mode=shared", "", "")
	big := `{"offsets":[` + strings.Repeat("1,", maxAckBody/2) + `1]}`
	if r := do(t, "POST", base+"g/ack", s.session, big); r.status != 413 || r.code() != contract.CodeTooLarge {
		t.Fatalf("oversized ack: %d %.200s", r.status, r.raw)
	}
	if r := do(t, "POST", base+"g/ack", s.session, `{"offsets":[0,"1"]}`); r.status != 400 || !strings.Contains(r.raw, `field \"offsets\": a JSON string where a number belongs`) {
		t.Fatalf("ack with a string offset: %d %s", r.status, r.raw)
	}
	// A group named w shared on dead-letter.w would feed itself.
	if _, err := e.reg.GetOrCreate("dead-letter.w"); err != nil {
		t.Fatal(err)
	}
	if r := do(t, "POST", ts.URL+"/topics/dead-letter.w/groups/w/fetch?mode=shared", "", ""); r.status != 400 || !strings.Contains(r.raw, "dead-letter into the topic it reads") {
		t.Fatalf("group w shared on dead-letter.w: %d %s", r.status, r.raw)
	}
}

// A dead letter or skip during a fetch's scan may move the scan past acks
// recorded before a restart; the rest of the entries read are passed over,
// not an error.
func TestSharedScanJumpsOverRecordedAcks(t *testing.T) {
	e := sharedEnv(t, Options{MaxDeliveries: 1})
	e.publishKeyed("p", "", "", "", "")
	s := e.join("g")
	e.fetch("g", s, 4, 0) // 4 is never handed out before the restart
	e.ackOffsets("g", s, 1, 2, 3)
	if _, err := e.c.Nack(testTopic, "g", s, []int64{0}, 0); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	e.c.opts.Publisher = dispatcher.RegistryPublisher(e.reg)
	s = e.join("g")
	// Offset 0 was handed out once (max-deliveries 1): the scan reads it,
	// dead-letters it, and the commit jumps over 1..3; 4 is handed out.
	b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 10, 0)
	if err != nil || fmt.Sprint(offsets(b.Entries)) != "[4]" || b.Committed != 4 {
		t.Fatalf("after the restart: %v committed %d, %v; want [4] committed 4", offsets(b.Entries), b.Committed, err)
	}
}
