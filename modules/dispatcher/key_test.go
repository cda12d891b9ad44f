package dispatcher

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// keyed returns the stored JSON of a message of topic with content n and
// ordering key key ("" for none), as the publish path stores it.
func keyed(t *testing.T, topic string, n int, key string) []byte {
	t.Helper()
	b, err := contract.EncodeKeyedMessage(topic, json.RawMessage(`{"n":`+string(rune('0'+n))+`}`), "", key, nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// storedKey is the "key" member of a stored message JSON as encoding/json
// reads it, and whether there is one.
func storedKey(t *testing.T, b []byte) (string, bool) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("stored message %s: %v", b, err)
	}
	raw, ok := m["key"]
	var k string
	if ok && json.Unmarshal(raw, &k) != nil {
		t.Fatalf("key of %s is not a string", b)
	}
	return k, ok
}

// A push of one message carries its ordering key in mmmq-key, exactly as
// published (UTF-8 and inner spaces included); a message without one, or
// with a stored "key" that is not a valid key (another tool's log), gets
// no mmmq-key. A batch push has no mmmq-key: each message of its body
// carries its own "key" in its stored JSON.
func TestPushCarriesTheKey(t *testing.T) {
	c := newConsumer(t, nil)
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.appendStored(
		keyed(t, "t", 0, "customer 7/é"),
		keyed(t, "t", 1, ""),
		[]byte(`{"topic":{"name":"t"},"content":2,"id":"x","key":" not a key","timestamp":1}`),
		keyed(t, "t", 3, "k-3"),
	)
	src := newMemSource(tp)
	one := New("one", c.host(t), MustPattern("t"))
	batch := New("batch", c.host(t), MustPattern("t")).WithBatch(Batch{MaxMessages: 4, MaxWait: 50 * time.Millisecond})
	m := startManager(t, src, testOptions(), one, batch)
	waitCommitted(t, m, "one", "t", 4)
	waitCommitted(t, m, "batch", "t", 4)

	wantKeys := []string{"customer 7/é", "", "", "k-3"} // "": no mmmq-key
	rs := c.requestsFor("t", "one")
	wantOffsets(t, "single pushes", rs, 0, 1, 2, 3)
	for i, r := range rs {
		if r.Key != wantKeys[i] || r.HasKey != (wantKeys[i] != "") {
			t.Errorf("push of offset %d: mmmq-key %q (present: %t), want %q", r.Offset, r.Key, r.HasKey, wantKeys[i])
		}
	}
	bodyKeys := map[int64]string{}
	for _, r := range c.requestsFor("t", "batch") {
		if r.HasKey {
			t.Errorf("batch push with mmmq-key %q", r.Key)
		}
		var msgs []struct {
			Offset int64   `json:"offset"`
			Key    *string `json:"key"`
		}
		if err := json.Unmarshal([]byte(r.Body), &msgs); err != nil {
			t.Fatalf("batch body %s: %v", r.Body, err)
		}
		for _, e := range msgs {
			if e.Key != nil {
				bodyKeys[e.Offset] = *e.Key
			}
		}
	}
	if want := map[int64]string{0: "customer 7/é", 2: " not a key", 3: "k-3"}; !reflect.DeepEqual(bodyKeys, want) {
		t.Errorf("keys in the batch bodies = %v, want the stored ones %v", bodyKeys, want)
	}
}

// A dead-lettered message keeps its ordering key, and so does the message
// a redrive publishes again (pushed with mmmq-key like any); a message
// without a key stays without one through both.
func TestDeadLetterAndRedriveKeepTheKey(t *testing.T) {
	var cured atomic.Bool
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Topic == "order.new" && !cured.Load() {
			http.Error(w, "no", http.StatusBadRequest) // ack-mode status: a NACK
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	tp := newMemTopic(t, t.TempDir(), "order.new")
	tp.appendStored(keyed(t, "order.new", 0, "customer-7"), keyed(t, "order.new", 1, ""))
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.topics[tp.name] = tp
	d := New("d", c.host(t), MustPattern("order.*")).WithAckMode(AckStatus)
	m := startWithPublisher(t, src, pub, testOptions(), d)
	waitCommitted(t, m, "d", "order.new", 2)

	dls := pub.published("dead-letter.d")
	if len(dls) != 2 {
		t.Fatalf("dead letters = %d, want 2", len(dls))
	}
	if k, ok := storedKey(t, dls[0]); k != "customer-7" || decodeStored(t, dls[0]).Headers[HeaderDLOffset] != "0" {
		t.Errorf("dead letter of offset 0 = %s, want key customer-7 (has one: %t)", dls[0], ok)
	}
	if _, ok := storedKey(t, dls[1]); ok {
		t.Errorf("dead letter of a message without a key has one: %s", dls[1])
	}

	cured.Store(true)
	res, err := m.Redrive(context.Background(), "d", -1, -1)
	if err != nil || len(res.Redriven) != 2 {
		t.Fatalf("redrive = %+v, %v", res, err)
	}
	waitCommitted(t, m, "d", "order.new", 4)
	again := pub.published("order.new")
	if len(again) != 2 {
		t.Fatalf("redriven = %d messages, want 2", len(again))
	}
	if k, _ := storedKey(t, again[0]); k != "customer-7" || decodeStored(t, again[0]).Headers[HeaderRedrivenFrom] != "dead-letter.d/0" {
		t.Errorf("redriven message of dead letter 0 = %s, want key customer-7", again[0])
	}
	if _, ok := storedKey(t, again[1]); ok {
		t.Errorf("redriven message without a key has one: %s", again[1])
	}
	rs := c.requestsFor("order.new", "d")
	last := map[int64]received{}
	for _, r := range rs {
		last[r.Offset] = r
	}
	if last[2].Key != "customer-7" || last[3].HasKey {
		t.Errorf("pushes of the redriven offsets 2, 3: mmmq-key %q, %q (present: %t); want customer-7, none", last[2].Key, last[3].Key, last[3].HasKey)
	}
}
