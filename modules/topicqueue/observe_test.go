package topicqueue

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/internal/allocs"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// observation is one ObservePublish call.
type observation struct {
	level    contract.AckLevel
	messages int
	d        time.Duration
}

// recorder is a PublishObserver keeping every call.
type recorder struct {
	mu  sync.Mutex
	got []observation
}

func (r *recorder) ObservePublish(level contract.AckLevel, messages int, d time.Duration) {
	r.mu.Lock()
	r.got = append(r.got, observation{level, messages, d})
	r.mu.Unlock()
}

// take returns the calls so far and forgets them.
func (r *recorder) take() []observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// TestPublishObserverSeesEveryAnsweredPublish: every successful publish
// call is observed once, with the level asked for and the number of its
// messages (duplicates of the window included), through
// PublishMessages, PublishMessagesNotify and TopicQueue.Publish; refused
// and failed publishes are not observed.
func TestPublishObserverSeesEveryAnsweredPublish(t *testing.T) {
	fsys := vfs.NewMem()
	log := zaptest.NewLogger(t)
	rec := &recorder{}
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys, Logger: log},
		Dedup: dedup.New(dedup.Options{Window: time.Minute, Logger: log}), PublishObserver: rec})
	t.Cleanup(func() { reg.Close() })
	ctx := context.Background()
	publish := func(level contract.AckLevel, msgs ...Message) error {
		_, err := reg.PublishMessages(ctx, "t", msgs, level, make([]Published, len(msgs)))
		return err
	}
	check := func(what string, want ...observation) {
		t.Helper()
		got := rec.take()
		if len(got) != len(want) {
			t.Fatalf("%s: observed %+v, want %+v", what, got, want)
		}
		for i, o := range got {
			if o.level != want[i].level || o.messages != want[i].messages || o.d < 0 {
				t.Fatalf("%s: observed %+v, want %+v", what, got, want)
			}
		}
	}

	for _, level := range []contract.AckLevel{contract.Accepted, contract.Written, contract.Durable} {
		if err := publish(level, msg(t, "t", "", `1`)); err != nil {
			t.Fatal(err)
		}
		check(level.String(), observation{level: level, messages: 1})
	}
	if err := publish(contract.Durable, msg(t, "t", "a", `1`), msg(t, "t", "b", `2`), msg(t, "t", "a", `3`)); err != nil {
		t.Fatal(err)
	}
	check("a batch of 3 with a duplicate in it", observation{level: contract.Durable, messages: 3})
	if err := publish(contract.Written, msg(t, "t", "a", `4`), msg(t, "t", "b", `5`)); err != nil {
		t.Fatal(err)
	}
	check("duplicates only", observation{level: contract.Written, messages: 2})

	done := make(chan error, 1)
	if _, err := reg.PublishMessagesNotify(ctx, "t", []Message{msg(t, "t", "", `6`)}, contract.Durable, make([]Published, 1), func(err error) { done <- err }); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	check("PublishMessagesNotify", observation{level: contract.Durable, messages: 1})
	q, _ := reg.Get("t")
	if err := q.Publish(ctx, []Message{msg(t, "t", "", `7`), msg(t, "t", "", `8`)}, contract.Accepted, make([]Published, 2)); err != nil {
		t.Fatal(err)
	}
	check("TopicQueue.Publish", observation{level: contract.Accepted, messages: 2})

	if _, err := reg.PublishMessages(ctx, "no/such topic", []Message{msg(t, "t", "", `9`)}, contract.Durable, make([]Published, 1)); !errors.Is(err, ErrInvalidName) {
		t.Fatalf("invalid topic name: %v", err)
	}
	check("a refused publish")
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, storage.SegmentExt) {
			return errors.New("injected EIO")
		}
		return nil
	})
	if err := publish(contract.Durable, msg(t, "t", "", `10`)); err == nil {
		t.Fatal("a publish whose fsync fails succeeded")
	}
	check("a failed publish")
}

// TestPublishObserverAllocatesNothing: a DURABLE publish of one message
// allocates no more with an observer than without (the clock reads and
// the call allocate nothing).
func TestPublishObserverAllocatesNothing(t *testing.T) {
	measure := func(obs PublishObserver) float64 {
		reg := New(Options{Root: t.TempDir(), Storage: storage.Options{Logger: zap.NewNop()}, PublishObserver: obs})
		defer reg.Close()
		ctx := context.Background()
		msgs := []Message{msg(t, "t", "", `"x"`)}
		out := make([]Published, 1)
		publish := func() {
			if _, err := reg.PublishMessages(ctx, "t", msgs, contract.Durable, out); err != nil {
				t.Fatal(err)
			}
		}
		publish() // the topic is created
		return allocs.Least(5, 1000, publish)
	}
	without, with := measure(nil), measure(nopObserver{})
	// One more allocation per publish adds 1 to the mean; noise (the race
	// detector's pool drops among it) a few hundredths.
	t.Logf("with %.2f without %.2f", with, without)
	if with >= without+0.5 {
		t.Fatalf("a publish allocates %.2f times with an observer, %.2f without", with, without)
	}
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) ObservePublish(contract.AckLevel, int, time.Duration) {}
