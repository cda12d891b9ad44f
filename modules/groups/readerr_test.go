package groups

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// faultEnv is a coordinator over a registry with a read fault that can be
// aimed at one offset (topicqueuetest.ReadFault: FailAt, Fired).
type faultEnv struct {
	*topicqueuetest.ReadFault
	q *topicqueue.TopicQueue
	c *Coordinator
}

// newFaultEnv stores n durable messages {"n":<offset>} in testTopic, one per
// segment, and installs the read fault (off until failAt is set).
func newFaultEnv(t *testing.T, n int) *faultEnv {
	t.Helper()
	log := zaptest.NewLogger(t)
	e := &faultEnv{ReadFault: topicqueuetest.NewReadFault(log)}
	e.c = New(e.Registry, Options{Logger: log})
	t.Cleanup(func() {
		_ = e.c.Stop(context.Background())
		if err := e.Registry.Close(); err != nil {
			t.Error(err)
		}
	})
	q, err := e.Registry.GetOrCreate(testTopic)
	if err != nil {
		t.Fatal(err)
	}
	e.q = q
	for i := 0; i < n; i++ {
		if _, err := q.Log().Append(context.Background(), fmt.Appendf(nil, `{"n":%d}`, i), contract.Durable); err != nil {
			t.Fatal(err)
		}
	}
	if st := q.Stats(); st.Segments != n {
		t.Fatalf("%d segments for %d messages, want one each", st.Segments, n)
	}
	return e
}

// status is the coordinator's view of group g of testTopic.
func (e *faultEnv) status(t *testing.T, g string) GroupStatus {
	t.Helper()
	for _, st := range e.c.Groups(testTopic) {
		if st.Group == g {
			return st
		}
	}
	t.Fatalf("group %s unknown to the coordinator", g)
	return GroupStatus{}
}

// A read error (EIO) in a fetch is never skipped: the fetch delivers what
// it read before the failing offset, the next fetch fails with a 503-class
// error and delivers nothing, the session's position and the committed
// offset stay where they were, and once reads work the failed offset is
// delivered, in order.
func TestFetchReadErrorKeepsOffset(t *testing.T) {
	e := newFaultEnv(t, 5)
	s, err := e.c.Acquire(testTopic, "g")
	if err != nil {
		t.Fatal(err)
	}
	e.FailAt.Store(2)

	b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 10, 0)
	if err != nil {
		t.Fatalf("fetch before the bad offset: %v", err)
	}
	if got := fmt.Sprint(offsets(b.Entries)); got != "[0 1]" || b.Next != 2 {
		t.Fatalf("fetch = %s next %d, want [0 1] next 2 (stop before the unreadable offset)", got, b.Next)
	}
	b.Release()

	for i := 0; i < 3; i++ {
		b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 10, 0)
		if err == nil {
			t.Fatalf("fetch %d at the unreadable offset: %v, want an error", i, offsets(b.Entries))
		}
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("fetch %d: %v, want the EIO", i, err)
		}
		if c := contract.Classify(err); c.Status != 503 || c.Code != contract.CodeUnavailable {
			t.Errorf("fetch %d: %v is %d %s, want 503 %s", i, err, c.Status, c.Code, contract.CodeUnavailable)
		}
		if len(b.Entries) != 0 {
			t.Errorf("failed fetch %d returned entries %v", i, offsets(b.Entries))
		}
		if st := e.status(t, "g"); st.Next != 2 || st.Committed != 0 || !st.Held {
			t.Fatalf("after failed fetch %d: %+v, want next 2, committed 0, held", i, st)
		}
	}
	if e.Fired.Load() == 0 {
		t.Fatal("the read fault never fired")
	}
	// The failed offset was not delivered: it cannot be acknowledged.
	if _, err := e.c.Ack(testTopic, "g", s, 2); !errors.Is(err, ErrNotDelivered) {
		t.Fatalf("ack of the unreadable offset: %v, want ErrNotDelivered", err)
	}
	if c, err := e.c.Ack(testTopic, "g", s, 1); err != nil || c != 2 {
		t.Fatalf("ack 1 = %d, %v, want committed 2", c, err)
	}

	e.FailAt.Store(-1)
	b = fetchOK(t, e.c, s, 10)
	if got := fmt.Sprint(offsets(b.Entries)); got != "[2 3 4]" || b.Committed != 2 || b.Next != 5 {
		t.Fatalf("after the fault: %s committed %d next %d, want [2 3 4] committed 2 next 5", got, b.Committed, b.Next)
	}
}

// A read error on a new session's first fetch leaves the session where the
// group's committed offset is: a later fetch starts there.
func TestFetchReadErrorAtCommittedOffset(t *testing.T) {
	e := newFaultEnv(t, 3)
	s, err := e.c.Acquire(testTopic, "g")
	if err != nil {
		t.Fatal(err)
	}
	e.FailAt.Store(0)
	if b, err := e.c.Fetch(context.Background(), testTopic, "g", s, 10, 0); err == nil || !errors.Is(err, syscall.EIO) {
		t.Fatalf("fetch of an unreadable first offset = %v, %v; want the EIO", offsets(b.Entries), err)
	}
	if st := e.status(t, "g"); st.Next != 0 || st.Committed != 0 {
		t.Fatalf("after the failed fetch: %+v, want next 0, committed 0", st)
	}
	e.FailAt.Store(-1)
	if got := fmt.Sprint(offsets(fetchOK(t, e.c, s, 10).Entries)); got != "[0 1 2]" {
		t.Fatalf("after the fault: %s, want [0 1 2]", got)
	}
}

// fetchOK is a Fetch of up to max entries without wait that must succeed;
// the batch's budget is released at cleanup.
func fetchOK(t *testing.T, c *Coordinator, session string, max int) Batch {
	t.Helper()
	b, err := c.Fetch(context.Background(), testTopic, "g", session, max, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	return b
}

// Over HTTP a read error in a fetch is 503 UNAVAILABLE with the JSON error
// body, the session survives it at the same position, and a session the
// failing request started is released (the group is not left busy).
func TestHTTPFetchReadError503(t *testing.T) {
	e := newFaultEnv(t, 4)
	srv := httpapi.New(httpapi.Options{}, e.Registry, nil, zaptest.NewLogger(t), NewRoute(e.c, RouteOptions{}))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	base := ts.URL + "/topics/" + testTopic + "/groups/"

	e.FailAt.Store(2)
	r := do(t, "POST", base+"g/fetch?max=10", "", "")
	if got := fmt.Sprint(r.offsets()); r.status != 200 || got != "[0 1]" {
		t.Fatalf("first fetch: %d %s, want 200 with offsets [0 1]", r.status, r.raw)
	}
	s := r.session
	for i := 0; i < 2; i++ {
		r = do(t, "POST", base+"g/fetch?max=10", s, "")
		if r.status != 503 || r.code() != contract.CodeUnavailable || r.body["acknowledgement"] != "NACK" ||
			!strings.Contains(r.raw, "input/output error") {
			t.Fatalf("fetch at the unreadable offset: %d %s, want 503 %s NACK naming the I/O error", r.status, r.raw, contract.CodeUnavailable)
		}
	}
	if r := do(t, "POST", base+"g/ack", s, `{"offset": 2}`); r.status != 409 || r.code() != contract.CodeNotDelivered {
		t.Fatalf("ack of the unreadable offset: %d %s, want 409 %s", r.status, r.raw, contract.CodeNotDelivered)
	}
	e.FailAt.Store(-1)
	r = do(t, "POST", base+"g/fetch?max=10", s, "")
	if got := fmt.Sprint(r.offsets()); r.status != 200 || got != "[2 3]" || r.body["committed"] != 0.0 {
		t.Fatalf("fetch after the fault: %d %s, want offsets [2 3], committed 0", r.status, r.raw)
	}

	// A new session whose first fetch fails is not kept.
	e.FailAt.Store(0)
	if r := do(t, "POST", base+"h/fetch", "", ""); r.status != 503 || r.code() != contract.CodeUnavailable || r.session != "" {
		t.Fatalf("first fetch of group h: %d %s (session %q), want 503 without a session", r.status, r.raw, r.session)
	}
	e.FailAt.Store(-1)
	if r := do(t, "POST", base+"h/fetch?max=10", "", ""); r.status != 200 || fmt.Sprint(r.offsets()) != "[0 1 2 3]" {
		t.Fatalf("fetch of group h after the fault: %d %s, want 200 from offset 0 (the group is free)", r.status, r.raw)
	}
}
