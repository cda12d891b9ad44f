package groups

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage"
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

// publishLarge appends n durable messages of about size bytes each.
func (e *env) publishLarge(n, size int) {
	e.t.Helper()
	p := []byte(`{"p":"` + strings.Repeat("x", size-8) + `"}`)
	for i := 0; i < n; i++ {
		if _, err := e.q.Offer(context.Background(), p, storage.Durable); err != nil {
			e.t.Fatal(err)
		}
	}
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

// TestFetchAllocatesAboutItsReply: one fetch of 1 MB messages through the
// HTTP handler allocates at most 1.5 times the bytes of its reply (the
// entries are read once and the reply is written from them, never built
// as a second and third copy).
func TestFetchAllocatesAboutItsReply(t *testing.T) {
	e := newEnv(t, Options{})
	e.publishLarge(18, 1_000_000)
	h := httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{})).Handler()
	url := "/topics/" + testTopic + "/groups/g/fetch?max=1000"

	// Warm up (first-use allocations of the router and the group), then
	// measure a fetch from a fresh group.
	warm := &countingWriter{}
	h.ServeHTTP(warm, httptest.NewRequest(http.MethodPost, "/topics/"+testTopic+"/groups/warm/fetch?max=1", nil))
	if warm.status != http.StatusOK {
		t.Fatalf("warm-up fetch: HTTP %d", warm.status)
	}
	w := &countingWriter{}
	req := httptest.NewRequest(http.MethodPost, url, nil)
	alloc := allocDuring(func() { h.ServeHTTP(w, req) })
	if w.status != http.StatusOK || w.n < 16_000_000 {
		t.Fatalf("fetch: HTTP %d, %d bytes", w.status, w.n)
	}
	ratio := float64(alloc) / float64(w.n)
	t.Logf("fetch reply %d bytes, allocated %d bytes: %.2fx", w.n, alloc, ratio)
	if ratio > 1.5 {
		t.Errorf("one fetch allocated %.2fx its reply bytes (%d for %d), want <= 1.5x", ratio, alloc, w.n)
	}
}

// TestFetchReplyShape: the reply written without encoding/json is the same
// JSON as FetchResponse, a stored record that is not JSON included.
func TestFetchReplyShape(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(2)
	if _, err := e.q.Offer(context.Background(), []byte(`{"a":`+"\n"+`"x\u00e9\"<>&"}`), storage.Durable); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Offer(context.Background(), []byte(`not json at all`), storage.Durable); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{})).Handler()
	w := &countingWriter{keep: true}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/topics/"+testTopic+"/groups/g/fetch?max=10", nil))
	if w.status != http.StatusOK {
		t.Fatalf("HTTP %d %s", w.status, w.body)
	}
	if ct := w.h.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got FetchResponse
	if err := json.Unmarshal(w.body, &got); err != nil {
		t.Fatalf("body %s: %v", w.body, err)
	}
	if got.Topic != testTopic || got.Group != "g" || got.Session == "" || got.Session != w.h.Get(SessionHeader) ||
		got.Committed != 0 || got.Next != 4 || len(got.Messages) != 4 {
		t.Fatalf("reply %s", w.body)
	}
	if string(got.Messages[0].Message) != `{"n":0}` || got.Messages[2].Offset != 2 ||
		got.Messages[3].Error != "stored message is not valid JSON" || got.Messages[3].Message != nil {
		t.Fatalf("messages %s", w.body)
	}
	var v map[string]string
	if err := json.Unmarshal(got.Messages[2].Message, &v); err != nil || v["a"] != "x\u00e9\"<>&" {
		t.Fatalf("message 2 %s: %v %v", got.Messages[2].Message, v, err)
	}
	// An empty fetch answers "messages":[] (never null).
	w = &countingWriter{keep: true}
	r := httptest.NewRequest(http.MethodPost, "/topics/"+testTopic+"/groups/g/fetch", nil)
	r.Header.Set(SessionHeader, got.Session)
	h.ServeHTTP(w, r)
	if w.status != http.StatusOK || !strings.Contains(string(w.body), `"messages":[]`) {
		t.Fatalf("empty fetch: HTTP %d %s", w.status, w.body)
	}
}
