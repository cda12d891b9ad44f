package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/schedule"
	"github.com/mmmq/mmmq/modules/storage/vfs"
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
		{"both", "/messages", `{"topic":"t","content":1,"delay":"1h","deliverAt":"2100-01-01T00:00:00Z"}`, &fakeScheduler{}, 400, `"error":"give deliverAt or delay, not both (deliverAt: an RFC 3339 time`},
		{"bad delay", "/messages", `{"topic":"t","content":1,"delay":"soon"}`, &fakeScheduler{}, 400, `"error":"delay \"soon\" is not a duration (deliverAt: an RFC 3339 time`},
		{"negative delay", "/messages", `{"topic":"t","content":1,"delay":"-1s"}`, &fakeScheduler{}, 400, `"error":"delay \"-1s\" is negative (deliverAt: an RFC 3339 time`},
		{"delay number", "/messages", `{"topic":"t","content":1,"delay":5}`, &fakeScheduler{}, 400, `"error":"delay is a JSON number, not a string (deliverAt: an RFC 3339 time`},
		{"bad deliverAt", "/messages", `{"topic":"t","content":1,"deliverAt":"tomorrow"}`, &fakeScheduler{}, 400, `"error":"deliverAt \"tomorrow\" is not an RFC 3339 time (deliverAt: an RFC 3339 time`},
		{"deliverAt fraction", "/messages", `{"topic":"t","content":1,"deliverAt":1.5}`, &fakeScheduler{}, 400, `"error":"deliverAt 1.5 is not a non-negative integer of Unix milliseconds (deliverAt: an RFC 3339 time`},
		{"deliverAt in seconds", "/messages", `{"topic":"t","content":1,"deliverAt":1796400000}`, &fakeScheduler{}, 400, `"error":"deliverAt is in Unix milliseconds; 1796400000 looks like seconds (1796400000*1000 would be 2026-12-04T`},
		{"deliverAt in seconds, past", "/messages", `{"topic":"t","content":1,"deliverAt":1000000000}`, &fakeScheduler{}, 400, "looks like seconds"},
		{"delay units", "/messages", `{"topic":"t","content":1,"delay":"5d"}`, &fakeScheduler{}, 400, "units ns, us, ms, s, m, h"},
		{"deliverAt bool", "/messages", `{"topic":"t","content":1,"deliverAt":true}`, &fakeScheduler{}, 400, `"error":"deliverAt true is not a non-negative integer of Unix milliseconds (`},
		{"ttl ends before due", "/messages", `{"topic":"t","content":1,"delay":"2h","ttl":"1h"}`, &fakeScheduler{}, 400, "would expire before it is due"},
		{"ttl ends at due", "/mmmq/messages", `{"topic":"t","content":1,"delay":"1h","ttl":"1h"}`, &fakeScheduler{}, 400, "a scheduled message must be due before publish time + ttl (give a longer ttl or a shorter delay)"},
		{"no scheduler", "/messages", `{"topic":"t","content":1,"delay":"1h"}`, nil, 501, "no scheduler module"},
		{"batch both", "/messages/batch", `[{"topic":"t","content":0},{"topic":"t","content":1,"delay":"1h","deliverAt":"2100-01-01T00:00:00Z"}]`, &fakeScheduler{}, 400, "message 1: give"},
		{"batch ttl", "/messages/batch", `[{"topic":"t","content":0,"delay":"1h"},{"topic":"t","content":1,"delay":"2h","ttl":"1h"}]`, &fakeScheduler{}, 400, "message 1: the message would expire"},
		{"batch no scheduler", "/messages/batch", `[{"topic":"t","content":0},{"topic":"t","content":1,"delay":"1h"}]`, nil, 501, "message 1: scheduled messages"},
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

// dropScheduler is a fakeScheduler that drops a topic's pending messages
// with the topic (contract.ScheduleDropper).
type dropScheduler struct {
	fakeScheduler
	dropErr error
	dropped []string
}

func (f *dropScheduler) DropTopic(_ context.Context, topic string, del func() error) (int, error) {
	if f.dropErr != nil {
		return 0, f.dropErr
	}
	f.dropped = append(f.dropped, topic)
	return f.pending, del()
}

// DELETE /topics/{t} with a scheduler that drops: 200 saying how many
// scheduled messages went with the topic, also when the topic does not
// exist yet (they would have created it); 404 when there was neither; the
// scheduler's refusal is its status.
func TestDeleteTopicDropsScheduled(t *testing.T) {
	f := &dropScheduler{fakeScheduler: fakeScheduler{pending: 3}}
	a := newAPI(t, Options{Scheduler: f}, topicqueue.Options{})
	a.publish("t", `{}`)
	for _, topic := range []string{"t", "not-yet"} {
		rec := a.call(http.MethodDelete, "/topics/"+topic, "", "")
		if rec.Code != http.StatusOK || rec.Body.String() != `{"deleted":true,"scheduledDropped":3,"topic":"`+topic+`"}`+"\n" {
			t.Fatalf("%s: HTTP %d %q", topic, rec.Code, rec.Body)
		}
	}
	if _, ok := a.reg.Get("t"); ok {
		t.Error("topic t still there")
	}
	f.pending = 0
	if rec := a.call(http.MethodDelete, "/topics/none", "", ""); rec.Code != http.StatusNotFound {
		t.Errorf("neither topic nor scheduled: HTTP %d %s", rec.Code, rec.Body)
	}
	f.dropErr = contract.NewError(contract.CodeTopicBusy, "being deleted")
	if rec := a.call(http.MethodDelete, "/topics/x", "", ""); rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), contract.CodeTopicBusy) {
		t.Errorf("busy: HTTP %d %s", rec.Code, rec.Body)
	}
	if len(f.dropped) != 3 {
		t.Errorf("dropped %v", f.dropped)
	}
}

// realScheduler gives a a scheduler over a's data root (not started: the
// test moves due messages with MoveDue), whose clock runs shift ahead of
// the real one, and returns it.
func realScheduler(t *testing.T, a *api, shift *atomic.Int64, mod func(*schedule.Options)) (*schedule.Scheduler, *schedule.Idempotent) {
	t.Helper()
	o := schedule.Options{FS: vfs.OS{}, Dir: filepath.Join(a.root, schedule.Dir), Logger: zaptest.NewLogger(t),
		Now: func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }}
	if mod != nil {
		mod(&o)
	}
	s := schedule.New(o, schedule.RegistryTarget(a.reg))
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	idem := schedule.NewIdempotent(s, time.Minute, 0)
	a.s = New(Options{Scheduler: idem}, a.reg, nil, zaptest.NewLogger(t))
	return s, idem
}

// A ttl with a schedule counts from the publish: the stored expiresAt is
// timestamp + ttl, and the message enters its topic with it when due.
func TestPublishScheduledWithTTL(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	var shift atomic.Int64
	s, _ := realScheduler(t, a, &shift, nil)
	rec := a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"1h","ttl":"90m"}`)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"scheduled":true`) {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	shift.Store(int64(time.Hour + time.Second))
	if n, _, err := s.MoveDue(context.Background()); err != nil || n != 1 {
		t.Fatalf("moved %d, %v", n, err)
	}
	if got := a.expiriesOf("t"); len(got) != 1 || got[0] != (90*time.Minute).Milliseconds() {
		t.Fatalf("expiresAt - timestamp of the moved message: %v; want [%d]", got, (90 * time.Minute).Milliseconds())
	}
}

// A batch mixes ordinary, due-now and scheduled members: the scheduled
// ones are answered with scheduled, scheduleId, deliverAt and level
// DURABLE and no offset; the others with their offsets. A producer id
// scheduled twice in the batch is one schedule (the second a duplicate);
// the same id published directly is stored independently.
func TestBatchScheduledMembers(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	var shift atomic.Int64
	s, _ := realScheduler(t, a, &shift, nil)
	body := `[{"topic":"t","content":0},
		{"topic":"t","content":1,"delay":"1h","id":"s-1"},
		{"topic":"t","content":2,"deliverAt":"2001-01-01T00:00:00Z"},
		{"topic":"u","content":3,"deliverAt":` + strconv.FormatInt(time.Now().Add(2*time.Hour).UnixMilli(), 10) + `},
		{"topic":"t","content":4,"delay":"1h","id":"s-1"},
		{"topic":"t","content":5,"id":"s-1"}]`
	rec := a.call(http.MethodPost, "/messages/batch", "application/json", body)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusOK || resp.Acknowledgement != "ACK" || resp.Failed != 0 || len(resp.Results) != 6 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	r := resp.Results
	if got := offsetsOf(r); got[0] != 0 || got[2] != 1 || got[5] != 2 || got[1] != -1 || got[3] != -1 || got[4] != -1 {
		t.Errorf("offsets %v; want 0, -, 1, -, -, 2", got)
	}
	for _, i := range []int{1, 3, 4} {
		at, err := time.Parse(time.RFC3339Nano, r[i].DeliverAt)
		if !r[i].Scheduled || r[i].ScheduleID == "" || r[i].Level != "DURABLE" || err != nil || at.UnixMilli() != r[i].DeliverAtMs || time.Until(at) < 59*time.Minute {
			t.Errorf("member %d: %+v", i, r[i])
		}
	}
	for _, i := range []int{0, 2, 5} {
		if r[i].Scheduled || r[i].ScheduleID != "" || r[i].Level != "" || r[i].Duplicate {
			t.Errorf("ordinary member %d: %+v", i, r[i])
		}
	}
	if r[1].Duplicate || !r[4].Duplicate || r[4].ScheduleID != r[1].ScheduleID || r[4].DeliverAt != r[1].DeliverAt {
		t.Errorf("same id scheduled twice: %+v and %+v; want the second a duplicate of the first", r[1], r[4])
	}
	if s.Pending("t") != 1 || s.Pending("u") != 1 {
		t.Errorf("pending t %d, u %d; want 1 and 1", s.Pending("t"), s.Pending("u"))
	}
	if got := a.contents("t"); strings.Join(got, ",") != "0,2,5" {
		t.Errorf("topic t holds %v now; want 0,2,5", got)
	}
	// A retry of the scheduled member alone is still the first schedule.
	rec = a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"1h","id":"s-1"}`)
	if !strings.Contains(rec.Body.String(), `"scheduleId":"`+r[1].ScheduleID+`"`) || !strings.Contains(rec.Body.String(), `"duplicate":true`) {
		t.Errorf("single retry: %s", rec.Body)
	}
	// Due: the scheduled ones enter their topics; the direct publish of
	// s-1 and the scheduled s-1 are both in t, once each.
	shift.Store(int64(2*time.Hour + time.Second))
	if n, _, err := s.MoveDue(context.Background()); err != nil || n != 2 {
		t.Fatalf("moved %d, %v", n, err)
	}
	if got := a.contents("t"); strings.Join(got, ",") != "0,2,5,1" {
		t.Errorf("topic t holds %v; want 0,2,5,1", got)
	}
	if got := a.contents("u"); strings.Join(got, ",") != "3" {
		t.Errorf("topic u holds %v; want 3", got)
	}
}

// A batch refused in validation stores nothing anywhere, also when its
// scheduled members were valid; the rules of the real scheduler
// (max-delay) are checked before anything is stored.
func TestBatchScheduledAllOrNothing(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	var shift atomic.Int64
	s, _ := realScheduler(t, a, &shift, func(o *schedule.Options) { o.MaxDelay = 2 * time.Hour })
	for _, c := range []struct {
		body   string
		status int
		says   string
	}{
		{`[{"topic":"t","content":1,"delay":"1h"},{"topic":"t","content":2,"delay":"3h"}]`, 400, "message 1: delay 3h0m0s is over the maximum delay of 2h0m0s (mmmq.broker.schedule.max-delay)"},
		{`[{"topic":"t","content":1,"delay":"1h"},{"topic":"t","content":2,"ttl":"1s","delay":"1h"}]`, 400, "message 1: the message would expire"},
		{`[{"topic":"t","content":1,"delay":"1h"},{"topic":"..","content":2}]`, 400, "message 1:"},
	} {
		rec := a.call(http.MethodPost, "/messages/batch", "application/json", c.body)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: HTTP %d %s; want %d saying %q", c.body, rec.Code, rec.Body, c.status, c.says)
		}
	}
	if s.PendingTotal() != 0 {
		t.Errorf("%d scheduled by refused batches", s.PendingTotal())
	}
	a.noTopics() // no topic, and no .scheduled directory either
}

// A scheduled member the scheduler refuses when storing (507 at the
// per-topic cap) fails alone: the batch is a NACK with its status, the
// members before it are scheduled and the ordinary ones stored.
func TestBatchScheduledStoreFailure(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	var shift atomic.Int64
	s, _ := realScheduler(t, a, &shift, func(o *schedule.Options) { o.MaxPendingPerTopic = 1 })
	rec := a.call(http.MethodPost, "/messages/batch", "application/json",
		`[{"topic":"t","content":0,"delay":"1h"},{"topic":"t","content":1,"delay":"1h"},{"topic":"t","content":2}]`)
	var resp BatchResponse
	decodeJSON(t, rec, &resp)
	if rec.Code != http.StatusInsufficientStorage || resp.Code != contract.CodeTooManyScheduled || resp.Failed != 1 {
		t.Fatalf("HTTP %d %s", rec.Code, rec.Body)
	}
	if !resp.Results[0].Scheduled || resp.Results[1].Status != 507 || resp.Results[1].Scheduled || resp.Results[2].Offset == nil {
		t.Errorf("results %+v", resp.Results)
	}
	if s.Pending("t") != 1 || strings.Join(a.contents("t"), ",") != "2" {
		t.Errorf("pending %d, topic %v", s.Pending("t"), a.contents("t"))
	}
	if strings.Contains(resp.Error, "nothing was stored") || !strings.Contains(resp.Error, "this message was not stored") || !strings.Contains(resp.Error, "the others were stored") ||
		!strings.Contains(resp.Error, "scheduleId") {
		t.Errorf("the error contradicts itself or the results (a scheduled member has a scheduleId, no offset): %s", resp.Error)
	}
}

// A retried single scheduled publish with the same id is answered with the
// first schedule's id and due time and "duplicate": true; nothing more is
// stored. Without an id every publish is its own schedule.
func TestPublishScheduledIdempotent(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	var shift atomic.Int64
	s, _ := realScheduler(t, a, &shift, nil)
	var first, again map[string]any
	decodeJSON(t, a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"1h","id":"evt-1"}`), &first)
	decodeJSON(t, a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"2h","id":"evt-1"}`), &again)
	if first["duplicate"] != nil || again["duplicate"] != true || again["scheduleId"] != first["scheduleId"] || again["deliverAtMs"] != first["deliverAtMs"] {
		t.Fatalf("first %v, retry %v", first, again)
	}
	for range 2 {
		var plain map[string]any
		decodeJSON(t, a.call(http.MethodPost, "/messages", "application/json", `{"topic":"t","content":1,"delay":"1h"}`), &plain)
		if plain["duplicate"] != nil || plain["scheduled"] != true {
			t.Fatalf("a publish without an id: %v", plain)
		}
	}
	if s.Pending("t") != 3 {
		t.Errorf("pending %d; want 3", s.Pending("t"))
	}
}
