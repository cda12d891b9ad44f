package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// countingWriter is an http.ResponseWriter that keeps only the byte count
// (and, when keep is set, the body): the allocations measured are the
// handler's, not a recorder's growing buffer.
type countingWriter struct {
	h      http.Header
	status int
	n      int
	keep   bool
	body   []byte
}

func (w *countingWriter) Header() http.Header {
	if w.h == nil {
		w.h = http.Header{}
	}
	return w.h
}

func (w *countingWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.n += len(p)
	if w.keep {
		w.body = append(w.body, p...)
	}
	return len(p), nil
}

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
		if _, err := q.Offer(context.Background(), p, storage.Durable); err != nil {
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
	warm := &countingWriter{}
	h.ServeHTTP(warm, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?limit=1", nil))
	if warm.status != http.StatusOK {
		t.Fatalf("warm-up read: HTTP %d", warm.status)
	}
	w := &countingWriter{}
	req := httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?limit=1000", nil)
	alloc := allocDuring(func() { h.ServeHTTP(w, req) })
	if w.status != http.StatusOK || w.n < 4_000_000 {
		t.Fatalf("read: HTTP %d, %d bytes", w.status, w.n)
	}
	ratio := float64(alloc) / float64(w.n)
	t.Logf("read-back reply %d bytes, allocated %d bytes: %.2fx", w.n, alloc, ratio)
	if ratio > 1.5 {
		t.Errorf("one read-back page allocated %.2fx its reply bytes (%d for %d), want <= 1.5x", ratio, alloc, w.n)
	}
}

// TestReadBackReplyShape: the page's members and their values.
func TestReadBackReplyShape(t *testing.T) {
	s, _ := newReadBack(t, Options{}, 3, 20)
	w := &countingWriter{keep: true}
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?offset=1&limit=5", nil))
	if w.status != http.StatusOK || w.h.Get("Content-Type") != "application/json" {
		t.Fatalf("HTTP %d %q %s", w.status, w.h.Get("Content-Type"), w.body)
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
	if err := json.Unmarshal(w.body, &got); err != nil {
		t.Fatalf("body %s: %v", w.body, err)
	}
	if got.Topic != "read.back" || len(got.Messages) != 2 || got.Messages[0].Offset != 1 ||
		!strings.HasPrefix(string(got.Messages[1].Message), `{"p":"x`) || got.NextOffset != 3 || got.HighWatermark != 3 {
		t.Fatalf("reply %s", w.body)
	}
	w = &countingWriter{keep: true}
	s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/topics/read.back/messages?offset=3", nil))
	if w.status != http.StatusOK || !strings.Contains(string(w.body), `"messages":[]`) {
		t.Fatalf("empty page: HTTP %d %s", w.status, w.body)
	}
}
