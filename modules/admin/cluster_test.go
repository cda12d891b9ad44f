package admin

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// sharedSpecs is a store of api dispatchers shared by several nodes, as a
// replicated key-value entry keeps it: a revision that grows with every
// save, compare-and-set saves, and a watch that tells the other nodes.
type sharedSpecs struct {
	mu    sync.Mutex
	rev   int
	specs []Spec
	nodes []*specHandle
}

// specHandle is one node's SpecStore (and SpecWatcher) on the shared list.
type specHandle struct {
	s    *sharedSpecs
	seen int // the revision this node last loaded, saved or was told of
	fn   func([]Spec)
	// hold queues what the watch would tell this node (a slow watch).
	hold    bool
	pending [][]Spec
}

func (s *sharedSpecs) node() *specHandle {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &specHandle{s: s}
	s.nodes = append(s.nodes, h)
	return h
}

func (h *specHandle) Path() string { return "shared-kv/dispatchers" }

func (h *specHandle) Load() ([]Spec, error) {
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	h.seen = h.s.rev
	return append([]Spec(nil), h.s.specs...), nil
}

func (h *specHandle) Save(specs []Spec) error {
	h.s.mu.Lock()
	if h.s.rev != h.seen {
		h.s.mu.Unlock()
		return fmt.Errorf("save at revision %d, stored %d: %w", h.seen, h.s.rev, ErrConflict)
	}
	h.s.rev++
	h.seen = h.s.rev
	h.s.specs = append([]Spec(nil), specs...)
	var tell []*specHandle
	for _, o := range h.s.nodes {
		if o != h {
			tell = append(tell, o)
		}
	}
	rev := h.s.rev
	h.s.mu.Unlock()
	for _, o := range tell {
		o.deliver(rev, specs)
	}
	return nil
}

func (h *specHandle) deliver(rev int, specs []Spec) {
	h.s.mu.Lock()
	if h.hold {
		h.pending = append(h.pending, specs)
		h.s.mu.Unlock()
		return
	}
	h.seen = rev
	fn := h.fn
	h.s.mu.Unlock()
	if fn != nil {
		fn(specs)
	}
}

func (h *specHandle) Watch(fn func([]Spec)) (func(), error) {
	h.s.mu.Lock()
	h.fn = fn
	h.s.mu.Unlock()
	return func() {
		h.s.mu.Lock()
		h.fn = nil
		h.s.mu.Unlock()
	}, nil
}

// TestAPIDispatchersSharedAcrossNodes: a dispatcher created, paused and
// deleted through one node's admin API is created, paused and deleted on
// the other node too; a change based on a list another node changed in the
// meantime is refused with 409 CONFLICT and stores nothing.
func TestAPIDispatchersSharedAcrossNodes(t *testing.T) {
	shared := &sharedSpecs{}
	hb := shared.node()
	a := startAdminWith(t, newRegistry(t), shared.node())
	b := startAdminWith(t, newRegistry(t), hb)
	consumer, _ := nackServer(t)

	a.must(http.MethodPost, "/mmmq/dispatchers", fmt.Sprintf(`{"name":"orders","host":%q,"patterns":["order.*"]}`, consumer.URL), http.StatusCreated, nil)
	var got Listed
	b.must(http.MethodGet, "/mmmq/dispatchers/orders", "", http.StatusOK, &got)
	if got.Source != "api" || strings.Join(got.Patterns, ",") != "order.*" {
		t.Fatalf("node b sees %+v, want the api dispatcher orders on order.*", got)
	}

	b.must(http.MethodPost, "/mmmq/dispatchers/orders/pause", "", http.StatusOK, nil)
	if !a.m.Paused("orders") {
		t.Error("pause through node b did not pause the dispatcher on node a")
	}

	hb.s.mu.Lock()
	hb.hold = true // node b does not hear of node a's next change in time
	hb.s.mu.Unlock()
	a.must(http.MethodPost, "/mmmq/dispatchers/orders/resume", "", http.StatusOK, nil)
	st, body := b.call(http.MethodDelete, "/mmmq/dispatchers/orders", "")
	if st != http.StatusConflict || !strings.Contains(body, `"CONFLICT"`) {
		t.Fatalf("delete through node b on a stale list: %d %s, want 409 CONFLICT", st, body)
	}
	if _, ok := a.a.set.Get("orders"); !ok {
		t.Fatal("a refused delete removed the dispatcher on node a")
	}

	a.must(http.MethodDelete, "/mmmq/dispatchers/orders", "", http.StatusOK, nil)
	hb.s.mu.Lock()
	hb.hold = false
	pending := hb.pending
	hb.pending = nil
	hb.seen = hb.s.rev
	fn := hb.fn
	hb.s.mu.Unlock()
	for _, specs := range pending {
		fn(specs)
	}
	if _, ok := b.a.set.Get("orders"); ok {
		t.Error("node b still runs the dispatcher deleted through node a")
	}
}
