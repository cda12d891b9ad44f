package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// push sends one dispatcher-style request to url and returns the status code
// and the acknowledgement ("" when the body is not an ack). Errors are
// reported with t.Errorf (it runs in goroutines) and return status 0.
func push(t *testing.T, url, topic string, offset, attempt int, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Errorf("new request: %v", err)
		return 0, ""
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(HeaderConsumerID, "order-dispatcher")
	req.Header.Set(HeaderTopic, topic)
	req.Header.Set(HeaderOffset, strconv.Itoa(offset))
	req.Header.Set(HeaderAttempt, strconv.Itoa(attempt))
	req.Header.Set(HeaderMessageID, fmt.Sprintf("evt-%06d", offset+1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("push: %v", err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var ack struct {
		Acknowledgement string `json:"acknowledgement"`
	}
	if json.Unmarshal(b, &ack) != nil {
		return resp.StatusCode, ""
	}
	return resp.StatusCode, ack.Acknowledgement
}

func message(topic string, offset int) string {
	return fmt.Sprintf(`{"topic":{"name":%q},"content":{"orderId": %d},"id":"evt-%06d","timestamp":1709283600000}`,
		topic, 1000+offset, offset+1)
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestACK(t *testing.T) {
	var out syncBuffer
	srv := httptest.NewServer(NewHandler(Config{Out: &out}))
	defer srv.Close()

	for off := range 3 {
		code, ack := push(t, srv.URL, "order.created", off, 1, message("order.created", off))
		if code != http.StatusOK || ack != "ACK" {
			t.Fatalf("offset %d: got %d %q, want 200 ACK", off, code, ack)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("printed %d lines, want 3:\n%s", len(lines), out.String())
	}
	want := `ACK  topic=order.created offset=1 attempt=1 id=evt-000002 dispatcher=order-dispatcher content={"orderId":1001}`
	if lines[1] != want {
		t.Errorf("line:\n got %s\nwant %s", lines[1], want)
	}
}

func TestNack(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Nack: 2}))
	defer srv.Close()

	// Two messages interleaved: each gets NACK, NACK, then ACK.
	for attempt := 1; attempt <= 3; attempt++ {
		for off := range 2 {
			want := "NACK"
			if attempt == 3 {
				want = "ACK"
			}
			code, ack := push(t, srv.URL, "payment.captured", off, attempt, message("payment.captured", off))
			if code != http.StatusOK || ack != want {
				t.Fatalf("offset %d attempt %d: got %d %q, want 200 %s", off, attempt, code, ack, want)
			}
		}
	}
	// The same offset of another topic is another message.
	if _, ack := push(t, srv.URL, "order.paid", 0, 1, message("order.paid", 0)); ack != "NACK" {
		t.Fatalf("other topic: got %q, want NACK", ack)
	}
}

func TestFailEvery(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{FailEvery: 3}))
	defer srv.Close()

	for i := 1; i <= 9; i++ {
		code, ack := push(t, srv.URL, "order.created", i, 1, message("order.created", i))
		if i%3 == 0 {
			if code != http.StatusInternalServerError || ack != "" {
				t.Errorf("request %d: got %d %q, want 500", i, code, ack)
			}
			continue
		}
		if code != http.StatusOK || ack != "ACK" {
			t.Errorf("request %d: got %d %q, want 200 ACK", i, code, ack)
		}
	}
}

func TestBadRequests(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{MaxBody: 64}))
	defer srv.Close()

	if code, _ := push(t, srv.URL, "t", 0, 1, "{not json"); code != http.StatusBadRequest {
		t.Errorf("bad JSON: got %d, want 400", code)
	}
	big := `{"content":"` + strings.Repeat("x", 100) + `"}`
	if code, _ := push(t, srv.URL, "t", 0, 1, big); code != http.StatusRequestEntityTooLarge {
		t.Errorf("big body: got %d, want 413", code)
	}
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: got %d, want 405", resp.StatusCode)
	}
}

func TestDelay(t *testing.T) {
	srv := httptest.NewServer(NewHandler(Config{Delay: 50 * time.Millisecond}))
	defer srv.Close()
	start := time.Now()
	if _, ack := push(t, srv.URL, "t", 0, 1, "{}"); ack != "ACK" {
		t.Fatalf("got %q, want ACK", ack)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %s, want >= 50ms", d)
	}
}

func TestRecordFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "got.jsonl")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(NewHandler(Config{Nack: 1, FailEvery: 4, Record: f}))

	// Concurrent topics, like a dispatcher with one worker per topic. Each
	// worker resends until ACK, as a dispatcher does.
	topics := []string{"order.created", "order.paid", "payment.authorized"}
	var wg sync.WaitGroup
	for _, topic := range topics {
		wg.Go(func() {
			for off := range 5 {
				for attempt := 1; attempt <= 10; attempt++ {
					code, ack := push(t, srv.URL, topic, off, attempt, message(topic, off))
					if code == 0 || code == http.StatusOK && ack == "ACK" {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	srv.Close()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string][]int64{}
	answers := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var r Record
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("record %q: %v", sc.Text(), err)
		}
		answers[r.Answer]++
		if r.Dispatcher != "order-dispatcher" || r.Attempt < 1 || r.ID != fmt.Sprintf("evt-%06d", r.Offset+1) {
			t.Errorf("record fields: %+v", r)
		}
		var body struct {
			Topic struct {
				Name string `json:"name"`
			} `json:"topic"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || body.Topic.Name != r.Topic {
			t.Errorf("record body %s does not match topic %s", r.Body, r.Topic)
		}
		if r.Answer == AnswerACK {
			acked[r.Topic] = append(acked[r.Topic], r.Offset)
		}
	}
	for _, topic := range topics {
		if got := fmt.Sprint(acked[topic]); got != "[0 1 2 3 4]" {
			t.Errorf("%s: ACKed offsets %s, want [0 1 2 3 4]", topic, got)
		}
	}
	if answers[AnswerACK] != 15 || answers[AnswerNACK] < 15 || answers[AnswerFail] == 0 {
		t.Errorf("answers %v: want 15 ACK, >= 15 NACK, some FAIL", answers)
	}
}

func TestContentOf(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"topic":{"name":"t"},"content": {"a" : [1, 2]}}`, `{"a":[1,2]}`},
		{`{"topic":{"name":"t"},"content":null}`, `null`},
		{`[1, 2]`, `[1,2]`},
		{`{"content":"` + strings.Repeat("y", 400) + `"}`, `"` + strings.Repeat("y", maxPrint-1) + "…"},
	} {
		if got := contentOf([]byte(tc.in)); got != tc.want {
			t.Errorf("contentOf(%.40s) = %.40s, want %.40s", tc.in, got, tc.want)
		}
	}
}
