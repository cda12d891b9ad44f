package topicqueue_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// watchingBackend is a local backend whose "other node" creates and
// deletes topics and reports them to the watch. It counts its Delete calls.
type watchingBackend struct {
	*topicqueue.LocalBackend
	mu      sync.Mutex
	fn      func(contract.TopicEvent)
	stopped bool
	deletes int
}

func (b *watchingBackend) Delete(name string) (bool, error) {
	b.mu.Lock()
	b.deletes++
	b.mu.Unlock()
	return b.LocalBackend.Delete(name)
}

func (b *watchingBackend) report(ev contract.TopicEvent) {
	b.mu.Lock()
	fn := b.fn
	b.mu.Unlock()
	if fn != nil {
		fn(ev)
	}
}

func (b *watchingBackend) WatchTopics(fn func(contract.TopicEvent)) (func(), error) {
	b.mu.Lock()
	b.fn = fn
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.stopped, b.fn = true, nil
		b.mu.Unlock()
	}, nil
}

// createElsewhere makes topic name in the store, as another node would,
// and reports it as the watch does.
func (b *watchingBackend) createElsewhere(t *testing.T, name string) {
	t.Helper()
	l, err := b.LocalBackend.Open(name, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b.report(contract.TopicEvent{Name: name})
}

// TestWatchOpensTopicsCreatedElsewhere: after startup recovery, a topic
// created through another node is opened here and announced to the
// subscribers (the dispatchers), once; Close stops the watch.
func TestWatchOpensTopicsCreatedElsewhere(t *testing.T) {
	root := t.TempDir()
	b := &watchingBackend{LocalBackend: &topicqueue.LocalBackend{Root: root, Storage: storage.Options{Logger: zaptest.NewLogger(t)}}}
	reg := topicqueue.New(topicqueue.Options{Root: root, Backend: b})
	var mu sync.Mutex
	var seen []string
	cancel := reg.Subscribe(func(q *topicqueue.TopicQueue) {
		mu.Lock()
		seen = append(seen, q.Name())
		mu.Unlock()
	})
	defer cancel()
	if _, err := reg.OpenAll(topicqueue.OnCorruptionFail, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	b.createElsewhere(t, "made.on.b")
	b.createElsewhere(t, "made.on.b") // reported twice: announced once
	if _, ok := reg.Get("made.on.b"); !ok {
		t.Fatal("topic created through another node is not open here")
	}
	mu.Lock()
	got := append([]string(nil), seen...)
	mu.Unlock()
	if len(got) != 1 || got[0] != "made.on.b" {
		t.Fatalf("subscribers saw %v, want [made.on.b] once", got)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	stopped := b.stopped
	b.mu.Unlock()
	if !stopped {
		t.Error("Close did not stop the watch")
	}
}

// TestWatchForgetsTopicsDeletedElsewhere: a deletion reported by the watch
// takes the topic out of the registry, tells the delete subscribers and
// closes the log, without deleting anything through the backend (the other
// node did); a stale deletion (another incarnation) is ignored; a deleted
// quarantined topic leaves quarantine; and a later publish creates the
// topic anew, from offset 0 with a new incarnation.
func TestWatchForgetsTopicsDeletedElsewhere(t *testing.T) {
	root := t.TempDir()
	b := &watchingBackend{LocalBackend: &topicqueue.LocalBackend{Root: root, Storage: storage.Options{Logger: zaptest.NewLogger(t)}}}
	reg := topicqueue.New(topicqueue.Options{Root: root, Backend: b})
	defer reg.Close()
	var mu sync.Mutex
	var told []string
	cancel := reg.SubscribeDeletes(func(q *topicqueue.TopicQueue) {
		mu.Lock()
		told = append(told, q.Name())
		mu.Unlock()
	})
	defer cancel()
	if _, err := reg.OpenAll(topicqueue.OnCorruptionFail, zaptest.NewLogger(t)); err != nil {
		t.Fatal(err)
	}
	b.createElsewhere(t, "gone.on.b")
	old, ok := reg.Get("gone.on.b")
	if !ok {
		t.Fatal("topic created through another node is not open here")
	}
	msg := [][]byte{[]byte(`{"topic":{"name":"gone.on.b"},"content":1}`)}
	if _, _, err := reg.Publish(context.Background(), "gone.on.b", msg, contract.Durable); err != nil {
		t.Fatal(err)
	}

	b.report(contract.TopicEvent{Name: "gone.on.b", Deleted: true, Incarnation: "another-incarnation"})
	if _, ok := reg.Get("gone.on.b"); !ok || old.Deleted() {
		t.Fatal("a deletion of another incarnation closed the open topic")
	}

	b.report(contract.TopicEvent{Name: "gone.on.b", Deleted: true, Incarnation: old.Incarnation()})
	if _, ok := reg.Get("gone.on.b"); ok {
		t.Fatal("topic deleted through another node is still open here")
	}
	if !old.Deleted() {
		t.Error("the forgotten topic is not marked deleted")
	}
	if _, err := old.Read(0); err == nil {
		t.Error("the forgotten topic's log still reads: not closed")
	}
	mu.Lock()
	gotTold := append([]string(nil), told...)
	mu.Unlock()
	if len(gotTold) != 1 || gotTold[0] != "gone.on.b" {
		t.Errorf("delete subscribers were told %v, want [gone.on.b]", gotTold)
	}
	b.mu.Lock()
	deletes := b.deletes
	b.mu.Unlock()
	if deletes != 0 {
		t.Errorf("the backend's Delete was called %d times for a topic deleted elsewhere", deletes)
	}

	// The other node removed the stored topic; a publish here creates it anew.
	if _, err := b.LocalBackend.Delete("gone.on.b"); err != nil {
		t.Fatal(err)
	}
	q, off, err := reg.Publish(context.Background(), "gone.on.b", msg, contract.Durable)
	if err != nil {
		t.Fatal(err)
	}
	if off != 0 || q == old || q.Incarnation() == old.Incarnation() {
		t.Errorf("publish after the deletion: offset %d, same topic %v, incarnation %q (old %q); want a new topic from 0",
			off, q == old, q.Incarnation(), old.Incarnation())
	}

	reg.Quarantine("bad.topic", errTest)
	b.report(contract.TopicEvent{Name: "bad.topic", Deleted: true})
	if _, ok := reg.Quarantined()["bad.topic"]; ok {
		t.Error("a quarantined topic deleted through another node is still quarantined")
	}
	b.report(contract.TopicEvent{Name: "never.seen", Deleted: true}) // nothing to forget
}

var errTest = errors.New("refused by recovery")
