package schedule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
)

// With the local backend, NewFromConfig keeps the store under
// <root>/.scheduled and moves due messages into the registry's topics
// (created when needed), at a new offset.
func TestNewFromConfigLocal(t *testing.T) {
	root := t.TempDir()
	reg := topicqueue.New(topicqueue.Options{Root: root})
	defer reg.Close()
	s := NewFromConfig(Params{Schedule: ConfigSection.Default(), Logger: zaptest.NewLogger(t), Registry: reg})
	if s.opts.Unsupported != "" || s.opts.Dir != filepath.Join(root, Dir) {
		t.Fatalf("unsupported %q, dir %q", s.opts.Unsupported, s.opts.Dir)
	}
	clk := &fakeClock{t: time.Now()}
	s.opts.Now = clk.Now
	if err := s.Open(); err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, s)
	ctx := context.Background()
	if _, err := s.Schedule(ctx, "a.b", []byte(`{"topic":{"name":"a.b"},"content":1}`), clk.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, ok := reg.Get("a.b"); ok {
		t.Fatal("topic created before the message was due")
	}
	clk.Add(2 * time.Minute)
	if n, _, err := s.MoveDue(ctx); err != nil || n != 1 {
		t.Fatalf("moved %d, err %v", n, err)
	}
	q, ok := reg.Get("a.b")
	if !ok || q.Stats().NextOffset != 1 {
		t.Fatalf("topic after the move: %v", ok)
	}
}

// With another backend (JetStream), scheduled publishes and cancels are
// 501 NOT_IMPLEMENTED and nothing is written.
func TestNewFromConfigOtherBackend(t *testing.T) {
	reg := topicqueue.New(topicqueue.Options{Root: t.TempDir(), Backend: &topicqueuetest.MemBackend{}})
	defer reg.Close()
	s := NewFromConfig(Params{Schedule: ConfigSection.Default(), Logger: zaptest.NewLogger(t), Registry: reg})
	if s.opts.Unsupported == "" {
		t.Fatal("a non-local backend is not refused")
	}
	if _, err := s.Schedule(context.Background(), "t", []byte(`{}`), time.Now().Add(time.Hour)); contract.Classify(err).Status != http.StatusNotImplemented {
		t.Fatalf("Schedule: %v", err)
	}
	r := mux.NewRouter()
	NewRoute(s).Register(r)
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/topics/t/scheduled/1-0000000000000000", nil))
	if rec.Code != http.StatusNotImplemented {
		t.Fatalf("cancel: HTTP %d %s", rec.Code, rec.Body)
	}
}
