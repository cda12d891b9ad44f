package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// fakeScheduler records what it is given.
type fakeScheduler struct {
	mu      sync.Mutex
	topics  []string
	ats     []time.Time
	stored  [][]byte
	err     error
	pending int
}

func (f *fakeScheduler) Schedule(_ context.Context, topic string, stored []byte, at time.Time) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return "", f.err
	}
	f.topics, f.ats, f.stored = append(f.topics, topic), append(f.ats, at), append(f.stored, append([]byte(nil), stored...))
	return "123-00000000000000" + strconv.Itoa(10+len(f.topics)), nil
}
func (f *fakeScheduler) Cancel(string, string) (bool, error) { return false, nil }
func (f *fakeScheduler) Pending(string) int                  { return f.pending }

// A future deliverAt (RFC 3339 or Unix ms) or a positive delay goes to the
// scheduler, not the topic; the ACK says scheduled, the schedule id and
// the due time in both forms, and has no offset.
func TestPublishScheduled(t *testing.T) {
	f := &fakeScheduler{}
	a := newAPI(t, Options{Scheduler: f}, topicqueue.Options{})
	future := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for _, body := range []string{
		`{"topic":"t","content":1,"delay":"1h"}`,
		`{"topic":"t","content":2,"deliverAt":"` + future.Format(time.RFC3339Nano) + `"}`,
		`{"topic":{"name":"t"},"content":3,"deliverAt":` + strconv.FormatInt(future.UnixMilli(), 10) + `}`,
	} {
		rec := a.call(http.MethodPost, "/messages", "application/json", body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: HTTP %d %s", body, rec.Code, rec.Body)
		}
		var ack map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &ack); err != nil {
			t.Fatal(err)
		}
		if ack["scheduled"] != true || ack["scheduleId"] == nil || ack["level"] != "DURABLE" || ack["acknowledgement"] != "ACK" {
			t.Errorf("%s: ACK %s", body, rec.Body)
		}
		if _, has := ack["offset"]; has {
			t.Errorf("%s: a scheduled ACK has an offset: %s", body, rec.Body)
		}
		ms, _ := ack["deliverAtMs"].(float64)
		at, err := time.Parse(time.RFC3339Nano, ack["deliverAt"].(string))
		if err != nil || at.UnixMilli() != int64(ms) || time.Until(at) < 59*time.Minute {
			t.Errorf("%s: deliverAt %v / %v", body, ack["deliverAt"], ack["deliverAtMs"])
		}
	}
	if len(f.topics) != 3 || !f.ats[1].Equal(future) || !f.ats[2].Equal(future) {
		t.Fatalf("scheduler got %v at %v", f.topics, f.ats)
	}
	if l := a.reg.List(); len(l) != 0 {
		t.Errorf("a scheduled publish created topic %s now", l[0].Name())
	}
	var stored map[string]any
	if err := json.Unmarshal(f.stored[0], &stored); err != nil || stored["content"] != float64(1) {
		t.Errorf("stored %s", f.stored[0])
	}
}

// A deliverAt not in the future, or a delay of 0, is an ordinary publish
// answered with its offset.
func TestPublishDueNowIsOrdinary(t *testing.T) {
	f := &fakeScheduler{}
	a := newAPI(t, Options{Scheduler: f}, topicqueue.Options{})
	for i, body := range []string{
		`{"topic":"t","content":1,"deliverAt":"2001-01-01T00:00:00Z"}`,
		`{"topic":"t","content":2,"deliverAt":0}`,
		`{"topic":"t","content":3,"delay":"0s"}`,
		`{"topic":"t","content":4,"delay":null}`,
	} {
		rec := a.call(http.MethodPost, "/messages", "application/json", body)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"offset":`+strconv.Itoa(i)) {
			t.Errorf("%s: HTTP %d %s", body, rec.Code, rec.Body)
		}
	}
	if len(f.topics) != 0 {
		t.Errorf("scheduler got %v", f.topics)
	}
}

// The API rules: each refusal is answered with its status and nothing is
// stored or scheduled.
func TestPublishScheduledRules(t *testing.T) {
	for _, c := range []struct {
		name, path, body string
		sched            contract.Scheduler
		status           int
		says             string
	}{
		{"both", "/messages", `{"topic":"t","content":1,"delay":"1h","deliverAt":"2100-01-01T00:00:00Z"}`, &fakeScheduler{}, 400, "not both"},
		{"bad delay", "/messages", `{"topic":"t","content":1,"delay":"soon"}`, &fakeScheduler{}, 400, "not a duration"},
		{"negative delay", "/messages", `{"topic":"t","content":1,"delay":"-1s"}`, &fakeScheduler{}, 400, "negative"},
		{"delay number", "/messages", `{"topic":"t","content":1,"delay":5}`, &fakeScheduler{}, 400, "not a string"},
		{"bad deliverAt", "/messages", `{"topic":"t","content":1,"deliverAt":"tomorrow"}`, &fakeScheduler{}, 400, "RFC 3339"},
		{"deliverAt fraction", "/messages", `{"topic":"t","content":1,"deliverAt":1.5}`, &fakeScheduler{}, 400, "Unix milliseconds"},
		{"deliverAt bool", "/messages", `{"topic":"t","content":1,"deliverAt":true}`, &fakeScheduler{}, 400, "Unix milliseconds"},
		{"with ttl", "/messages", `{"topic":"t","content":1,"delay":"1h","ttl":"2h"}`, &fakeScheduler{}, 400, "not supported yet"},
		{"batch", "/messages/batch", `[{"topic":"t","content":1,"delay":"1h"}]`, &fakeScheduler{}, 400, "not supported in batches yet"},
		{"no scheduler", "/messages", `{"topic":"t","content":1,"delay":"1h"}`, nil, 501, "no scheduler module"},
		{"scheduler refuses", "/messages", `{"topic":"t","content":1,"delay":"1h"}`, &fakeScheduler{err: contract.TooManyScheduled("max-pending-per-topic")}, 507, "max-pending-per-topic"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newAPI(t, Options{Scheduler: c.sched}, topicqueue.Options{})
			rec := a.call(http.MethodPost, c.path, "application/json", c.body)
			if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.says) || !strings.Contains(rec.Body.String(), `"NACK"`) {
				t.Fatalf("HTTP %d %s; want %d saying %q", rec.Code, rec.Body, c.status, c.says)
			}
			if f, ok := c.sched.(*fakeScheduler); ok && len(f.topics) != 0 {
				t.Errorf("scheduled %v", f.topics)
			}
			a.noTopics()
		})
	}
}

// DELETE /topics/{t} is 409 SCHEDULED_PENDING while the scheduler holds
// messages of t, whether t exists yet or not.
func TestDeleteTopicWithPendingScheduled(t *testing.T) {
	f := &fakeScheduler{pending: 3}
	a := newAPI(t, Options{Scheduler: f}, topicqueue.Options{})
	a.publish("t", `{}`)
	for _, topic := range []string{"t", "not-yet"} {
		rec := a.call(http.MethodDelete, "/topics/"+topic, "", "")
		if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), contract.CodeScheduledPending) || !strings.Contains(rec.Body.String(), "3 pending") {
			t.Fatalf("%s: HTTP %d %s", topic, rec.Code, rec.Body)
		}
	}
	f.pending = 0
	if rec := a.call(http.MethodDelete, "/topics/t", "", ""); rec.Code != http.StatusOK {
		t.Fatalf("no pending: HTTP %d %s", rec.Code, rec.Body)
	}
}
