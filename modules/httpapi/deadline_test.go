package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

func TestSharedDeadlines(t *testing.T) {
	d := sharedDeadlines{timeout: 30 * time.Second}
	base := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	c1 := d.get(base.Add(10 * time.Millisecond))
	dl, ok := c1.Deadline()
	if !ok || dl.Before(base.Add(10*time.Millisecond+30*time.Second)) || dl.After(base.Add(10*time.Millisecond+30*time.Second+deadlineTick)) {
		t.Fatalf("deadline %v for a call at +10ms with a 30s timeout", dl)
	}
	if c2 := d.get(base.Add(90 * time.Millisecond)); c2 != c1 {
		t.Fatal("a call in the same tick got a context of its own")
	}
	c3 := d.get(base.Add(120 * time.Millisecond))
	if c3 == c1 {
		t.Fatal("a call in the next tick got a context that ends too early")
	}
	if dl3, _ := c3.Deadline(); dl3.Before(base.Add(120*time.Millisecond + 30*time.Second)) {
		t.Fatalf("deadline %v is less than the timeout after the call", dl3)
	}

	// A real short timeout ends the context.
	short := sharedDeadlines{timeout: 50 * time.Millisecond}
	start := time.Now()
	ctx := short.get(start)
	select {
	case <-ctx.Done():
		if el := time.Since(start); el < 50*time.Millisecond {
			t.Fatalf("ended after %v, before the timeout", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the shared context never ended")
	}
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("err %v, want DeadlineExceeded", ctx.Err())
	}
}

// TestPublishTimeoutWhileDiskHangs: with fsync stuck, a DURABLE publish is
// answered 503 TIMEOUT after PublishTimeout (plus at most one tick), never
// 200, and never waits for the disk.
func TestPublishTimeoutWhileDiskHangs(t *testing.T) {
	fsys := vfs.NewMem()
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	s := New(Options{PublishTimeout: 300 * time.Millisecond}, reg, nil, zap.NewNop())
	h := s.Handler()
	publish := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/messages",
			bytes.NewReader([]byte(`{"topic":"t.hang","content":{"x":1}}`))))
		return rec
	}
	if rec := publish(); rec.Code != http.StatusOK {
		t.Fatalf("first publish: %d %s", rec.Code, rec.Body)
	}
	unblock := blockOn(fsys, vfs.OpSync)
	defer func() {
		unblock()
		reg.Close()
	}()
	start := time.Now()
	recc := make(chan *httptest.ResponseRecorder, 1)
	go func() { recc <- publish() }()
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-recc:
	case <-time.After(5 * time.Second):
		t.Fatal("publish still waiting for the hung disk after 5s with a 300ms publish timeout")
	}
	el := time.Since(start)
	var body struct{ Acknowledgement, Code, Error string }
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != http.StatusServiceUnavailable || body.Acknowledgement != "NACK" || body.Code != contract.CodeTimeout {
		t.Fatalf("publish while fsync hangs: HTTP %d %s", rec.Code, rec.Body)
	}
	if el < 300*time.Millisecond || el > 300*time.Millisecond+deadlineTick+2*time.Second {
		t.Fatalf("answered after %v with a 300ms publish timeout", el)
	}
	unblock()
}

// A batch whose topics cannot be created in time (the directory fsync of a
// new topic hangs) is answered by the publish deadline, 503 TIMEOUT for
// those topics, instead of waiting for the disk until net/http's write
// timeout drops the connection without any reply.
func TestBatchTimeoutWhileTopicCreationHangs(t *testing.T) {
	fsys := vfs.NewMem()
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	s := New(Options{PublishTimeout: 300 * time.Millisecond}, reg, nil, zap.NewNop())
	unblock := blockOn(fsys, vfs.OpSyncDir)
	defer func() {
		unblock()
		reg.Close()
	}()
	recc := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/messages/batch",
			bytes.NewReader([]byte(`[{"topic":"new.a","content":1},{"topic":"new.b","content":2}]`))))
		recc <- rec
	}()
	var rec *httptest.ResponseRecorder
	select {
	case rec = <-recc:
	case <-time.After(5 * time.Second):
		t.Fatal("batch still waiting for topic creation after 5s with a 300ms publish timeout")
	}
	var body struct {
		Acknowledgement, Code string
		Results               []struct{ Status int }
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if rec.Code != http.StatusServiceUnavailable || body.Acknowledgement != "NACK" || len(body.Results) != 2 ||
		body.Code != contract.CodeTimeout || body.Results[0].Status != http.StatusServiceUnavailable || body.Results[1].Status != http.StatusServiceUnavailable {
		t.Fatalf("batch while topic creation hangs: HTTP %d %s", rec.Code, rec.Body)
	}
}

// blockOn makes every op on fsys wait until the returned unblock is
// called (once or more); unblock also removes the hook.
func blockOn(fsys *vfs.MemFS, op vfs.Op) (unblock func()) {
	release := make(chan struct{})
	var once sync.Once
	fsys.SetHook(func(o vfs.Op, name string) error {
		if o == op {
			<-release
		}
		return nil
	})
	return func() {
		once.Do(func() { close(release) })
		fsys.SetHook(nil)
	}
}
