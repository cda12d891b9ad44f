package groups

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// ttlPlan is a log of 10 messages: keys ("" for none) and which expired
// (published an hour ago with a 1 ms ttl; the others expire in an hour,
// or have no ttl), so no assertion depends on timing. The first and the
// last are expired.
var ttlPlan = []struct {
	key     string
	expired bool
}{
	{"k1", true}, {"k1", false}, {"", false}, {"k2", true}, {"k1", true},
	{"k1", false}, {"", true}, {"k2", false}, {"", false}, {"k2", true},
}

// publishTTL appends ttlPlan (and one message without a ttl, key k1) and
// returns the expired offsets and the live ones.
func (e *env) publishTTL() (map[int64]bool, []int64) {
	e.t.Helper()
	exp := map[int64]bool{}
	var live []int64
	for i, p := range ttlPlan {
		at, ttl := time.Now(), time.Hour
		if p.expired {
			at, ttl = at.Add(-time.Hour), time.Millisecond
		}
		b, err := contract.AppendTTLMessage(nil, testTopic, json.RawMessage(strconv.Itoa(i)), "", p.key, ttl, nil, at)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.q.Log().Append(context.Background(), b, contract.Durable); err != nil {
			e.t.Fatal(err)
		}
		if p.expired {
			exp[int64(i)] = true
		} else {
			live = append(live, int64(i))
		}
	}
	e.publishKeyed("k1")
	return exp, append(live, int64(len(ttlPlan)))
}

// An exclusive group never hands out an expired message: it is passed
// over as a corrupt entry is, counted once per offset however often it
// is read again, and an ack of a later offset commits past it.
func TestExclusiveNeverHandsOutExpired(t *testing.T) {
	e := newEnv(t, Options{})
	exp, live := e.publishTTL()
	s := e.acquire("g")
	b := e.fetch("g", s, 100, 0)
	if fmt.Sprint(offsets(b.Entries)) != fmt.Sprint(live) {
		t.Fatalf("fetched %v, want the live offsets %v", offsets(b.Entries), live)
	}
	if n := e.c.MessagesExpired(); n != uint64(len(exp)) {
		t.Fatalf("expired counted %d, want %d", n, len(exp))
	}
	// Read again from the committed offset (a seek back, as a restarted
	// consumer does): still none of them, and not counted twice.
	if err := e.c.Seek(testTopic, "g", s, 0); err != nil {
		t.Fatal(err)
	}
	if b := e.fetch("g", s, 100, 0); fmt.Sprint(offsets(b.Entries)) != fmt.Sprint(live) {
		t.Fatalf("fetched again %v, want %v", offsets(b.Entries), live)
	}
	if n := e.c.MessagesExpired(); n != uint64(len(exp)) {
		t.Fatalf("expired counted %d after a second read, want %d", n, len(exp))
	}
	if c, err := e.c.Ack(testTopic, "g", s, live[len(live)-1]); err != nil || c != int64(len(ttlPlan)+1) {
		t.Fatalf("ack of the last live offset = %d, %v; want committed %d", c, err, len(ttlPlan)+1)
	}
}

// A shared group never hands out an expired message: it is finished in
// its place (skip), so acking every live message commits the whole log;
// each key's live messages come in order, one at a time; each expired
// message is counted once.
func TestSharedNeverHandsOutExpired(t *testing.T) {
	e := sharedEnv(t, Options{})
	exp, live := e.publishTTL()
	a, b := e.join("g"), e.join("g")
	var got []int64
	byKey := map[string][]int64{}
	for round := 0; round < 20 && len(got) < len(live); round++ {
		for _, s := range []string{a, b} {
			bt := e.fetch("g", s, 2, 0)
			for _, en := range bt.Entries {
				if exp[en.Offset] {
					t.Errorf("expired offset %d handed out", en.Offset)
				}
				got = append(got, en.Offset)
				k := contract.MessageKey(en.Payload)
				byKey[k] = append(byKey[k], en.Offset)
			}
			if len(bt.Entries) > 0 {
				e.ackOffsets("g", s, offsets(bt.Entries)...)
			}
		}
	}
	if len(got) != len(live) {
		t.Fatalf("handed out %v, want each of %v once", got, live)
	}
	if fmt.Sprint(byKey["k1"]) != "[1 5 10]" || fmt.Sprint(byKey["k2"]) != "[7]" {
		t.Errorf("keys handed out k1 %v, k2 %v; want [1 5 10], [7]", byKey["k1"], byKey["k2"])
	}
	if n := e.c.MessagesExpired(); n != uint64(len(exp)) {
		t.Errorf("expired counted %d, want %d", n, len(exp))
	}
	l, err := e.c.List(testTopic)
	if err != nil || len(l.Groups) != 1 || l.Groups[0].Committed != int64(len(ttlPlan)+1) {
		t.Fatalf("groups %+v, %v; want committed %d (past the expired tail)", l, err, len(ttlPlan)+1)
	}
	if _, ok := e.reg.Get("dead-letter.g"); ok {
		t.Error("skip wrote dead letters")
	}
}

// With mmmq.broker.groups.expired: dead-letter a shared group appends
// each expired message to its dead-letter topic (mmmq-dl-reason expired,
// no expiresAt of its own) instead of handing it out.
func TestSharedExpiredDeadLetter(t *testing.T) {
	e := sharedEnv(t, Options{Expired: ExpiredDeadLetter})
	exp, live := e.publishTTL()
	s := e.join("g")
	var got []int64
	for round := 0; round < 20 && len(got) < len(live); round++ {
		bt := e.fetch("g", s, 100, 0)
		got = append(got, offsets(bt.Entries)...)
		if len(bt.Entries) > 0 {
			e.ackOffsets("g", s, offsets(bt.Entries)...)
		}
	}
	for _, o := range got {
		if exp[o] {
			t.Errorf("expired offset %d handed out", o)
		}
	}
	dl, ok := e.reg.Get("dead-letter.g")
	if !ok || dl.HighWatermark() != int64(len(exp)) {
		t.Fatalf("dead letters: %v, want %d", ok, len(exp))
	}
	es, err := dl.ReadBatch(0, len(exp))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range es {
		var m struct {
			Headers map[string]string `json:"headers"`
		}
		if err := json.Unmarshal(en.Payload, &m); err != nil {
			t.Fatal(err)
		}
		off, _ := strconv.ParseInt(m.Headers[dispatcher.HeaderDLOffset], 10, 64)
		if m.Headers[dispatcher.HeaderDLReason] != dispatcher.ReasonExpired || m.Headers[dispatcher.HeaderDLGroup] != "g" || !exp[off] ||
			strings.Contains(string(en.Payload), `"expiresAt"`) {
			t.Errorf("dead letter %s: want reason expired for an expired offset, no expiresAt", en.Payload)
		}
	}
	if n := e.c.MessagesExpired(); n != uint64(len(exp)) {
		t.Errorf("expired counted %d, want %d", n, len(exp))
	}
}
