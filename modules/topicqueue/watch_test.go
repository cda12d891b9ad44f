package topicqueue_test

import (
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// watchingBackend is a local backend whose "other node" creates topics
// (created) and reports them to the watch.
type watchingBackend struct {
	*topicqueue.LocalBackend
	mu      sync.Mutex
	fn      func(string)
	stopped bool
}

func (b *watchingBackend) WatchTopics(fn func(string)) (func(), error) {
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
	b.mu.Lock()
	fn := b.fn
	b.mu.Unlock()
	if fn != nil {
		fn(name)
	}
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
	if _, err := reg.OpenAll(config.OnCorruptionFail, zaptest.NewLogger(t)); err != nil {
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
