package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// memPublisher is a Publisher over memTopics created on first use and
// handed to src, as the registry does.
type memPublisher struct {
	t    *testing.T
	root string
	src  *memSource

	mu     sync.Mutex
	topics map[string]*memTopic
	fail   int                 // the next fail publishes fail
	before func(topic string)  // called before each publish
	seen   map[string][][]byte // every stored message published, by topic
}

func newMemPublisher(t *testing.T, src *memSource) *memPublisher {
	return &memPublisher{t: t, root: t.TempDir(), src: src, topics: map[string]*memTopic{}, seen: map[string][][]byte{}}
}

func (p *memPublisher) PublishDurable(_ context.Context, topic string, stored [][]byte) (int64, error) {
	p.mu.Lock()
	if p.before != nil {
		p.before(topic)
	}
	if p.fail > 0 {
		p.fail--
		p.mu.Unlock()
		return 0, errors.New("disk on fire")
	}
	tp, ok := p.topics[topic]
	if !ok {
		tp = newMemTopic(p.t, p.root, topic)
		p.topics[topic] = tp
	}
	p.seen[topic] = append(p.seen[topic], stored...)
	p.mu.Unlock()
	first := tp.HighWatermark()
	tp.appendStored(stored...)
	if !ok {
		p.src.add(tp)
	}
	return first, nil
}

func (p *memPublisher) published(topic string) [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]byte(nil), p.seen[topic]...)
}

// appendStored appends stored messages as they are.
func (tp *memTopic) appendStored(stored ...[]byte) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.payloads = append(tp.payloads, stored...)
	for off, ch := range tp.waiting {
		if off < int64(len(tp.payloads)) {
			close(ch)
			delete(tp.waiting, off)
		}
	}
}

type storedMsg struct {
	Topic   struct{ Name string } `json:"topic"`
	Content json.RawMessage       `json:"content"`
	ID      string                `json:"id"`
	Headers map[string]string     `json:"headers"`
}

func decodeStored(t *testing.T, b []byte) storedMsg {
	t.Helper()
	var m storedMsg
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("stored message %s: %v", b, err)
	}
	return m
}

func TestDeadLetterBeforeCheckpointThenRedrive(t *testing.T) {
	// Offset 1 is a poison message until it is redriven.
	var cured atomic.Bool
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Topic == "order.new" && strings.Contains(r.Body, `"n":1,`) && !cured.Load() {
			http.Error(w, "no", http.StatusBadRequest) // ack-mode status: a NACK
			return
		}
		w.WriteHeader(http.StatusNoContent) // any 2xx is an ACK
	})
	tp := newMemTopic(t, t.TempDir(), "order.new")
	tp.publish(3)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.topics[tp.name] = tp
	var cpAtDeadLetter []int64
	pub.before = func(topic string) {
		if topic == "dead-letter.d" {
			cpAtDeadLetter = append(cpAtDeadLetter, checkpointFile(t, tp.dir, "d"))
		}
	}
	all := New("all", c.host(t), MustPattern("**")).WithAckMode(AckStatus)
	d := New("d", c.host(t), MustPattern("order.*")).WithAckMode(AckStatus)
	m := startWithPublisher(t, src, pub, testOptions(), d, all)
	waitCommitted(t, m, "d", "order.new", 3)

	// 4 attempts, then the dead letter, appended while the checkpoint was
	// still before it.
	var attempts []int
	for _, r := range c.requestsFor("order.new", "d") {
		if r.Offset == 1 {
			attempts = append(attempts, r.Attempt)
		}
	}
	if want := []int{1, 2, 3, 4}; !reflect.DeepEqual(attempts, want) {
		t.Errorf("attempts of offset 1 = %v, want %v", attempts, want)
	}
	if !reflect.DeepEqual(cpAtDeadLetter, []int64{1}) {
		t.Errorf("checkpoint when the dead letter was appended = %v, want [1]", cpAtDeadLetter)
	}
	dls := pub.published("dead-letter.d")
	if len(dls) != 1 {
		t.Fatalf("dead letters = %d, want 1", len(dls))
	}
	dl := decodeStored(t, dls[0])
	orig := decodeStored(t, storedMessage("order.new", 1))
	wantH := map[string]string{"id": "hdr", HeaderDLTopic: "order.new", HeaderDLOffset: "1", HeaderDLAttempts: "4",
		HeaderDLReason: ReasonNACKs, HeaderDLLastStatus: "400", HeaderDLOriginalID: "m-1", HeaderDLDispatcher: "d"}
	if !reflect.DeepEqual(dl.Headers, wantH) {
		t.Errorf("dead letter headers = %v, want %v", dl.Headers, wantH)
	}
	if dl.ID == "" || dl.ID == orig.ID || dl.Topic.Name != "dead-letter.d" || string(dl.Content) != string(orig.Content) {
		t.Errorf("dead letter = %+v (content %s), want a fresh id, topic dead-letter.d, content %s", dl, dl.Content, orig.Content)
	}
	st := status(m, "d", "order.new")
	if st.Exhausted != 1 || st.DeadLettered != 1 || st.Delivered != 2 {
		t.Errorf("status = %+v", st)
	}
	// "**" never matches a dead-letter topic: no worker, no push.
	if s := status(m, "all", "dead-letter.d"); s.Dispatcher != "" || len(c.requestsFor("dead-letter.d", "all")) > 0 {
		t.Errorf("dispatcher ** got the dead-letter topic: %+v", s)
	}

	// Redrive: back on order.new with a fresh id, delivered again.
	cured.Store(true)
	res, err := m.Redrive(context.Background(), "d", -1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Redriven) != 1 || res.Redriven[0] != (Redriven{DeadLetterOffset: 0, Topic: "order.new", Offset: 3}) || res.Next != 1 || len(res.Skipped) != 0 {
		t.Fatalf("redrive = %+v", res)
	}
	waitCommitted(t, m, "d", "order.new", 4)
	again := decodeStored(t, pub.published("order.new")[0])
	if again.ID == dl.ID || again.ID == orig.ID || again.Headers[HeaderRedrivenFrom] != "dead-letter.d/0" || again.Headers[HeaderDLTopic] != "" || again.Headers["id"] != "hdr" {
		t.Errorf("redriven message = %+v", again)
	}
	if got := c.requestsFor("order.new", "d"); got[len(got)-1].Offset != 3 {
		t.Errorf("last push = %+v, want offset 3", got[len(got)-1])
	}
	if _, err := m.Redrive(context.Background(), "d", 0, 5); err == nil {
		t.Error("redrive past the high watermark succeeded")
	}

	// A shared dead-letter topic: another dispatcher's dead letters, one
	// stored without its content and one naming the dead-letter topic
	// itself are skipped, with why.
	dlt := pub.topics["dead-letter.d"]
	other := parseStored(dls[0])
	for _, h := range []map[string]string{
		{HeaderDLDispatcher: "someone-else"},
		{HeaderDLContentOmitted: "record too large"},
		{HeaderDLTopic: "dead-letter.d"},
	} {
		hs := maps.Clone(other.Headers)
		maps.Copy(hs, h)
		b, err := contract.EncodeMessage("dead-letter.d", other.Content, "", hs, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		dlt.appendStored(b)
	}
	res, err = m.Redrive(context.Background(), "d", 1, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Redriven) != 0 || len(res.Skipped) != 3 || res.Next != 4 ||
		!strings.Contains(res.Skipped[0].Reason, "someone-else") || !strings.Contains(res.Skipped[1].Reason, "without its content") ||
		!strings.Contains(res.Skipped[2].Reason, "dead-letter topic itself") {
		t.Errorf("redrive of foreign, content-less and self-naming dead letters = %+v", res)
	}
}

func TestDeadLetterAppendRetriedNeverSkipped(t *testing.T) {
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Offset == 0 {
			answer(w, NACK)
			return
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(2)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	pub.fail = 3
	m := startWithPublisher(t, src, pub, testOptions(), New("d", c.host(t), MustPattern("t")))
	waitCommitted(t, m, "d", "t", 2)
	if n := len(pub.published("dead-letter.d")); n != 1 {
		t.Errorf("dead letters = %d, want 1 (after 3 failed appends)", n)
	}
	if got := offsets(c.requests()); !reflect.DeepEqual(got, []int64{0, 0, 0, 0, 1}) {
		t.Errorf("pushes = %v: offset 1 must wait for the dead letter of 0", got)
	}
}

func TestDeadLettersOffLogsAndSkips(t *testing.T) {
	c := newConsumer(t, func(_ received, w http.ResponseWriter, _ *http.Request) { answer(w, NACK) })
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(2)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	m := startWithPublisher(t, src, pub, testOptions(), New("d", c.host(t), MustPattern("t")).WithDeadLetter(""))
	waitCommitted(t, m, "d", "t", 2)
	if st := status(m, "d", "t"); st.Exhausted != 2 || st.DeadLettered != 0 {
		t.Errorf("status = %+v", st)
	}
	if len(pub.seen) != 0 {
		t.Errorf("published %v with dead letters off", pub.seen)
	}
	if _, err := m.Redrive(context.Background(), "d", -1, -1); !errors.Is(err, ErrNoDeadLetters) {
		t.Errorf("redrive with dead letters off: %v, want ErrNoDeadLetters", err)
	}
}

func TestAbnormalLimitDeadLetters(t *testing.T) {
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		if r.Offset == 0 {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		answer(w, ACK)
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(2)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	d := New("d", c.host(t), MustPattern("t")).WithAbnormalLimit(AbnormalLimit{MaxAttempts: 3}).WithDeadLetter("parked")
	core, logs := observer.New(zapcore.WarnLevel)
	m := startWithPublisherLog(t, src, pub, testOptions(), zap.New(core), d)
	waitCommitted(t, m, "d", "t", 2)
	dls := pub.published("parked")
	if len(dls) != 1 {
		t.Fatalf("dead letters in parked = %d, want 1", len(dls))
	}
	h := decodeStored(t, dls[0]).Headers
	if h[HeaderDLReason] != ReasonAbnormal || h[HeaderDLAttempts] != "3" || h[HeaderDLLastStatus] != "502" || !strings.Contains(h[HeaderDLLastError], "502") {
		t.Errorf("headers = %v", h)
	}
	// Attempts 1 and 2 are retried; attempt 3 is past the limit: its log
	// line must not say it is retried.
	var lines []string
	for _, e := range logs.FilterField(zap.Int64("offset", 0)).All() {
		if strings.HasPrefix(e.Message, "abnormal response") {
			lines = append(lines, fmt.Sprintf("%s (attempt %v)", e.Message, e.ContextMap()["attempt"]))
		}
	}
	want := []string{"abnormal response; retrying after backoff (attempt 1)", "abnormal response; retrying after backoff (attempt 2)",
		"abnormal response; past the abnormal limit, so not retried; the next message waits out the backoff (attempt 3)"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("log lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestDeadLetterTopicsMatchOnlyLiteralPatterns(t *testing.T) {
	for _, tc := range []struct {
		pattern, topic string
		want           bool
	}{
		{"**", "dead-letter.d", false},
		{"*.d", "dead-letter.d", false},
		{"dead-letter.**", "dead-letter.d", true},
		{"dead-letter.d", "dead-letter.d", true},
		{"**", "dead-letterx.d", true},
		{"**", "order.dead-letter.d", true},
	} {
		if got := New("x", Host{}, MustPattern(tc.pattern)).Matches(tc.topic); got != tc.want {
			t.Errorf("%q matches %q = %v, want %v", tc.pattern, tc.topic, got, tc.want)
		}
	}
}

func TestValidateDeliverySettings(t *testing.T) {
	h := Host{Protocol: HTTP, Address: "localhost", Port: 8081}
	base := func(name string) *Dispatcher { return New(name, h, MustPattern("a.*")) }
	for _, tc := range []struct {
		d    *Dispatcher
		want string // "" = valid
	}{
		{base("ok"), ""},
		{base("a..b"), "default dead-letter topic"},
		{base("a..b").WithDeadLetter(""), ""},
		{base("a..b").WithDeadLetter("dl.a"), ""},
		{base("x").WithDeadLetter("bad/topic"), "dead-letter"},
		{base("x").WithAckMode("maybe"), "ack-mode"},
		{base("x").WithHeaders(map[string]string{"Authorization": "Bearer t"}), ""},
		{base("x").WithHeaders(map[string]string{"mmmq-offset": "1"}), "set by the broker"},
		{base("x").WithHeaders(map[string]string{"Content-Type": "text/plain"}), "set by the broker"},
		{base("x").WithHeaders(map[string]string{"bad name": "v"}), "not a valid header name"},
		{base("x").WithHeaders(map[string]string{"X-A": "a\r\nb"}), "control characters"},
		{base("x").WithMaxInFlight(MaxInFlightLimit + 1), "max-in-flight"},
		{base("x").WithBatch(Batch{MaxMessages: -1}), "batch"},
		{base("x").WithBatch(Batch{MaxMessages: 2}).WithCloudEvents(true), "cloudevents"},
		{base("x").WithAbnormalLimit(AbnormalLimit{MaxAttempts: -1}), "max-abnormal"},
		{base("x").WithAbnormalLimit(AbnormalLimit{MaxAttempts: 3}).WithDeadLetter(""), "need a dead-letter topic"},
		{base("x").WithHeaders(map[string]string{"X-A": "1", "x-a": "2"}), "are the same header"},
		{base("x").WithHeaders(map[string]string{"Content-Encoding": "gzip"}), "set by the broker"},
		{base("x").WithBatch(Batch{MaxWait: time.Second}), "need max-messages"},
		{base("x").WithBatch(Batch{MaxMessages: 2, MaxWait: -1}), "batch.max-wait"},
	} {
		err := tc.d.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.d, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.d, err, tc.want)
		}
	}
}

func TestAckModeStatusAnswers(t *testing.T) {
	for _, tc := range []struct {
		code int
		want Outcome // "" = abnormal
	}{
		{200, ACK}, {202, ACK}, {204, ACK}, {299, ACK},
		{400, NACK}, {401, NACK}, {404, NACK}, {410, NACK}, {422, NACK},
		{408, ""}, {409, ""}, {425, ""}, {429, ""},
		{301, ""}, {302, ""}, {500, ""}, {503, ""}, {100, ""},
	} {
		got, ok := statusOutcome(tc.code)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("status %d = %q, %v; want %q", tc.code, got, ok, tc.want)
		}
	}
}

func TestRetryAfterIsHonouredAndRedirectsAreAbnormal(t *testing.T) {
	var mu sync.Mutex
	var times []time.Time
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		n := len(times)
		mu.Unlock()
		switch n {
		case 1:
			w.Header().Set("Location", "http://elsewhere/")
			w.WriteHeader(http.StatusFound)
		case 2:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	opts := testOptions()
	opts.BackoffMax = 5 * time.Second
	_, m := deliverOne(t, "t", 1, opts, New("d", c.host(t), MustPattern("t")).WithAckMode(AckStatus))
	waitCommitted(t, m, "d", "t", 1)
	if len(times) != 3 {
		t.Fatalf("pushes = %d, want 3 (302, 429, 204)", len(times))
	}
	if gap := times[2].Sub(times[1]); gap < time.Second {
		t.Errorf("retry %s after a 429 with Retry-After: 1, want >= 1s", gap)
	}
	if st := status(m, "d", "t"); st.Abnormal != 2 || st.Delivered != 1 || st.Nacked != 0 {
		t.Errorf("status = %+v", st)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {" 7 ", 7 * time.Second}, {"0", 0}, {"-5", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"999999999999", 24 * time.Hour},
		// Beyond int64 (2^63 and 10^30 seconds) is still a valid, long
		// wait, not an absent header (round-3 trial, item 9).
		{"9223372036854775808", 24 * time.Hour}, {"1000000000000000000000000000000", 24 * time.Hour},
		{"-9223372036854775809", 0}, {"+5", 0},
	} {
		if got := parseRetryAfter(tc.in, now); got != tc.want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	w := &worker{m: &Manager{opts: Options{BackoffMax: 10 * time.Second}}}
	if got := w.retryAfter(&AbnormalError{RetryAfter: time.Hour}); got != 10*time.Second {
		t.Errorf("Retry-After of an hour waits %s, want backoff-max 10s", got)
	}
}

func TestMaxInFlightCommitsOnlyTheFinishedPrefix(t *testing.T) {
	release := make(chan struct{})
	var cur, peak, started atomic.Int32
	c := newConsumer(t, func(r received, w http.ResponseWriter, _ *http.Request) {
		started.Add(1)
		n := cur.Add(1)
		defer cur.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if r.Offset == 0 {
			<-release
		}
		// Hold the first pushes until 8 are outstanding: max-in-flight
		// must allow them all at once (and no more).
		for deadline := time.Now().Add(10 * time.Second); started.Load() < 8 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		answer(w, ACK)
	})
	opts := testOptions()
	opts.BatchSize = 64
	tp, m := deliverOne(t, "t", 20, opts, New("d", c.host(t), MustPattern("t")).WithMaxInFlight(8))
	eventually(t, "offsets 1..19 ACKed", func() bool { return status(m, "d", "t").Delivered == 19 })
	if got := checkpointFile(t, tp.dir, "d"); got != 0 {
		t.Errorf("checkpoint = %d while offset 0 is unanswered, want 0", got)
	}
	if st := status(m, "d", "t"); st.Committed != 0 || st.Next != 0 {
		t.Errorf("status = %+v, want committed and next 0", st)
	}
	close(release)
	waitCommitted(t, m, "d", "t", 20)
	wantCheckpoint(t, tp.dir, "d", 20)
	t.Logf("peak concurrency %d", peak.Load())
	if p := peak.Load(); p != 8 {
		t.Errorf("peak concurrency = %d, want 8 (max-in-flight)", p)
	}
}

func TestBatchPushShapeAndPerMessageResults(t *testing.T) {
	type batchReq struct {
		size, first, last string
		offsets           []int64
	}
	var mu sync.Mutex
	var reqs []batchReq
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		var msgs []struct {
			Offset *int64 `json:"offset"`
			Topic  struct{ Name string }
		}
		if err := json.Unmarshal([]byte(r.Body), &msgs); err != nil {
			t.Errorf("batch body %s: %v", r.Body, err)
			http.Error(w, "bad", 500)
			return
		}
		br := batchReq{size: req.Header.Get(HeaderBatchSize), first: req.Header.Get(HeaderFirstOffset), last: req.Header.Get(HeaderLastOffset)}
		var results []map[string]any
		for _, m := range msgs {
			if m.Offset == nil || m.Topic.Name != "t" {
				t.Errorf("batch element without offset or topic: %s", r.Body)
				continue
			}
			br.offsets = append(br.offsets, *m.Offset)
			ack := "ACK"
			if *m.Offset == 3 {
				ack = "NACK" // poison: 4 attempts, then the dead letter
			}
			results = append(results, map[string]any{"offset": *m.Offset, "acknowledgement": ack})
		}
		mu.Lock()
		reqs = append(reqs, br)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"results": results})
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(10)
	src := newMemSource(tp)
	pub := newMemPublisher(t, src)
	m := startWithPublisher(t, src, pub, testOptions(), New("d", c.host(t), MustPattern("t")).WithBatch(Batch{MaxMessages: 4}))
	waitCommitted(t, m, "d", "t", 10)

	mu.Lock()
	defer mu.Unlock()
	if len(reqs) == 0 || !reflect.DeepEqual(reqs[0], batchReq{"4", "0", "3", []int64{0, 1, 2, 3}}) {
		t.Errorf("first batch = %+v", reqs)
	}
	sends := map[int64]int{}
	for _, r := range reqs {
		if n, _ := strconv.Atoi(r.size); n != len(r.offsets) || n > 4 {
			t.Errorf("batch %+v: size header does not match", r)
		}
		for _, o := range r.offsets {
			sends[o]++
		}
	}
	for o := int64(0); o < 10; o++ {
		want := 1
		if o == 3 {
			want = 4
		}
		if sends[o] != want {
			t.Errorf("offset %d sent %d times, want %d (sends %v)", o, sends[o], want, sends)
		}
	}
	if n := len(pub.published("dead-letter.d")); n != 1 {
		t.Errorf("dead letters = %d, want 1", n)
	}
	if st := status(m, "d", "t"); st.Commits >= 10 {
		t.Errorf("commits = %d for 10 messages in batches of 4, want fewer than one per message", st.Commits)
	}
}

func TestBatchAnswers(t *testing.T) {
	ms := []Delivery{{Offset: 4}, {Offset: 5}, {Offset: 7}}
	for _, tc := range []struct {
		body, want string // want: outcomes joined, or "error: <substring>"
	}{
		{`{"acknowledgement":"ACK"}`, "ACK ACK ACK"},
		{`{"acknowledgement":"NACK"}`, "NACK NACK NACK"},
		{`{"results":[{"offset":7,"acknowledgement":"NACK"},{"offset":4,"acknowledgement":"ACK"},{"offset":5,"acknowledgement":"ACK"}]}`, "ACK ACK NACK"},
		{`{"results":[{"offset":4,"acknowledgement":"ACK"},{"offset":5,"acknowledgement":"ACK"}]}`, "error: no result for offset 7"},
		{`{"results":[{"offset":4,"acknowledgement":"ACK"},{"offset":4,"acknowledgement":"ACK"},{"offset":5,"acknowledgement":"ACK"},{"offset":7,"acknowledgement":"ACK"}]}`, "error: given twice"},
		{`{"results":[{"offset":6,"acknowledgement":"ACK"}]}`, "error: not in this batch"},
		{`{"results":[{"acknowledgement":"ACK"}]}`, `error: no "offset"`},
		{`{"results":[{"offset":4,"acknowledgement":"ok"}]}`, "error: neither ACK nor NACK"},
		{`{"acknowledgement":"ACK","results":[]}`, "error: body is not"},
		{`[]`, "error: body is not"},
	} {
		outs, _, err := parseBatchAnswer([]byte(tc.body), ms)
		got := fmt.Sprint(outs)
		got = strings.Trim(got, "[]")
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(tc.want, "error: ") && got != tc.want || strings.HasPrefix(tc.want, "error: ") && !strings.Contains(got, strings.TrimPrefix(tc.want, "error: ")) {
			t.Errorf("%s → %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestSignedHeadersAndCloudEvents(t *testing.T) {
	secret, err := webhooks.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	sec, err := webhooks.ParseSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	verifier := webhooks.NewVerifier(time.Minute, sec)
	type seen struct {
		verify                    error
		id, ua, auth, ceID, ceSrc string
		ceType, ceTime, body      string
	}
	got := make(chan seen, 4)
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		got <- seen{verify: verifier.Verify(req.Header, []byte(r.Body)), id: req.Header.Get(webhooks.HeaderID),
			ua: req.Header.Get("User-Agent"), auth: req.Header.Get("Authorization"),
			ceID: req.Header.Get(HeaderCEID), ceSrc: req.Header.Get(HeaderCESource), ceType: req.Header.Get(HeaderCEType),
			ceTime: req.Header.Get(HeaderCETime), body: r.Body}
		answer(w, ACK)
	})
	opts := testOptions()
	opts.NodeName = "node-1"
	d := New("d", c.host(t), MustPattern("a.b")).WithSigningSecrets(sec).
		WithHeaders(map[string]string{"Authorization": "Bearer t0k"}).WithCloudEvents(true)
	_, m := deliverOne(t, "a.b", 1, opts, d)
	waitCommitted(t, m, "d", "a.b", 1)
	s := <-got
	if s.verify != nil {
		t.Errorf("signature does not verify: %v", s.verify)
	}
	if strings.ContainsAny(s.id, ".") || !strings.HasPrefix(s.id, "msg_") || !strings.HasSuffix(s.id, "_0") {
		t.Errorf("webhook-id %q, want msg_<key>_0 without dots", s.id)
	}
	want := seen{id: s.id, ua: "mmmq/dev", auth: "Bearer t0k", ceID: "m-0", ceSrc: "mmmq://node-1/a.b", ceType: "a.b",
		ceTime: "2023-11-14T22:13:20.000Z", body: `{"n":0,"id":"inner"}`}
	s.verify = nil
	if s != want {
		t.Errorf("push = %+v\nwant   %+v", s, want)
	}
}

// A dispatcher with a signing secret and two signing keys (a rotation)
// sends one v1 and two v1a entries; a consumer holding either public key
// accepts, and one holding a key the dispatcher dropped refuses.
func TestSignedWithKeys(t *testing.T) {
	key := func() webhooks.SigningKey {
		s, err := webhooks.NewSigningKey()
		if err != nil {
			t.Fatal(err)
		}
		k, err := webhooks.ParseSigningKey(s)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	secText, _ := webhooks.NewSecret()
	sec, _ := webhooks.ParseSecret(secText)
	k1, k2, dropped := key(), key(), key()
	type seen struct {
		sig  string
		errs [4]error
	}
	got := make(chan seen, 4)
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		body := []byte(r.Body)
		got <- seen{sig: req.Header.Get(webhooks.HeaderSignature), errs: [4]error{
			webhooks.NewVerifier(time.Minute, sec).Verify(req.Header, body),
			webhooks.NewPublicKeyVerifier(time.Minute, k1.Public()).Verify(req.Header, body),
			webhooks.NewPublicKeyVerifier(time.Minute, k2.Public()).Verify(req.Header, body),
			webhooks.NewPublicKeyVerifier(time.Minute, dropped.Public()).Verify(req.Header, body),
		}}
		answer(w, ACK)
	})
	d := New("d", c.host(t), MustPattern("a.b")).WithSigningSecrets(sec).WithSigningKeys(k1, k2)
	_, m := deliverOne(t, "a.b", 1, testOptions(), d)
	waitCommitted(t, m, "d", "a.b", 1)
	s := <-got
	entries := strings.Fields(s.sig)
	if len(entries) != 3 || !strings.HasPrefix(entries[0], "v1,") || !strings.HasPrefix(entries[1], "v1a,") || !strings.HasPrefix(entries[2], "v1a,") {
		t.Fatalf("webhook-signature %q, want v1, v1a, v1a entries", s.sig)
	}
	for i, name := range []string{"secret", "key 1", "key 2"} {
		if s.errs[i] != nil {
			t.Errorf("%s: %v", name, s.errs[i])
		}
	}
	if !errors.Is(s.errs[3], webhooks.ErrNoMatchingSignature) {
		t.Errorf("a key the dispatcher does not have: %v, want ErrNoMatchingSignature", s.errs[3])
	}
}

func TestPlainSenderGetsOneMessagePerPush(t *testing.T) {
	var mu sync.Mutex
	var seen []int64
	plain := senderFunc(func(_ context.Context, d Delivery) (Outcome, error) {
		mu.Lock()
		seen = append(seen, d.Offset)
		mu.Unlock()
		return ACK, nil
	})
	tp := newMemTopic(t, t.TempDir(), "t")
	tp.publish(5)
	set, _ := SetOf(New("d", Host{Protocol: HTTP, Address: "x", Port: 1}, MustPattern("t")).WithBatch(Batch{MaxMessages: 3}))
	m := NewManager(set, newMemSource(tp), plain, testOptions(), nil)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer stopManager(t, m)
	waitCommitted(t, m, "d", "t", 5)
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(seen, []int64{0, 1, 2, 3, 4}) {
		t.Errorf("sends = %v", seen)
	}
}

type senderFunc func(context.Context, Delivery) (Outcome, error)

func (f senderFunc) Send(ctx context.Context, d Delivery) (Outcome, error) { return f(ctx, d) }
