package dispatcher

import (
	"context"
	"net/http"
	"reflect"
	"sync/atomic"
	"testing"
)

// TestRedriveOfADeadLetterOfADeadLetter: dispatcher "a" dead-letters a
// message of order.new; dispatcher "b", which watches dead-letter.**,
// refuses that dead letter too. b's dead letter keeps the original topic,
// offset and id and points back to a's (mmmq-dl-previous, mmmq-dl-hops), so
// redriving it through b publishes to order.new, not into dead-letter.a
// (where a's redrive would skip it as "not a dead letter"); a's dead
// letter stays as it was and a's redrive still works.
func TestRedriveOfADeadLetterOfADeadLetter(t *testing.T) {
	var cured atomic.Bool
	c := newConsumer(t, func(_ received, w http.ResponseWriter, _ *http.Request) {
		if !cured.Load() {
			http.Error(w, "no", http.StatusBadRequest) // ack-mode status: a NACK
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	tp := newMemTopic(t, t.TempDir(), "order.new")
	tp.publish(1)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.topics[tp.name] = tp
	a := New("a", c.host(t), MustPattern("order.*")).WithAckMode(AckStatus)
	b := New("b", c.host(t), MustPattern("dead-letter.**")).WithAckMode(AckStatus)
	m := startWithPublisher(t, src, pub, testOptions(), a, b)
	waitCommitted(t, m, "a", "order.new", 1)
	waitCommitted(t, m, "b", "dead-letter.a", 1)

	first := decodeStored(t, pub.published("dead-letter.a")[0])
	dls := pub.published("dead-letter.b")
	if len(dls) != 1 {
		t.Fatalf("dead letters of b = %d, want 1", len(dls))
	}
	second := decodeStored(t, dls[0])
	wantH := map[string]string{"id": "hdr", HeaderDLTopic: "order.new", HeaderDLOffset: "0", HeaderDLOriginalID: "m-0",
		HeaderDLAttempts: "4", HeaderDLReason: ReasonNACKs, HeaderDLLastStatus: "400", HeaderDLDispatcher: "b",
		HeaderDLPrevious: "dead-letter.a/0", HeaderDLHops: "2"}
	if !reflect.DeepEqual(second.Headers, wantH) {
		t.Errorf("dead letter of the dead letter: headers %v, want %v", second.Headers, wantH)
	}
	if string(second.Content) != string(first.Content) || first.Headers[HeaderDLDispatcher] != "a" {
		t.Errorf("content %s, want %s; a's dead letter %v", second.Content, first.Content, first.Headers)
	}

	cured.Store(true)
	res, err := m.Redrive(context.Background(), "b", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Redriven) != 1 || res.Redriven[0] != (Redriven{DeadLetterOffset: 0, Topic: "order.new", Offset: 1}) || len(res.Skipped) != 0 {
		t.Fatalf("redrive of b = %+v, want offset 0 back on order.new", res)
	}
	again := decodeStored(t, pub.published("order.new")[0])
	if again.Headers[HeaderRedrivenFrom] != "dead-letter.b/0" || again.Headers[HeaderDLPrevious] != "" || again.Headers["id"] != "hdr" {
		t.Errorf("redriven message headers = %v", again.Headers)
	}
	if n := len(pub.published("dead-letter.a")); n != 1 {
		t.Errorf("dead-letter.a holds %d entries after b's redrive, want a's 1", n)
	}
	res, err = m.Redrive(context.Background(), "a", -1, -1)
	if err != nil || len(res.Redriven) != 1 || res.Redriven[0].Topic != "order.new" || len(res.Skipped) != 0 {
		t.Errorf("redrive of a = %+v, %v", res, err)
	}
	waitCommitted(t, m, "a", "order.new", 3)
}

// A message published by hand into a dead-letter topic (no mmmq-dl-*
// headers) is dead-lettered as any message: its original topic is the
// dead-letter topic it was read from.
func TestChainedFromNeedsADeadLetter(t *testing.T) {
	for _, tc := range []struct {
		topic string
		h     map[string]string
		hops  int
		ok    bool
	}{
		{"dead-letter.a", map[string]string{HeaderDLTopic: "order.new", HeaderDLOffset: "3"}, 1, true},
		{"dead-letter.a", map[string]string{HeaderDLTopic: "order.new", HeaderDLOffset: "3", HeaderDLHops: "4"}, 4, true},
		{"dead-letter.a", map[string]string{}, 0, false},
		{"dead-letter.a", map[string]string{HeaderDLTopic: "a..b", HeaderDLOffset: "3"}, 0, false},
		{"dead-letter.a", map[string]string{HeaderDLTopic: "order.new", HeaderDLOffset: "-1"}, 0, false},
		{"order.new", map[string]string{HeaderDLTopic: "secret", HeaderDLOffset: "3"}, 0, false},
	} {
		hops, ok := chainedFrom(tc.topic, tc.h)
		if hops != tc.hops || ok != tc.ok {
			t.Errorf("chainedFrom(%q, %v) = %d, %v, want %d, %v", tc.topic, tc.h, hops, ok, tc.hops, tc.ok)
		}
	}
}
