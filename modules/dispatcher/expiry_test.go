package dispatcher

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// ttlMessage returns the stored JSON of message n of topic with key key
// ("" for none) that has expired (published an hour ago with a ttl of
// 1ms) when expired is set, else one that expires in an hour; no clock
// races either way.
func ttlMessage(t *testing.T, topic string, n int, key string, expired bool) []byte {
	t.Helper()
	at := time.Now()
	if expired {
		at = at.Add(-time.Hour)
	}
	ttl := time.Hour
	if expired {
		ttl = time.Millisecond
	}
	b, err := contract.AppendTTLMessage(nil, topic, json.RawMessage(strconv.Itoa(n)), "", key, ttl, nil, at)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expiryLog is a topic of 12 messages, some expired (among them the
// first and the last two), some with ordering keys; it returns the
// topic, the expired offsets and the live ones.
func expiryLog(t *testing.T, name string) (*memTopic, map[int64]bool, []int64) {
	tp := newMemTopic(t, t.TempDir(), name)
	plan := []struct {
		key     string
		expired bool
	}{
		{"k1", true}, {"k1", false}, {"", false}, {"k2", true}, {"k1", true}, {"k1", false},
		{"", true}, {"k2", false}, {"", false}, {"k3", false}, {"k2", true}, {"", true},
	}
	exp := map[int64]bool{}
	var live []int64
	for i, p := range plan {
		if p.expired {
			exp[int64(i)] = true
		} else {
			live = append(live, int64(i))
		}
		tp.appendStored(ttlMessage(t, name, i, p.key, p.expired))
	}
	// A message without a ttl is never expired.
	tp.appendStored(keyed(t, name, 9, "k1"))
	live = append(live, 12)
	return tp, exp, live
}

// A message past its expiresAt is never pushed, under every ordering and
// push shape: the checkpoint passes it in order as after an ACK (also at
// the end of the log), the status and the Manager count each one once,
// and under ordering key the key's later messages still go, in order.
func TestExpiredMessagesAreNeverPushed(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    func(Host) *Dispatcher
	}{
		{"topic", func(h Host) *Dispatcher { return New("d", h, MustPattern("t")) }},
		{"key", func(h Host) *Dispatcher {
			return New("d", h, MustPattern("t")).WithOrdering(OrderKey).WithMaxInFlight(4)
		}},
		{"none", func(h Host) *Dispatcher { return New("d", h, MustPattern("t")).WithMaxInFlight(4) }},
		{"batch", func(h Host) *Dispatcher {
			return New("d", h, MustPattern("t")).WithBatch(Batch{MaxMessages: 3})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConsumer(t, nil)
			tp, exp, live := expiryLog(t, "t")
			m := startManager(t, newMemSource(tp), testOptions(), tc.d(c.host(t)))
			waitCommitted(t, m, "d", "t", 13)
			got := map[int64]bool{}
			for _, r := range c.requestsFor("t", "d") {
				offs := []int64{r.Offset}
				if tc.name == "batch" {
					offs = batchOffsets(t, r.Body)
				}
				for _, o := range offs {
					if exp[o] {
						t.Errorf("expired offset %d was pushed", o)
					}
					got[o] = true
				}
			}
			for _, o := range live {
				if !got[o] {
					t.Errorf("live offset %d was never pushed", o)
				}
			}
			st := status(m, "d", "t")
			if st.TTLExpired != uint64(len(exp)) || m.MessagesExpired() != uint64(len(exp)) {
				t.Errorf("expired counted %d in the status, %d by the Manager; want %d", st.TTLExpired, m.MessagesExpired(), len(exp))
			}
			if st.Exhausted != 0 || st.DeadLettered != 0 || st.Delivered != uint64(len(live)) {
				t.Errorf("status %+v: want no exhausted, no dead letters, %d delivered", st, len(live))
			}
			wantCheckpoint(t, tp.dir, "d", 13)
		})
	}
}

// Under ordering key the live messages of each key reach the consumer in
// offset order, the expired ones between them left out.
func TestExpiredKeepsKeyOrder(t *testing.T) {
	c := newConsumer(t, nil)
	tp, _, _ := expiryLog(t, "t")
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("t")).WithOrdering(OrderKey).WithMaxInFlight(4))
	waitCommitted(t, m, "d", "t", 13)
	byKey := map[string][]int64{}
	for _, r := range c.requestsFor("t", "d") {
		byKey[r.Key] = append(byKey[r.Key], r.Offset)
	}
	for key, want := range map[string][]int64{"k1": {1, 5, 12}, "k2": {7}, "k3": {9}} {
		if fmt.Sprint(byKey[key]) != fmt.Sprint(want) {
			t.Errorf("key %s pushed %v, want %v", key, byKey[key], want)
		}
	}
}

// expired: dead-letter appends each expired message to the dead-letter
// topic with mmmq-dl-reason expired (and no expiresAt of its own: it
// would be expired there at once) before the checkpoint passes it; none
// is pushed, and they count as expired and dead-lettered, not exhausted.
func TestExpiredDeadLetter(t *testing.T) {
	c := newConsumer(t, nil)
	tp, exp, _ := expiryLog(t, "t")
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	d := New("d", c.host(t), MustPattern("t")).WithExpired(ExpiredDeadLetter)
	m := startWithPublisher(t, src, pub, testOptions(), d)
	waitCommitted(t, m, "d", "t", 13)
	for _, r := range c.requestsFor("t", "d") {
		if exp[r.Offset] {
			t.Errorf("expired offset %d was pushed", r.Offset)
		}
	}
	dls := pub.published("dead-letter.d")
	if len(dls) != len(exp) {
		t.Fatalf("%d dead letters, want %d (one per expired message)", len(dls), len(exp))
	}
	for _, dl := range dls {
		h := decodeStored(t, dl).Headers
		off, _ := strconv.ParseInt(h[HeaderDLOffset], 10, 64)
		if h[HeaderDLReason] != ReasonExpired || h[HeaderDLTopic] != "t" || !exp[off] {
			t.Errorf("dead letter %s: want reason %q for an expired offset of t", dl, ReasonExpired)
		}
		if strings.Contains(string(dl), `"expiresAt"`) {
			t.Errorf("dead letter %s carries an expiresAt", dl)
		}
	}
	st := status(m, "d", "t")
	if st.TTLExpired != uint64(len(exp)) || st.DeadLettered != uint64(len(exp)) || st.Exhausted != 0 {
		t.Errorf("status: expired %d, dead-lettered %d, exhausted %d; want %d, %d, 0", st.TTLExpired, st.DeadLettered, st.Exhausted, len(exp), len(exp))
	}
}

// expired takes skip or dead-letter; dead-letter needs dead letters on.
func TestValidateExpired(t *testing.T) {
	h, _ := ParseHost("http://localhost:8081")
	for _, a := range []ExpiredAction{"", ExpiredSkip, ExpiredDeadLetter} {
		if err := New("d", h, MustPattern("t")).WithExpired(a).Validate(); err != nil {
			t.Errorf("expired %q: %v", a, err)
		}
	}
	if err := New("d", h, MustPattern("t")).WithExpired("drop").Validate(); err == nil || !strings.Contains(err.Error(), `expired: must be "skip" or "dead-letter"`) {
		t.Errorf("expired drop: %v", err)
	}
	if err := New("d", h, MustPattern("t")).WithDeadLetter("").WithExpired(ExpiredDeadLetter).Validate(); err == nil || !strings.Contains(err.Error(), "expired: ") {
		t.Errorf("expired dead-letter with dead letters off: %v", err)
	}
}

// A redriven message carries no expiresAt, even when its dead letter had
// one: it is a new message, delivered again.
func TestRedriveDropsExpiresAt(t *testing.T) {
	h := map[string]string{HeaderDLTopic: "t", HeaderDLOffset: "4", HeaderDLDispatcher: "d", HeaderDLReason: ReasonExpired}
	dl, err := contract.AppendTTLMessage(nil, "dead-letter.d", json.RawMessage(`{"n":4}`), "", "k1", time.Millisecond, h, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if contract.MessageExpiresAt(dl) == 0 {
		t.Fatalf("the dead letter of the test has no expiresAt: %s", dl)
	}
	topic, stored, why := redriven("dead-letter.d", HeaderDLDispatcher, "d", "", contract.Entry{Offset: 0, Payload: dl})
	if why != "" || topic != "t" {
		t.Fatalf("redriven: %q, %q", topic, why)
	}
	if contract.MessageExpiresAt(stored) != 0 || strings.Contains(string(stored), `"expiresAt"`) {
		t.Errorf("redriven message %s carries an expiresAt", stored)
	}
	if contract.MessageKey(stored) != "k1" {
		t.Errorf("redriven message %s lost its key", stored)
	}
}

// A message NACKed by a consumer that answers only after the message has
// expired is not resent: the expiry is checked before every push, resends
// included. (The consumer holds its answer until past expiresAt, so the
// outcome does not depend on timing: at most the first push happens.)
func TestExpiredIsNotResent(t *testing.T) {
	b, err := contract.AppendTTLMessage(nil, "t", json.RawMessage(`0`), "", "", 100*time.Millisecond, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	expires := time.UnixMilli(contract.MessageExpiresAt(b))
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Offset == 0 {
			time.Sleep(time.Until(expires) + 5*time.Millisecond)
			answer(w, NACK)
			return
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.appendStored(b, keyed(t, "t", 1, ""))
	m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("t")))
	waitCommitted(t, m, "d", "t", 2)
	n := 0
	for _, r := range c.requestsFor("t", "d") {
		if r.Offset == 0 {
			n++
		}
	}
	if n > 1 {
		t.Errorf("offset 0 pushed %d times, want at most once (resent after it expired)", n)
	}
	if st := status(m, "d", "t"); st.TTLExpired != 1 || st.Exhausted != 0 {
		t.Errorf("status expired %d, exhausted %d; want 1, 0", st.TTLExpired, st.Exhausted)
	}
}

// A message that expires while its worker backs off (the consumer answers
// abnormally until past expiresAt) is finished as expired at its resend,
// and the worker is then idle: not backing off, no attempt shown, its
// head the next message (the end of the log). The status that kept
// "backoff" with a nextRetry in the past, and mmmq_dispatch_backoff 1,
// until another message came, is what this guards against.
func TestExpiredDuringBackoffEndsTheBackoff(t *testing.T) {
	for _, ordering := range []Ordering{OrderTopic, OrderNone, OrderKey} {
		t.Run(string(ordering), func(t *testing.T) {
			b, err := contract.AppendTTLMessage(nil, "t", json.RawMessage(`0`), "", "", 150*time.Millisecond, nil, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			expires := time.UnixMilli(contract.MessageExpiresAt(b))
			c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
				if time.Now().Before(expires) {
					time.Sleep(time.Until(expires) + 5*time.Millisecond)
				}
				w.WriteHeader(http.StatusInternalServerError) // abnormal: the worker backs off
			})
			tp := newMemTopic(t, t.TempDir(), "t")
			tp.appendStored(b)
			m := startManager(t, newMemSource(tp), testOptions(), New("d", c.host(t), MustPattern("t")).WithOrdering(ordering))
			waitCommitted(t, m, "d", "t", 1)
			deadline := time.Now().Add(2 * time.Second)
			var st WorkerStatus
			for {
				st = status(m, "d", "t")
				if st.State == StateIdle && !st.Backoff && st.Attempt == 0 || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if st.State != StateIdle || st.Backoff || st.Attempt != 0 || st.TTLExpired != 1 {
				t.Errorf("after the expiry: state %q, backoff %v, attempt %d, next retry %v, expired %d; want idle, false, 0, 1",
					st.State, st.Backoff, st.Attempt, st.NextRetry, st.TTLExpired)
			}
		})
	}
}
