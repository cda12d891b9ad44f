package app_test

// Misbehaving consumers:
// push dispatchers against httptest consumers that hang, redirect, stream
// huge or trickled bodies, answer 4xx, or are not listening at all.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
)

// workerStatus returns the status of the (dispatcher, topic) worker.
func workerStatus(m *dispatcher.Manager, d, topic string) dispatcher.WorkerStatus {
	for _, s := range m.Status() {
		if s.Dispatcher == d && s.Topic == topic {
			return s
		}
	}
	return dispatcher.WorkerStatus{}
}

// hostOfURL parses an httptest URL into a dispatcher host.
func hostOfURL(t *testing.T, u string) dispatcher.Host {
	h, err := dispatcher.ParseHost(u)
	require.NoError(t, err)
	return h
}

// ackOffsets is what a consumer ACKed, in arrival order.
type ackOffsets struct {
	mu   sync.Mutex
	offs map[string][]int64 // by topic
}

func (a *ackOffsets) add(topic string, off int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.offs == nil {
		a.offs = map[string][]int64{}
	}
	a.offs[topic] = append(a.offs[topic], off)
}

func (a *ackOffsets) get(topic string) []int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]int64(nil), a.offs[topic]...)
}

// ack answers a normal ACK and records the offset.
func (a *ackOffsets) ack(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	off, _ := strconv.ParseInt(r.Header.Get(dispatcher.HeaderOffset), 10, 64)
	a.add(r.Header.Get(dispatcher.HeaderTopic), off)
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"acknowledgement":"ACK"}`)
}

func seq(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

// TestConsumerNeverAnswers: a consumer that never answers costs its worker
// one per-attempt timeout per try (abnormal, backoff) and nothing else:
// another dispatcher on the same topics and the same dispatcher's other
// topics' neighbours keep delivering in order.
func TestConsumerNeverAnswers(t *testing.T) {
	var hangs atomic.Int64
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hangs.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })
	var good ackOffsets
	goodSrv := httptest.NewServer(http.HandlerFunc(good.ack))
	t.Cleanup(goodSrv.Close)

	a, base, mgr := startDispatching(t,
		dispatcher.New("hang", hostOfURL(t, hang.URL), dispatcher.MustPattern("**")).WithTimeout(200*time.Millisecond),
		dispatcher.New("good", hostOfURL(t, goodSrv.URL), dispatcher.MustPattern("**")))
	defer a.RequireStop()

	topics := []string{"hang.a", "hang.b", "hang.c"}
	for i := range 5 {
		for _, tp := range topics {
			st, out := publishAt(t, base, tp, map[string]any{"n": i}, "")
			require.Equal(t, 200, st, out)
		}
	}
	require.Eventually(t, func() bool {
		for _, tp := range topics {
			if len(good.get(tp)) < 5 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "the good dispatcher delivers everything")
	for _, tp := range topics {
		assert.Equal(t, seq(5), good.get(tp), "in order, once: %s", tp)
	}
	require.Eventually(t, func() bool { return hangs.Load() >= int64(2*len(topics)) }, 20*time.Second, 10*time.Millisecond)
	for _, tp := range topics {
		s := workerStatus(mgr, "hang", tp)
		assert.Zero(t, s.Committed, "nothing committed for the hanging consumer")
		assert.Zero(t, s.Delivered)
		assert.Positive(t, s.Abnormal, "timeouts count as abnormal")
		assert.True(t, s.Running)
	}
}

// TestConsumerRedirectNotFollowed: a 3xx pointing at a consumer that would
// ACK is abnormal (backoff, nothing committed); the redirect target never
// receives anything; once the consumer answers normally delivery goes on in
// order.
func TestConsumerRedirectNotFollowed(t *testing.T) {
	for _, code := range []int{301, 302, 303, 307, 308} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			var target ackOffsets
			targetSrv := httptest.NewServer(http.HandlerFunc(target.ack))
			t.Cleanup(targetSrv.Close)
			var redirects atomic.Int64
			var fixed atomic.Bool
			var got ackOffsets
			redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if fixed.Load() {
					got.ack(w, r)
					return
				}
				redirects.Add(1)
				http.Redirect(w, r, targetSrv.URL+"/mmmq/messages", code)
			}))
			t.Cleanup(redir.Close)
			a, base, mgr := startDispatching(t, dispatcher.New("redir", hostOfURL(t, redir.URL), dispatcher.MustPattern("redir.*")))
			defer a.RequireStop()
			publishN(t, base, "redir.t", 3)
			require.Eventually(t, func() bool { return workerStatus(mgr, "redir", "redir.t").Abnormal >= 3 },
				20*time.Second, 5*time.Millisecond, "a redirect is abnormal")
			s := workerStatus(mgr, "redir", "redir.t")
			assert.Zero(t, s.Committed)
			assert.Zero(t, s.Delivered)
			assert.GreaterOrEqual(t, redirects.Load(), int64(3))
			assert.Empty(t, target.get("redir.t"), "the redirect is never followed")

			fixed.Store(true)
			require.Eventually(t, func() bool { return len(got.get("redir.t")) >= 3 }, 20*time.Second, 5*time.Millisecond)
			assert.Equal(t, seq(3), got.get("redir.t"))
			assert.Empty(t, target.get("redir.t"), "the redirect target never received")
		})
	}
}

// TestConsumerAbnormalBodies: a 2xx whose body is huge (100 MiB streamed) is
// cut at mmmq.broker.dispatch.max-response-bytes and abnormal; a body
// trickled a byte at a time is cut by the per-attempt timeout and abnormal;
// in both cases the broker's live heap stays flat, and delivery resumes in
// order once the consumer answers normally.
func TestConsumerAbnormalBodies(t *testing.T) {
	const huge = 100 << 20
	for _, tc := range []struct {
		name    string
		attempt func(w http.ResponseWriter, r *http.Request) int64 // bytes written
	}{
		{"huge body", func(w http.ResponseWriter, r *http.Request) int64 {
			w.Header().Set("Content-Type", "application/json")
			n, _ := io.WriteString(w, `{"acknowledgement":"ACK","pad":"`)
			chunk := make([]byte, 64<<10)
			for i := range chunk {
				chunk[i] = 'x'
			}
			total := int64(n)
			for total < huge {
				m, err := w.Write(chunk)
				total += int64(m)
				if err != nil {
					break
				}
			}
			return total
		}},
		{"trickled body", func(w http.ResponseWriter, r *http.Request) int64 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(200)
			body := `{"acknowledgement":"ACK"}`
			rc := http.NewResponseController(w)
			var total int64
			for i := 0; ; i = (i + 1) % len(body) {
				if _, err := io.WriteString(w, body[i:i+1]); err != nil {
					return total
				}
				if rc.Flush() != nil {
					return total
				}
				total++
				select {
				case <-r.Context().Done():
					return total
				case <-time.After(50 * time.Millisecond):
				}
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fixed atomic.Bool
			var got ackOffsets
			var mu sync.Mutex
			var written []int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if fixed.Load() {
					got.ack(w, r)
					return
				}
				n := tc.attempt(w, r)
				mu.Lock()
				written = append(written, n)
				mu.Unlock()
			}))
			t.Cleanup(srv.Close)
			a, base, mgr := startDispatching(t, dispatcher.New("bodies", hostOfURL(t, srv.URL), dispatcher.MustPattern("body.*")).
				WithTimeout(300*time.Millisecond))
			defer a.RequireStop()
			before := heapInUse()
			publishN(t, base, "body.t", 3)
			attempts := func() int { mu.Lock(); defer mu.Unlock(); return len(written) }
			require.Eventually(t, func() bool { return attempts() >= 5 }, 30*time.Second, 5*time.Millisecond)
			after := heapInUse()
			assert.Less(t, int64(after)-int64(before), int64(32<<20), "memory stays flat")
			mu.Lock()
			t.Logf("live heap before %d KiB, after %d KiB; bytes the consumer managed to write per attempt: %v",
				before>>10, after>>10, written)
			for _, n := range written {
				assert.Less(t, n, int64(huge), "the broker stopped reading early")
			}
			mu.Unlock()
			require.Eventually(t, func() bool { return workerStatus(mgr, "bodies", "body.t").Abnormal >= 5 },
				10*time.Second, 5*time.Millisecond)
			assert.Zero(t, workerStatus(mgr, "bodies", "body.t").Committed)

			fixed.Store(true)
			require.Eventually(t, func() bool { return len(got.get("body.t")) >= 3 }, 20*time.Second, 5*time.Millisecond)
			assert.Equal(t, seq(3), got.get("body.t"))
		})
	}
}

// TestConsumer4xxThenACK: 410, 404, 400, 429, a 2xx with another body and a
// 204 are abnormal (backoff, the same message is retried with a growing
// mmmq-attempt); the next normal ACK delivers it and the rest follow in
// order, each once.
func TestConsumer4xxThenACK(t *testing.T) {
	answers := []func(w http.ResponseWriter){
		func(w http.ResponseWriter) { http.Error(w, "gone", http.StatusGone) },
		func(w http.ResponseWriter) { http.Error(w, "not found", http.StatusNotFound) },
		func(w http.ResponseWriter) { http.Error(w, "bad", http.StatusBadRequest) },
		func(w http.ResponseWriter) { http.Error(w, "slow down", http.StatusTooManyRequests) },
		func(w http.ResponseWriter) { _, _ = io.WriteString(w, `{"ok":true}`) },
		func(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) },
	}
	type seen struct {
		off     int64
		attempt int
	}
	var mu sync.Mutex
	var calls []seen
	var got ackOffsets
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		off, _ := strconv.ParseInt(r.Header.Get(dispatcher.HeaderOffset), 10, 64)
		att, _ := strconv.Atoi(r.Header.Get(dispatcher.HeaderAttempt))
		mu.Lock()
		n := len(calls)
		calls = append(calls, seen{off, att})
		mu.Unlock()
		if n < len(answers) {
			_, _ = io.Copy(io.Discard, r.Body)
			answers[n](w)
			return
		}
		got.ack(w, r)
	}))
	t.Cleanup(srv.Close)
	a, base, mgr := startDispatching(t, dispatcher.New("picky", hostOfURL(t, srv.URL), dispatcher.MustPattern("picky.*")))
	defer a.RequireStop()
	publishN(t, base, "picky.t", 3)
	require.Eventually(t, func() bool { return len(got.get("picky.t")) >= 3 }, 20*time.Second, 5*time.Millisecond)
	assert.Equal(t, seq(3), got.get("picky.t"))
	mu.Lock()
	want := []seen{}
	for i := range len(answers) + 1 {
		want = append(want, seen{0, i + 1})
	}
	want = append(want, seen{1, 1}, seen{2, 1})
	assert.Equal(t, want, calls, "offset 0 retried with growing attempt numbers, then 1 and 2 once")
	mu.Unlock()
	require.Eventually(t, func() bool { return workerStatus(mgr, "picky", "picky.t").Committed == 3 }, 10*time.Second, 5*time.Millisecond)
	s := workerStatus(mgr, "picky", "picky.t")
	assert.EqualValues(t, len(answers), s.Abnormal)
	assert.EqualValues(t, 3, s.Delivered)
	assert.False(t, s.Backoff, "backoff resets after a normal answer")
}

// TestConsumerRefusedThenListening: a consumer port that refuses connections
// is abnormal (backoff); once a consumer listens on that port, delivery
// resumes from offset 0 in order, each message once.
func TestConsumerRefusedThenListening(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	a, base, mgr := startDispatching(t, dispatcher.New("late", hostOfURL(t, "http://"+addr), dispatcher.MustPattern("late.*")))
	defer a.RequireStop()
	publishN(t, base, "late.t", 4)
	require.Eventually(t, func() bool { return workerStatus(mgr, "late", "late.t").Abnormal >= 3 }, 20*time.Second, 5*time.Millisecond)
	s := workerStatus(mgr, "late", "late.t")
	assert.Zero(t, s.Committed)
	assert.Contains(t, fmt.Sprint(s), "late.t")

	var got ackOffsets
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "the port was taken meanwhile; rerun")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(got.ack))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	require.Eventually(t, func() bool { return len(got.get("late.t")) >= 4 }, 20*time.Second, 5*time.Millisecond)
	assert.Equal(t, seq(4), got.get("late.t"))
}

// TestShutdownBoundedWithHangingConsumerAndLongPoll: the application stops
// within a bounded time while a consumer holds a delivery open (per-attempt
// timeout 30 s, the default) and a consumer-group fetch long-polls (30 s);
// the long poll is answered, the hanging delivery is cancelled.
func TestShutdownBoundedWithHangingConsumerAndLongPoll(t *testing.T) {
	inFlight := make(chan struct{}, 100)
	cancelled := make(chan struct{}, 100)
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Reading the body lets the server notice the client going away.
		_, _ = io.Copy(io.Discard, r.Body)
		inFlight <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-release:
		}
	}))
	t.Cleanup(hang.Close)
	t.Cleanup(func() { close(release) })

	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) { d.Timeout = 30 * time.Second })
	a, base := startBroker(t, cfg, provideDispatcher(dispatcher.New("hang", hostOfURL(t, hang.URL), dispatcher.MustPattern("lp.*"))))
	st, out := publishAt(t, base, "lp.t", map[string]any{"n": 0}, "")
	require.Equal(t, 200, st, out)
	select {
	case <-inFlight:
	case <-time.After(10 * time.Second):
		t.Fatal("the delivery never reached the hanging consumer")
	}

	// A group consumer takes message 0, acks it, and long-polls for more.
	resp, err := http.Post(base+"/topics/lp.t/groups/g/fetch?max=10", "application/json", nil)
	require.NoError(t, err)
	session := resp.Header.Get(groups.SessionHeader)
	var fr groups.FetchResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&fr))
	resp.Body.Close()
	require.Len(t, fr.Messages, 1)
	req, _ := http.NewRequest(http.MethodPost, base+"/topics/lp.t/groups/g/ack", jsonBody(`{"offset":0}`))
	req.Header.Set(groups.SessionHeader, session)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	type pollResult struct {
		status int
		err    error
	}
	polled := make(chan pollResult, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/topics/lp.t/groups/g/fetch?max=10&wait=30000", nil)
		req.Header.Set(groups.SessionHeader, session)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			polled <- pollResult{err: err}
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		polled <- pollResult{status: resp.StatusCode}
	}()
	time.Sleep(300 * time.Millisecond) // the fetch is waiting
	select {
	case r := <-polled:
		t.Fatalf("the long poll returned before shutdown: %+v", r)
	default:
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, a.Stop(ctx))
	took := time.Since(start)
	t.Logf("stop took %v", took)
	assert.Less(t, took, 10*time.Second, "shutdown is bounded")
	select {
	case r := <-polled:
		assert.NoError(t, r.err)
		assert.Equal(t, 200, r.status, "the long poll is answered (empty) on shutdown")
	case <-time.After(10 * time.Second):
		t.Fatal("the long poll is still waiting after shutdown")
	}
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the hanging delivery was not cancelled by shutdown")
	}
}

func jsonBody(s string) io.Reader { return strings.NewReader(s) }
