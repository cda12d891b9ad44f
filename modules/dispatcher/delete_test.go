package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestTopicDeletionStopsWorkers: deleting a topic stops its worker, even
// in the middle of an attempt the consumer never answers, and forgets it
// (Status no longer lists it); pushes carry the topic's incarnation id; a
// topic created again under the same name is delivered from offset 0 with
// a new incarnation id.
func TestTopicDeletionStopsWorkers(t *testing.T) {
	reg := topicqueue.New(topicqueue.Options{Root: "/data", Storage: storage.Options{FS: vfs.NewMem(), Logger: zaptest.NewLogger(t)}})
	t.Cleanup(func() { _ = reg.Close() })
	publish := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			p := []byte(fmt.Sprintf(`{"topic":{"name":"t"},"content":%d}`, i))
			if _, _, err := reg.Publish(context.Background(), "t", [][]byte{p}, contract.Durable); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(3)
	oldQ, _ := reg.Get("t")
	old := oldQ.Incarnation()
	hung := make(chan struct{}, 1)
	c := newConsumer(t, func(r received, w http.ResponseWriter, req *http.Request) {
		if r.Incarnation == old && r.Offset == 3 {
			hung <- struct{}{}
			<-req.Context().Done() // never answers; the worker must give up
			return
		}
		answer(w, ACK)
	})
	m := startManager(t, RegistrySource(reg), testOptions(), New("d", c.host(t), MustPattern("t")))
	waitCommitted(t, m, "d", "t", 3)
	publish(1)
	<-hung
	if err := reg.Delete("t"); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); len(st) != 0 {
		t.Fatalf("workers after the deletion: %+v, want none", st)
	}
	publish(2)
	waitCommitted(t, m, "d", "t", 2)
	newQ, _ := reg.Get("t")
	var got []string
	for _, r := range c.requests() {
		got = append(got, fmt.Sprintf("%s/%d", r.Incarnation, r.Offset))
	}
	want := []string{old + "/0", old + "/1", old + "/2", old + "/3", newQ.Incarnation() + "/0", newQ.Incarnation() + "/1"}
	if fmt.Sprint(got) != fmt.Sprint(want) || newQ.Incarnation() == old {
		t.Fatalf("pushes (incarnation/offset):\n got %v\nwant %v", got, want)
	}
}
