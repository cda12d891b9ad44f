package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/httpapi/httpapitest"
)

// publishLarge appends n durable messages of about size bytes each.
func (e *env) publishLarge(n, size int) {
	e.t.Helper()
	p := []byte(`{"p":"` + strings.Repeat("x", size-8) + `"}`)
	for i := 0; i < n; i++ {
		if _, err := e.q.Log().Append(context.Background(), p, contract.Durable); err != nil {
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
	warm := &httpapitest.CountingWriter{}
	h.ServeHTTP(warm, httptest.NewRequest(http.MethodPost, "/topics/"+testTopic+"/groups/warm/fetch?max=1", nil))
	if warm.Status != http.StatusOK {
		t.Fatalf("warm-up fetch: HTTP %d", warm.Status)
	}
	w := &httpapitest.CountingWriter{}
	req := httptest.NewRequest(http.MethodPost, url, nil)
	alloc := allocDuring(func() { h.ServeHTTP(w, req) })
	if w.Status != http.StatusOK || w.N < 16_000_000 {
		t.Fatalf("fetch: HTTP %d, %d bytes", w.Status, w.N)
	}
	ratio := float64(alloc) / float64(w.N)
	t.Logf("fetch reply %d bytes, allocated %d bytes: %.2fx", w.N, alloc, ratio)
	if ratio > 1.5 {
		t.Errorf("one fetch allocated %.2fx its reply bytes (%d for %d), want <= 1.5x", ratio, alloc, w.N)
	}
}

// TestFetchReplyShape: the reply written without encoding/json is the same
// JSON as FetchResponse, a stored record that is not JSON included.
func TestFetchReplyShape(t *testing.T) {
	e := newEnv(t, Options{})
	e.publish(2)
	if _, err := e.q.Log().Append(context.Background(), []byte(`{"a":`+"\n"+`"x\u00e9\"<>&"}`), contract.Durable); err != nil {
		t.Fatal(err)
	}
	if _, err := e.q.Log().Append(context.Background(), []byte(`not json at all`), contract.Durable); err != nil {
		t.Fatal(err)
	}
	h := httpapi.New(httpapi.Options{}, e.reg, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{})).Handler()
	w := &httpapitest.CountingWriter{Keep: true}
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/topics/"+testTopic+"/groups/g/fetch?max=10", nil))
	if w.Status != http.StatusOK {
		t.Fatalf("HTTP %d %s", w.Status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var got FetchResponse
	if err := json.Unmarshal(w.Body, &got); err != nil {
		t.Fatalf("body %s: %v", w.Body, err)
	}
	if got.Topic != testTopic || got.Group != "g" || got.Session == "" || got.Session != w.Header().Get(SessionHeader) ||
		got.Committed != 0 || got.Next != 4 || len(got.Messages) != 4 {
		t.Fatalf("reply %s", w.Body)
	}
	if string(got.Messages[0].Message) != `{"n":0}` || got.Messages[2].Offset != 2 ||
		got.Messages[3].Error != "stored message is not valid JSON" || got.Messages[3].Message != nil {
		t.Fatalf("messages %s", w.Body)
	}
	var v map[string]string
	if err := json.Unmarshal(got.Messages[2].Message, &v); err != nil || v["a"] != "x\u00e9\"<>&" {
		t.Fatalf("message 2 %s: %v %v", got.Messages[2].Message, v, err)
	}
	// An empty fetch answers "messages":[] (never null).
	w = &httpapitest.CountingWriter{Keep: true}
	r := httptest.NewRequest(http.MethodPost, "/topics/"+testTopic+"/groups/g/fetch", nil)
	r.Header.Set(SessionHeader, got.Session)
	h.ServeHTTP(w, r)
	if w.Status != http.StatusOK || !strings.Contains(string(w.Body), `"messages":[]`) {
		t.Fatalf("empty fetch: HTTP %d %s", w.Status, w.Body)
	}
}

// TestFetchesShareTheBudget: a fetch takes its entries' bytes from the
// in-flight budget until Release. While another fetch holds it, a fetch
// gets a smaller batch (at least one entry), or OVERLOADED without moving
// its session when not even one entry fits; after Release the budget is
// back at 0 and the refused fetch gets its messages.
func TestFetchesShareTheBudget(t *testing.T) {
	budget := contract.NewBudget(3_500_000)
	e := newEnv(t, Options{Budget: budget})
	e.publishLarge(6, 1_000_000)
	sa, sb := e.acquire("a"), e.acquire("b")

	a := e.fetch("a", sa, 1000, 0) // 3 of 1 MB fit in 3.5 MB
	wantOffsets(t, a, 0, 3)
	if budget.InUse() != 3_000_000 || a.Next != 3 {
		t.Fatalf("in use %d, next %d", budget.InUse(), a.Next)
	}
	_, err := e.c.Fetch(context.Background(), testTopic, "b", sb, 1000, 0)
	if !errors.Is(err, contract.ErrOverloaded) || contract.Classify(err).Code != contract.CodeOverloaded {
		t.Fatalf("fetch over the budget: %v, want OVERLOADED", err)
	}
	if st := groupStatus(t, e, "b"); st.Next != 0 {
		t.Fatalf("an OVERLOADED fetch moved the session to %d", st.Next)
	}
	a.Release()
	a.Release() // twice: no effect
	if budget.InUse() != 0 {
		t.Fatalf("in use %d after Release", budget.InUse())
	}
	if !budget.TryAcquire(1_600_000) { // others hold 1.6 MB: one message fits
		t.Fatal("acquire")
	}
	b := e.fetch("b", sb, 1000, 0)
	wantOffsets(t, b, 0, 1)
	b.Release()
	budget.Release(1_600_000)
	b = e.fetch("b", sb, 1000, 0)
	wantOffsets(t, b, 1, 4)
	b.Release()
	if budget.InUse() != 0 {
		t.Fatalf("in use %d", budget.InUse())
	}
}

func groupStatus(t *testing.T, e *env, group string) GroupStatus {
	t.Helper()
	for _, st := range e.c.Groups(testTopic) {
		if st.Group == group {
			return st
		}
	}
	t.Fatalf("group %s unknown", group)
	return GroupStatus{}
}

// TestConcurrentHTTPFetchesOverTheBudget: 16 groups fetch 18 messages of
// 20 kB at once over HTTP with a budget of 80 kB (the reported shape,
// 1 MB messages against a larger budget, scaled down to stay quick under
// -race). Every answer is a page of
// at most what the budget holds or 503 OVERLOADED with Retry-After; the
// messages of an OVERLOADED fetch are delivered by the next one (nothing
// lost); the budget is back at 0 afterwards, also after clients that
// disconnect in the middle of their reply.
func TestConcurrentHTTPFetchesOverTheBudget(t *testing.T) {
	const groups, msgs, size, capBytes = 16, 18, 20_000, 80_000
	budget := contract.NewBudget(capBytes)
	e, ts := newHTTP(t, Options{Budget: budget})
	e.publishLarge(msgs, size)
	base := ts.URL + "/topics/" + testTopic + "/groups/"

	var wg sync.WaitGroup
	var overloaded, pages atomic.Int64
	for i := 0; i < groups; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			group := fmt.Sprintf("g%d", i)
			session, next := "", int64(0)
			for next < msgs {
				r := do(t, "POST", base+group+"/fetch?max=1000", session, "")
				switch r.status {
				case http.StatusOK:
					pages.Add(1)
					offs := r.offsets()
					if len(offs) == 0 || len(offs)*size > capBytes || offs[0] != next {
						t.Errorf("group %s: page %v at %d", group, offs, next)
						return
					}
					session, next = r.session, offs[len(offs)-1]+1
				case http.StatusServiceUnavailable:
					if r.code() != contract.CodeOverloaded || r.retryAfter == "" {
						t.Errorf("group %s: 503 %s (Retry-After %q)", group, r.raw, r.retryAfter)
						return
					}
					overloaded.Add(1)
					time.Sleep(time.Millisecond)
				default:
					t.Errorf("group %s: %d %s", group, r.status, r.raw)
					return
				}
			}
		}()
	}
	// Clients that go away in the middle of a reply.
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Post(fmt.Sprintf("%sgone%d/fetch?max=1000", base, i), "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.CopyN(io.Discard, resp.Body, 100)
			resp.Body.Close() // unread body: the connection is closed
		}()
	}
	wg.Wait()
	t.Logf("%d pages, %d OVERLOADED answers", pages.Load(), overloaded.Load())
	deadline := time.Now().Add(10 * time.Second)
	for budget.InUse() != 0 { // the disconnected replies end with their failed writes
		if time.Now().After(deadline) {
			t.Fatalf("budget still holds %d bytes", budget.InUse())
		}
		time.Sleep(time.Millisecond)
	}
}
