package topicqueue

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// slowCreate makes the creation of topic "slow" stop at its first file until
// release is called; reached is closed once it is stuck there.
func slowCreate(fsys *vfs.MemFS) (reached <-chan struct{}, release func()) {
	r, gate := make(chan struct{}), make(chan struct{})
	var once, reachOnce sync.Once
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpCreate && strings.Contains(name, "/slow/") {
			reachOnce.Do(func() { close(r) })
			<-gate
		}
		return nil
	})
	return r, func() { once.Do(func() { close(gate) }) }
}

func within(t *testing.T, what string, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v while another topic was being created", what, d)
	}
}

// TestCreatingATopicDoesNotBlockOthers: a topic whose files are slow to
// create (fsyncs on a busy disk) holds up no lookup or publish of other
// topics; a second caller for the same topic waits and gets the same queue.
func TestCreatingATopicDoesNotBlockOthers(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	fast, err := reg.GetOrCreate("fast")
	if err != nil {
		t.Fatal(err)
	}
	reached, release := slowCreate(fsys)
	defer release()
	type res struct {
		q   *TopicQueue
		err error
	}
	first, second := make(chan res, 1), make(chan res, 1)
	go func() { q, err := reg.GetOrCreate("slow"); first <- res{q, err} }()
	<-reached
	go func() { q, err := reg.GetOrCreate("slow"); second <- res{q, err} }()

	within(t, "Get of an open topic", 2*time.Second, func() {
		if q, ok := reg.Get("fast"); !ok || q != fast {
			t.Error("Get(fast) lost the topic")
		}
	})
	within(t, "GetOrCreate of another new topic", 2*time.Second, func() {
		if _, err := reg.GetOrCreate("other"); err != nil {
			t.Error(err)
		}
	})
	within(t, "List", 2*time.Second, func() {
		for _, q := range reg.List() {
			if q.Name() == "slow" {
				t.Error("List shows a topic that is still being created")
			}
		}
	})
	select {
	case r := <-second:
		t.Fatalf("second GetOrCreate(slow) returned before the topic existed: %v %v", r.q, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	r1, r2 := <-first, <-second
	if r1.err != nil || r2.err != nil || r1.q == nil || r1.q != r2.q {
		t.Fatalf("GetOrCreate(slow) twice: %p %v / %p %v, want one queue", r1.q, r1.err, r2.q, r2.err)
	}
}

func TestTopicsBeingCreatedCountTowardMaxTopics(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", MaxTopics: 2, Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	if _, err := reg.GetOrCreate("fast"); err != nil {
		t.Fatal(err)
	}
	reached, release := slowCreate(fsys)
	defer release()
	done := make(chan error, 1)
	go func() { _, err := reg.GetOrCreate("slow"); done <- err }()
	<-reached
	within(t, "GetOrCreate over the limit", 2*time.Second, func() {
		if _, err := reg.GetOrCreate("third"); !errors.Is(err, ErrTooManyTopics) {
			t.Errorf("third topic while the second is being created, max 2: %v", err)
		}
	})
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCloseWaitsForATopicBeingCreated: Close returns only after the topic
// being created has been closed again, and its creator gets ErrClosed.
func TestCloseWaitsForATopicBeingCreated(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	reached, release := slowCreate(fsys)
	defer release()
	created := make(chan error, 1)
	go func() { _, err := reg.GetOrCreate("slow"); created <- err }()
	<-reached
	closed := make(chan error, 1)
	go func() { closed <- reg.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a topic was still being created", err)
	case <-time.After(50 * time.Millisecond):
	}
	release()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if err := <-created; !errors.Is(err, ErrClosed) {
		t.Fatalf("creation finished after Close: %v, want ErrClosed", err)
	}
	if _, ok := reg.Get("slow"); ok {
		t.Fatal("a topic created during Close is registered")
	}
}

// TestFailedCreationReachesEveryWaiter: when creating a topic fails, the
// caller that was waiting for it gets the same error, and a later call
// tries again (nothing is cached).
func TestFailedCreationReachesEveryWaiter(t *testing.T) {
	fsys := vfs.NewMem()
	reg := New(Options{Root: "/data", Storage: storage.Options{FS: fsys}})
	defer reg.Close()
	boom := errors.New("disk said no")
	reached, gate := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpCreate && strings.Contains(name, "/slow/") {
			once.Do(func() { close(reached) })
			<-gate
			return boom
		}
		return nil
	})
	first, second := make(chan error, 1), make(chan error, 1)
	go func() { _, err := reg.GetOrCreate("slow"); first <- err }()
	<-reached
	go func() { _, err := reg.GetOrCreate("slow"); second <- err }()
	time.Sleep(20 * time.Millisecond) // let the second caller start waiting
	close(gate)
	if e1, e2 := <-first, <-second; !errors.Is(e1, boom) || !errors.Is(e2, boom) {
		t.Fatalf("failed creation: first %v, waiter %v; want both %v", e1, e2, boom)
	}
	fsys.SetHook(nil)
	if q, err := reg.GetOrCreate("slow"); err != nil || q == nil {
		t.Fatalf("retry after the failure: %v", err)
	}
}
