package httpapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// offsetsOf is each result's offset, -1 where there is none.
func offsetsOf(rs []BatchResult) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = -1
		if r.Offset != nil {
			out[i] = *r.Offset
		}
	}
	return out
}

// contents reads back topic through GET /topics/{topic}/messages and
// returns each message's content JSON, in offset order.
func (a *api) contents(topic string) []string {
	a.t.Helper()
	rec := a.call(http.MethodGet, "/topics/"+topic+"/messages?limit=1000", "", "")
	var page struct {
		Messages []struct {
			Offset  int64
			Message struct {
				Content any `json:"content"`
			}
		}
	}
	decodeJSON(a.t, rec, &page)
	var out []string
	for i, m := range page.Messages {
		if m.Offset != int64(i) {
			a.t.Fatalf("read-back of %s: offset %d at position %d", topic, m.Offset, i)
		}
		out = append(out, fmt.Sprint(m.Message.Content))
	}
	return out
}

// A JSON-array batch stores each topic's messages in batch order with
// consecutive offsets and answers 200 ACK with every message's topic and
// offset, in the batch's order.
func TestBatchStoresEachTopicInOrder(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	a.publish("b.t", `{"content":"already there"}`)
	rec := a.call(http.MethodPost, "/messages/batch", "application/json", `[
		{"topic":"a.t","content":1},
		{"topic":"b.t","content":2},
		{"topic":"a.t","content":3, "id":"x-3"},
		{"topic":"b.t","content":4},
		{"topic":"a.t","content":5}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusOK || resp.Acknowledgement != "ACK" || resp.Level != "DURABLE" || resp.Count != 5 ||
		resp.Failed != 0 || resp.Error != "" || resp.Code != "" {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	if got := fmt.Sprint(offsetsOf(resp.Results)); got != "[0 1 1 2 2]" {
		t.Errorf("offsets %s, want [0 1 1 2 2] (b.t held one message)", got)
	}
	for i, want := range []string{"a.t", "b.t", "a.t", "b.t", "a.t"} {
		if r := resp.Results[i]; r.Topic != want || r.Error != "" || r.Status != 0 {
			t.Errorf("result %d = %+v, want topic %s without error", i, r, want)
		}
	}
	if got := fmt.Sprint(a.contents("a.t")); got != "[1 3 5]" {
		t.Errorf("a.t holds %s, want [1 3 5]", got)
	}
	if got := fmt.Sprint(a.contents("b.t")); got != "[already there 2 4]" {
		t.Errorf("b.t holds %s", got)
	}
}

// With Content-Type application/x-ndjson a batch is one message per line
// (blank lines skipped); the same body as application/json is not an
// array and is refused whole.
func TestBatchNDJSON(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	body := "{\"topic\":\"n.t\",\"content\":\"a\"}\n\n  {\"topic\":\"n.t\",\"content\":\"b\"}\r\n"
	rec := a.call(http.MethodPost, "/messages/batch", "application/json", body)
	wantNACK(t, rec, http.StatusBadRequest, contract.CodeBadRequest, "JSON array")
	a.noTopics()

	rec = a.call(http.MethodPost, "/messages/batch?ack=durable", "application/x-ndjson; charset=utf-8", body)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusOK || resp.Count != 2 || resp.Level != "DURABLE" || fmt.Sprint(offsetsOf(resp.Results)) != "[0 1]" {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	if got := fmt.Sprint(a.contents("n.t")); got != "[a b]" {
		t.Errorf("n.t holds %s, want [a b]", got)
	}
}

// An ACCEPTED batch answers without offsets: they are not final yet.
func TestBatchAcceptedHasNoOffsets(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	rec := a.call(http.MethodPost, "/messages/batch?ack=accepted", "", `[{"topic":"acc.t","content":1},{"topic":"acc.t","content":2}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusOK || resp.Level != "ACCEPTED" || resp.Count != 2 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), `"offset"`) {
		t.Errorf("ACCEPTED batch answered with offsets: %s", rec.Body)
	}
	for i, r := range resp.Results {
		if r.Topic != "acc.t" || r.Error != "" {
			t.Errorf("result %d = %+v", i, r)
		}
	}
}

// Batch validation is all or nothing: any invalid message, a malformed or
// empty body, too many messages, a body over the limit or a bad ack level
// is refused with the status of the first problem, and nothing at all is
// stored, not even the valid messages' topics.
func TestBatchInvalidStoresNothing(t *testing.T) {
	const maxRecord = 300
	ok := `{"topic":"ok.t","content":1}`
	big := `{"topic":"ok.t","content":"` + strings.Repeat("x", maxRecord) + `"}`
	for _, tc := range []struct {
		name, query, body string
		status            int
		code              string
		text              string
		failed            int // >0: a BatchResponse naming this many invalid messages
	}{
		{"invalid topic", "", "[" + ok + `,{"topic":"../x","content":1}]`, 400, contract.CodeBadRequest, "message 1", 1},
		{"missing content", "", "[" + ok + `,{"topic":"ok.t"}]`, 400, contract.CodeBadRequest, "message 1", 1},
		{"record too large", "", "[" + ok + "," + big + "]", 413, contract.CodeTooLarge, "max-record-bytes", 1},
		{"first invalid decides", "", "[" + big + `,{"topic":"","content":1},` + ok + "]", 413, contract.CodeTooLarge, "2 of 3 messages are invalid", 2},
		{"not an array", "", ok, 400, contract.CodeBadRequest, "JSON array", 0},
		{"empty array", "", "[ ]", 400, contract.CodeBadRequest, "batch is empty", 0},
		{"unclosed array", "", "[" + ok, 400, contract.CodeBadRequest, "batch", 0},
		{"data after the array", "", "[" + ok + "] x", 400, contract.CodeBadRequest, "after the closing", 0},
		{"empty body", "", "", 400, contract.CodeBadRequest, "JSON array", 0},
		{"too many messages", "", "[" + strings.Repeat("1,", MaxBatchMessages) + "1]", 400, contract.CodeBadRequest, "more than 10000", 0},
		{"bad ack level", "?ack=sometimes", "[" + ok + "]", 400, contract.CodeBadRequest, "ack", 0},
		{"body over the limit", "", "[" + ok + "," + strings.Repeat(" ", 64<<10) + ok + "]", 413, contract.CodeTooLarge, "server.max-body-bytes", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAPI(t, Options{MaxRecordBytes: maxRecord, MaxBodyBytes: 64 << 10}, topicqueue.Options{})
			rec := a.call(http.MethodPost, "/messages/batch"+tc.query, "application/json", tc.body)
			if tc.failed == 0 {
				wantNACK(t, rec, tc.status, tc.code, tc.text)
				a.noTopics()
				return
			}
			var resp BatchResponse
			decodeJSON(t, rec, &resp)
			if rec.Code != tc.status || resp.Acknowledgement != "NACK" || resp.Code != tc.code || resp.Failed != tc.failed ||
				!strings.Contains(resp.Error, "nothing stored") || !strings.Contains(resp.Error, tc.text) {
				t.Fatalf("HTTP %d %.500s, want %d NACK %s naming %q", rec.Code, rec.Body, tc.status, tc.code, tc.text)
			}
			invalid := 0
			for i, r := range resp.Results {
				switch {
				case r.Offset != nil:
					t.Errorf("result %d has an offset: %+v", i, r)
				case r.Status != 0:
					invalid++
					if !strings.HasPrefix(r.Error, fmt.Sprintf("message %d: ", i)) {
						t.Errorf("result %d error %q does not name its message", i, r.Error)
					}
				case r.Error != "not stored: another message of the batch is invalid":
					t.Errorf("valid result %d = %+v, want it marked not stored", i, r)
				}
			}
			if invalid != tc.failed {
				t.Errorf("%d results with a status, want %d", invalid, tc.failed)
			}
			a.noTopics()
		})
	}
}

// A storage failure of one topic fails only that topic's messages: the
// others are stored and keep their offsets in the results; the answer is a
// NACK with the first failure's status and code and says which were not
// stored.
func TestBatchPartialStorageFailure(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{MaxTopics: 1})
	a.publish("full.a", `{"content":0}`)
	rec := a.call(http.MethodPost, "/messages/batch", "", `[
		{"topic":"full.a","content":1},
		{"topic":"full.b","content":2},
		{"topic":"full.a","content":3}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusServiceUnavailable || resp.Acknowledgement != "NACK" || resp.Code != contract.CodeTooManyTopics ||
		resp.Failed != 1 || resp.Count != 3 || !strings.Contains(resp.Error, "1 of 3 messages were not stored") ||
		!strings.Contains(resp.Error, "(the others were stored: results give each one's offset, or scheduleId for a scheduled one)") {
		t.Fatalf("HTTP %d %s, want 503 NACK %s for one message", rec.Code, rec.Body, contract.CodeTooManyTopics)
	}
	if got := fmt.Sprint(offsetsOf(resp.Results)); got != "[1 -1 2]" {
		t.Errorf("offsets %s, want [1 -1 2]", got)
	}
	// The room was taken before the batch: not by "earlier new topics".
	if r := resp.Results[1]; r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Error, "max-topics") ||
		!strings.Contains(r.Error, "the broker has as many topics as it may open") {
		t.Errorf("failed result = %+v, want 503 naming max-topics, room taken before the batch", r)
	}
	if got := fmt.Sprint(a.contents("full.a")); got != "[0 1 3]" {
		t.Errorf("full.a holds %s, want [0 1 3]", got)
	}
	if _, ok := a.reg.Get("full.b"); ok {
		t.Error("full.b was created over the topic limit")
	}
}

// Under max-topics, the new topics of a batch that fit are its first ones,
// in batch order, though topics are created in parallel (round-3 item 11:
// which ones were created depended on scheduling).
func TestBatchCreatesTopicsInBatchOrder(t *testing.T) {
	for round := range 20 {
		a := newAPI(t, Options{}, topicqueue.Options{MaxTopics: 3})
		var b strings.Builder
		b.WriteString("[")
		for i := range 8 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"topic":"new.t%d","content":%d}`, i, i)
		}
		b.WriteString("]")
		rec := a.call(http.MethodPost, "/messages/batch", "", b.String())
		var resp BatchResponse
		decodeJSON(t, rec, &resp)
		if got := fmt.Sprint(offsetsOf(resp.Results)); got != "[0 0 0 -1 -1 -1 -1 -1]" {
			t.Fatalf("round %d: offsets %s, want the first three topics created", round, got)
		}
		if r := resp.Results[5]; r.Status != http.StatusServiceUnavailable || !strings.Contains(r.Error, "max-topics") ||
			!strings.Contains(r.Error, "the batch's 3 earlier new topics took the room left") {
			t.Fatalf("round %d: refused result = %+v, want 503 naming max-topics and the 3 earlier new topics", round, r)
		}
	}
}

// When storage stores none of a batch's messages, the error says so: no
// talk of other messages with offsets.
func TestBatchWholeStorageFailure(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{MaxTopics: 1})
	a.publish("full.a", `{"content":0}`)
	rec := a.call(http.MethodPost, "/messages/batch", "", `[
		{"topic":"full.b","content":1},
		{"topic":"full.c","content":2}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusServiceUnavailable || resp.Acknowledgement != "NACK" || resp.Code != contract.CodeTooManyTopics ||
		resp.Failed != 2 || !strings.HasPrefix(resp.Error, "none of the 2 messages was stored; first: ") ||
		strings.Contains(resp.Error, "others") {
		t.Fatalf("HTTP %d %s, want 503 NACK saying none of the 2 messages was stored", rec.Code, rec.Body)
	}
	if got := fmt.Sprint(offsetsOf(resp.Results)); got != "[-1 -1]" {
		t.Errorf("offsets %s, want none", got)
	}
}
