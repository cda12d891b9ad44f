package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

func newDedupAPI(t *testing.T) *api {
	t.Helper()
	return newAPI(t, Options{}, topicqueue.Options{Dedup: dedup.New(dedup.Options{Window: time.Minute})})
}

// TestPublishDuplicateID: POST /messages with the same producer id twice
// answers the first offset with "duplicate": true and stores one message;
// without an id the same body is stored twice; ?ack=accepted answers
// ACCEPTED with "duplicate": true and no offset; the same id on another
// topic is another message.
func TestPublishDuplicateID(t *testing.T) {
	a := newDedupAPI(t)
	pub := func(target, body string) PublishResponse {
		t.Helper()
		rec := a.call(http.MethodPost, target, "application/json", body)
		var r PublishResponse
		decodeJSON(t, rec, &r)
		if rec.Code != http.StatusOK || r.Acknowledgement != "ACK" {
			t.Fatalf("%s %s: HTTP %d %s", target, body, rec.Code, rec.Body)
		}
		return r
	}
	first := pub("/messages", `{"topic":"t","content":1,"id":"order-42"}`)
	if first.Duplicate || first.Offset == nil || *first.Offset != 0 {
		t.Fatalf("first: %+v", first)
	}
	again := a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":2,"id":"order-42"}`)
	if want := `{"acknowledgement":"ACK","topic":"t","offset":0,"level":"DURABLE","id":"order-42","duplicate":true}` + "\n"; again.Body.String() != want {
		t.Fatalf("duplicate answer %s, want %s", again.Body, want)
	}
	acc := pub("/messages?ack=accepted", `{"topic":"t","content":3,"id":"order-42"}`)
	if !acc.Duplicate || acc.Offset != nil || acc.Level != "ACCEPTED" {
		t.Fatalf("ACCEPTED duplicate: %+v", acc)
	}
	if r := pub("/messages", `{"topic":"u","content":1,"id":"order-42"}`); r.Duplicate {
		t.Fatalf("same id on another topic: %+v", r)
	}
	for i := 0; i < 2; i++ {
		if r := pub("/messages", `{"topic":"t","content":1}`); r.Duplicate || *r.Offset != int64(1+i) {
			t.Fatalf("without an id, publish %d: %+v", i, r)
		}
	}
	q, _ := a.reg.Get("t")
	if q.HighWatermark() != 3 {
		t.Fatalf("topic t holds %d messages, want 3 (one order-42, two without id)", q.HighWatermark())
	}
	p, _ := q.Read(0)
	if !strings.Contains(string(p), `"id":"order-42","idFromProducer":true`) {
		t.Fatalf("stored %s", p)
	}
}

// TestBatchDuplicateID: in POST /messages/batch a repeated id is stored
// once; the repeat, and a message whose id an earlier publish stored, are
// marked "duplicate" with the first offset.
func TestBatchDuplicateID(t *testing.T) {
	a := newDedupAPI(t)
	a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":0,"id":"a"}`)
	rec := a.call(http.MethodPost, "/messages/batch", "application/json",
		`[{"topic":"t","content":1,"id":"a"},{"topic":"t","content":2,"id":"b"},{"topic":"u","content":3,"id":"b"},{"topic":"t","content":4,"id":"b"},{"topic":"t","content":5}]`)
	var br BatchResponse
	decodeJSON(t, rec, &br)
	if rec.Code != http.StatusOK || br.Acknowledgement != "ACK" || br.Failed != 0 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	var got []string
	for _, r := range br.Results {
		got = append(got, fmt.Sprintf("%s@%d/%t/%s", r.Topic, *r.Offset, r.Duplicate, r.ID))
	}
	generated := br.Results[4].ID
	want := "t@0/true/a t@1/false/b u@0/false/b t@1/true/b t@2/false/" + generated
	if strings.Join(got, " ") != want || generated == "" {
		t.Fatalf("results %v, want %s (the last with a generated id)", got, want)
	}
	if q, _ := a.reg.Get("t"); q.HighWatermark() != 3 {
		t.Fatalf("topic t holds %d messages, want 3", q.HighWatermark())
	}
}
