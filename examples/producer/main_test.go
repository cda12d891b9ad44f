package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBroker is a minimal mmmq publish endpoint (POST ?ack=<level>, answering
// {"acknowledgement":"ACK","topic":…,"offset":…,"level":…}). It records the
// ids per topic in arrival order, assigns offsets, and notes when two
// requests of one topic were in flight at the same time.
type fakeBroker struct {
	// fail, when set, decides the answer for a request instead of ACK:
	// status and body; status 0 means ACK.
	fail func(id string, n int) (int, string)

	mu          sync.Mutex
	got         map[string][]string // topic -> ids in arrival order
	requests    map[string]int      // id -> requests seen
	inFlight    map[string]int      // topic -> requests in progress
	overlap     bool                // two requests of one topic in flight
	cur, maxCur int                 // requests in progress, overall
	levels      map[string]int      // ack query values seen
}

func newFakeBroker() *fakeBroker {
	return &fakeBroker{got: map[string][]string{}, requests: map[string]int{},
		inFlight: map[string]int{}, levels: map[string]int{}}
}

func (b *fakeBroker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/messages" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var req struct {
		Topic   string          `json:"topic"`
		Content json.RawMessage `json:"content"`
		ID      string          `json:"id"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"acknowledgement":"NACK","error":%q}`, err.Error())
		return
	}
	level := r.URL.Query().Get("ack")

	b.mu.Lock()
	b.levels[level]++
	b.requests[req.ID]++
	n := b.requests[req.ID]
	b.inFlight[req.Topic]++
	if b.inFlight[req.Topic] > 1 {
		b.overlap = true
	}
	b.cur++
	b.maxCur = max(b.maxCur, b.cur)
	b.mu.Unlock()

	// Let other producers overtake this one.
	time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)

	b.mu.Lock()
	defer b.mu.Unlock()
	b.inFlight[req.Topic]--
	b.cur--
	if b.fail != nil {
		if status, body := b.fail(req.ID, n); status != 0 {
			w.WriteHeader(status)
			io.WriteString(w, body)
			return
		}
	}
	offset := len(b.got[req.Topic])
	b.got[req.Topic] = append(b.got[req.Topic], req.ID)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"acknowledgement":"ACK","topic":%q,"offset":%d,"level":%q}`, req.Topic, offset, strings.ToUpper(level))
}

// input builds n lines over the given number of topics, in a random but
// fixed interleaving.
func input(n, topics int) ([]Message, map[string][]string) {
	rng := rand.New(rand.NewPCG(1, 2))
	var buf bytes.Buffer
	want := map[string][]string{}
	for i := 1; i <= n; i++ {
		topic := fmt.Sprintf("t%02d.events", rng.IntN(topics))
		id := fmt.Sprintf("evt-%06d", i)
		fmt.Fprintf(&buf, `{"topic":%q,"content":{"n":%d},"id":%q}`+"\n", topic, i, id)
		want[topic] = append(want[topic], id)
	}
	msgs, err := ReadMessages(&buf)
	if err != nil {
		panic(err)
	}
	return msgs, want
}

func testConfig(url string) Config {
	return Config{URL: url, Path: "/messages", Ack: "durable", Concurrency: 8,
		Timeout: 5 * time.Second, Retries: 3, Backoff: time.Millisecond}
}

func TestPerTopicOrder(t *testing.T) {
	b := newFakeBroker()
	srv := httptest.NewServer(b)
	defer srv.Close()

	msgs, want := input(2000, 20)
	var acks, log bytes.Buffer
	cfg := testConfig(srv.URL)
	cfg.Acks, cfg.Log = &acks, &log
	sum, err := Run(context.Background(), cfg, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 2000 || sum.Acked != 2000 || sum.Failed != 0 || sum.Retries != 0 || sum.Unsent != 0 {
		t.Errorf("summary %+v", sum)
	}
	for topic, ids := range want {
		if !slices.Equal(b.got[topic], ids) {
			t.Errorf("topic %s: arrival order differs from file order", topic)
		}
	}
	if b.overlap {
		t.Error("two requests of one topic were in flight at the same time")
	}
	if b.maxCur < 2 {
		t.Errorf("at most %d requests in flight, want parallel producers", b.maxCur)
	}
	if b.levels["durable"] != 2000 {
		t.Errorf("ack levels %v", b.levels)
	}

	// The acks file: one line per message, offsets per topic 0, 1, 2, ...
	next := map[string]int64{}
	sc := bufio.NewScanner(&acks)
	lines := 0
	for sc.Scan() {
		lines++
		var a AckRecord
		if err := json.Unmarshal(sc.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		if a.Offset == nil || *a.Offset != next[a.Topic] || a.Level != "DURABLE" || a.ID == "" {
			t.Fatalf("ack %s: want offset %d", sc.Text(), next[a.Topic])
		}
		next[a.Topic]++
	}
	if lines != 2000 {
		t.Errorf("%d ack lines, want 2000", lines)
	}
	if log.Len() != 0 {
		t.Errorf("unexpected log:\n%s", log.String())
	}
}

func TestRetriesAndFailures(t *testing.T) {
	b := newFakeBroker()
	b.fail = func(id string, n int) (int, string) {
		var i int
		fmt.Sscanf(id, "evt-%d", &i)
		switch {
		case i%100 == 50: // 400 is final, never retried
			return http.StatusBadRequest, `{"acknowledgement":"NACK","error":"invalid topic"}`
		case i%10 == 0 && n == 1: // first try of every other 10th: 503, then fine
			return http.StatusServiceUnavailable, `{"acknowledgement":"NACK","error":"queue full"}`
		case i%100 == 7: // always 503: fails after the retries
			return http.StatusServiceUnavailable, `{"acknowledgement":"NACK","error":"shutting down"}`
		case i == 333: // 200 but not an ACK
			return http.StatusOK, `{"acknowledgement":"NACK","error":"no"}`
		}
		return 0, ""
	}
	srv := httptest.NewServer(b)
	defer srv.Close()

	msgs, want := input(500, 7)
	var log bytes.Buffer
	cfg := testConfig(srv.URL)
	cfg.Log = &log
	sum, err := Run(context.Background(), cfg, msgs)
	if err != nil {
		t.Fatal(err)
	}
	// Failed: 5 ids ending in 07 (always 503), 5 ending in 50 (400), evt-000333.
	const failed = 5 + 5 + 1
	if sum.Sent != 500 || sum.Acked != 500-failed || sum.Failed != failed {
		t.Errorf("summary %+v, want sent=500 acked=%d failed=%d", sum, 500-failed, failed)
	}
	// Retried: 50 ids ending in 0 once (but those ending in 50 are final),
	// the 5 ids ending in 07 three times.
	if want := int64(50 - 5 + 5*3); sum.Retries != want {
		t.Errorf("retries %d, want %d", sum.Retries, want)
	}
	if got := b.requests["evt-000050"]; got != 1 {
		t.Errorf("400 was sent %d times, want 1", got)
	}
	if got := b.requests["evt-000107"]; got != 4 {
		t.Errorf("persistent 503 was sent %d times, want 4", got)
	}
	// What was stored is still in file order per topic.
	for topic, ids := range want {
		stored := slices.DeleteFunc(slices.Clone(ids), func(id string) bool {
			var i int
			fmt.Sscanf(id, "evt-%d", &i)
			return i%100 == 7 || i%100 == 50 || i == 333
		})
		if !slices.Equal(b.got[topic], stored) {
			t.Errorf("topic %s: stored order differs from file order", topic)
		}
	}
	for _, s := range []string{`line 7 (id "evt-000007", topic`, "503 Service Unavailable NACK: shutting down",
		"400 Bad Request NACK: invalid topic", "200 OK NACK: no", "retried"} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, log.String())
		}
	}
}

func TestConnectionErrorAndStop(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens any more

	msgs, _ := input(100, 3)
	cfg := testConfig(url)
	cfg.Concurrency, cfg.Retries, cfg.MaxFailed = 1, 2, 5
	sum, err := Run(context.Background(), cfg, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Acked != 0 || sum.Failed != 5 || sum.Retries != 10 || sum.Unsent != 95 {
		t.Errorf("summary %+v, want failed=5 retries=10 unsent=95", sum)
	}
}

func TestSummaryString(t *testing.T) {
	s := Summary{Sent: 3000, Acked: 2990, Failed: 10, Elapsed: 1500 * time.Millisecond}
	re := regexp.MustCompile(`^sent=3000 acked=2990 failed=10 elapsed=1.5s msgs/s=1993.3$`)
	if !re.MatchString(s.String()) {
		t.Errorf("summary %q", s)
	}
}

func TestReadMessages(t *testing.T) {
	msgs, err := ReadMessages(strings.NewReader(
		"{\"topic\":\"a.b\",\"content\":null,\"id\":\"x\"}\n\n  {\"topic\":{\"name\":\"c\"},\"content\":1}\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 2 || msgs[0].Topic != "a.b" || msgs[0].ID != "x" || msgs[1].Topic != "c" || msgs[1].Line != 3 {
		t.Errorf("messages %+v", msgs)
	}
	for _, bad := range []string{`{"content":1}`, `{"topic":""}`, `{"topic":`, `[1]`} {
		if _, err := ReadMessages(strings.NewReader("{\"topic\":\"ok\"}\n" + bad + "\n")); err == nil ||
			!strings.HasPrefix(err.Error(), "line 2:") {
			t.Errorf("%s: got %v, want a line 2 error", bad, err)
		}
	}
}

func TestBadConfig(t *testing.T) {
	for _, mod := range []func(*Config){
		func(c *Config) { c.Ack = "fsync" },
		func(c *Config) { c.Concurrency = 0 },
		func(c *Config) { c.URL = "localhost:8080" },
	} {
		cfg := testConfig("http://localhost:1")
		mod(&cfg)
		if _, err := Run(context.Background(), cfg, nil); err == nil {
			t.Errorf("config %+v: no error", cfg)
		}
	}
}
