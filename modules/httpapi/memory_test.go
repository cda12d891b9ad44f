package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi/httpapitest"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// allocDuring returns the bytes allocated (runtime.MemStats.TotalAlloc)
// while f runs.
func allocDuring(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// newReadBack is a server over a registry in a temp dir whose topic
// "read.back" holds n durable messages of about size bytes.
func newReadBack(t *testing.T, opts Options, n, size int) (*Server, *topicqueue.Registry) {
	t.Helper()
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir()})
	t.Cleanup(func() { _ = reg.Close() })
	q, err := reg.GetOrCreate("read.back")
	if err != nil {
		t.Fatal(err)
	}
	p := []byte(`{"p":"` + strings.Repeat("x", max(size-8, 1)) + `"}`)
	for i := 0; i < n; i++ {
		if _, err := q.Log().Append(context.Background(), p, contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	return New(opts, reg, nil, zap.NewNop()), reg
}

// TestReadBackAllocatesAboutItsReply: one page of GET
// /topics/{topic}/messages of 1 MB messages allocates at most 1.5 times
// the bytes of its reply.
func TestReadBackAllocatesAboutItsReply(t *testing.T) {
	s, _ := newReadBack(t, Options{}, 6, 1_000_000)
	h := s.Handler()
	warm := &httpapitest.CountingWriter{}
	h.ServeHTTP(warm, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?limit=1", nil))
	if warm.Status != http.StatusOK {
		t.Fatalf("warm-up read: HTTP %d", warm.Status)
	}
	w := &httpapitest.CountingWriter{}
	req := httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?limit=1000", nil)
	alloc := allocDuring(func() { h.ServeHTTP(w, req) })
	if w.Status != http.StatusOK || w.N < 4_000_000 {
		t.Fatalf("read: HTTP %d, %d bytes", w.Status, w.N)
	}
	ratio := float64(alloc) / float64(w.N)
	t.Logf("read-back reply %d bytes, allocated %d bytes: %.2fx", w.N, alloc, ratio)
	if ratio > 1.5 {
		t.Errorf("one read-back page allocated %.2fx its reply bytes (%d for %d), want <= 1.5x", ratio, alloc, w.N)
	}
}

// TestReadBackReplyShape: the page's members and their values.
func TestReadBackReplyShape(t *testing.T) {
	s, _ := newReadBack(t, Options{}, 3, 20)
	w := &httpapitest.CountingWriter{Keep: true}
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?offset=1&limit=5", nil))
	if w.Status != http.StatusOK || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q %s", w.Status, w.Header().Get("Content-Type"), w.Body)
	}
	var got struct {
		Topic    string `json:"topic"`
		Messages []struct {
			Offset  int64           `json:"offset"`
			Message json.RawMessage `json:"message"`
		} `json:"messages"`
		NextOffset    int64 `json:"nextOffset"`
		HighWatermark int64 `json:"highWatermark"`
	}
	if err := json.Unmarshal(w.Body, &got); err != nil {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	if got.Topic != "read.back" || len(got.Messages) != 2 || got.Messages[0].Offset != 1 ||
		!strings.HasPrefix(string(got.Messages[1].Message), `{"p":"x`) || got.NextOffset != 3 || got.HighWatermark != 3 {
		t.Fatalf("reply %s", w.Body)
	}
	w = &httpapitest.CountingWriter{Keep: true}
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?offset=3", nil))
	if w.Status != http.StatusOK || !strings.Contains(string(w.Body), `"messages":[]`) {
		t.Fatalf("empty page: HTTP %d %s", w.Status, w.Body)
	}
}

// TestAcceptedOverBudgetIsOverloaded: an ACCEPTED publish whose bytes do
// not fit in the in-flight budget is answered 503 OVERLOADED with
// Retry-After and stores nothing; DURABLE publishes do not draw from the
// budget; the budget returns to what was taken once the writer committed.
func TestAcceptedOverBudgetIsOverloaded(t *testing.T) {
	budget := contract.NewBudget(1 << 20)
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir(), Storage: storage.Options{Budget: budget}})
	t.Cleanup(func() { _ = reg.Close() })
	h := New(Options{}, reg, nil, zap.NewNop()).Handler()
	body := `{"topic":"acc.t","content":{"p":"` + strings.Repeat("x", 200) + `"}}`
	publish := func(ack string) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/messages?ack="+ack, strings.NewReader(body)))
		return rec
	}
	if rec := publish("durable"); rec.Code != http.StatusOK { // creates the topic
		t.Fatalf("durable: %d %s", rec.Code, rec.Body)
	}
	q, _ := reg.Get("acc.t")

	// Fetch replies in flight hold all but 100 bytes of the budget.
	if !budget.TryAcquire(1<<20 - 100) {
		t.Fatal("acquire")
	}
	rec := publish("accepted")
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != contract.OverloadedRetryAfter ||
		!strings.Contains(rec.Body.String(), `"code":"OVERLOADED"`) || !strings.Contains(rec.Body.String(), "max-inflight-bytes") {
		t.Fatalf("accepted over the budget: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	if rec := publish("durable"); rec.Code != http.StatusOK {
		t.Fatalf("durable with the budget used up: %d %s", rec.Code, rec.Body)
	}
	if hw := q.HighWatermark(); hw != 2 {
		t.Fatalf("high watermark %d, want 2 (the OVERLOADED publish stored nothing)", hw)
	}
	budget.Release(1<<20 - 100)
	if rec := publish("accepted"); rec.Code != http.StatusOK {
		t.Fatalf("accepted within the budget: %d %s", rec.Code, rec.Body)
	}
	waitBudgetZero(t, budget)
}

// TestAcceptedAcrossTopicsShareOneBudget: ACCEPTED publishes to many topics
// at once never hold more than the one budget: each is answered 200 or 503
// OVERLOADED, every 200 is stored, and the budget returns to 0.
func TestAcceptedAcrossTopicsShareOneBudget(t *testing.T) {
	const topics, perTopic, size = 8, 40, 100_000
	budget := contract.NewBudget(1 << 20)
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir(), Storage: storage.Options{Budget: budget}})
	t.Cleanup(func() { _ = reg.Close() })
	h := New(Options{}, reg, nil, zap.NewNop()).Handler()
	var mu sync.Mutex
	ok := map[string]int64{}
	overloaded := 0
	var wg sync.WaitGroup
	for i := 0; i < topics; i++ {
		topic := fmt.Sprintf("acc.t%d", i)
		body := `{"topic":"` + topic + `","content":{"p":"` + strings.Repeat("x", size) + `"}}`
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < perTopic; j++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/messages?ack=accepted", strings.NewReader(body)))
				if used := budget.InUse(); used > budget.Max() {
					t.Errorf("budget in use %d over its cap %d", used, budget.Max())
				}
				mu.Lock()
				switch {
				case rec.Code == http.StatusOK:
					ok[topic]++
				case rec.Code == http.StatusServiceUnavailable && strings.Contains(rec.Body.String(), `"OVERLOADED"`):
					overloaded++
				default:
					t.Errorf("publish: %d %s", rec.Code, rec.Body)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	waitBudgetZero(t, budget)
	for topic, n := range ok {
		q, _ := reg.Get(topic)
		if hw := q.HighWatermark(); hw != n {
			t.Errorf("topic %s: %d stored, %d acknowledged", topic, hw, n)
		}
	}
	t.Logf("%d accepted, %d overloaded", topics*perTopic-overloaded, overloaded)
}

// waitBudgetZero waits until the storage writers have returned every
// ACCEPTED byte (they do after each commit).
func waitBudgetZero(t *testing.T, b *contract.Budget) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.InUse() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("budget still holds %d bytes", b.InUse())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadBackOverBudget: a read-back page draws its messages from the
// in-flight budget: with no room for one message it is 503 OVERLOADED with
// Retry-After, with room for some it is shorter (continued from its
// nextOffset), and the budget is returned once the page is written.
func TestReadBackOverBudget(t *testing.T) {
	const size = 10_000
	budget := contract.NewBudget(100_000)
	s, _ := newReadBack(t, Options{Budget: budget}, 5, size)
	get := func() (*httpapitest.CountingWriter, map[string]any) {
		w := &httpapitest.CountingWriter{Keep: true}
		s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?limit=10", nil))
		var v map[string]any
		if err := json.Unmarshal(w.Body, &v); err != nil {
			t.Fatalf("body %.200s: %v", w.Body, err)
		}
		return w, v
	}
	if !budget.TryAcquire(100_000 - size/2) {
		t.Fatal("acquire")
	}
	w, v := get()
	if w.Status != http.StatusServiceUnavailable || v["code"] != contract.CodeOverloaded || w.Header().Get("Retry-After") == "" {
		t.Fatalf("no room: HTTP %d %v %v", w.Status, w.Header(), v)
	}
	budget.Release(2 * size) // room for two and a half
	w, v = get()
	if ms, _ := v["messages"].([]any); w.Status != http.StatusOK || len(ms) != 2 || v["nextOffset"] != float64(2) {
		t.Fatalf("room for two: HTTP %d %.300s", w.Status, w.Body)
	}
	if used := budget.InUse(); used != 100_000-size/2-2*size {
		t.Fatalf("budget holds %d after the page", used)
	}
	budget.Release(100_000 - size/2 - 2*size)
	if _, v = get(); len(v["messages"].([]any)) != 5 || budget.InUse() != 0 {
		t.Fatalf("all five: %v, budget %d", v["nextOffset"], budget.InUse())
	}
}
