package topicqueue

import (
	"fmt"
	"sort"
	"sync"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dedup"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Options configures a Registry.
type Options struct {
	// Root is the data root directory (mmmq.broker.storage.root-dir) of
	// the default local backend.
	Root string
	// MaxTopics caps the number of open topics (each holds two open files
	// for its active segment, see storage.SegmentCache); 0 means 10000.
	MaxTopics int
	// Storage is the template for every topic's log (FS, Logger, sizes) of
	// the default local backend; its Logger is also the registry's.
	Storage storage.Options
	// Backend opens the topics; nil means &LocalBackend{Root, Storage}.
	Backend Backend
	// Dedup is the idempotent-publish window (mmmq.broker.dedup); nil
	// stores every message, whatever its id.
	Dedup *dedup.Tracker
	// PublishObserver, when set, is told how long every successful
	// publish took to be answered, per ack level (PublishObserver); nil
	// observes nothing (no clock read).
	PublishObserver PublishObserver
}

// Registry holds every open TopicQueue by name. Lookups take a read lock.
// Opening or creating a topic (directory, files, a few fsyncs) runs outside
// the lock, so publishes to other topics never wait for it; concurrent
// callers for the same new topic wait for the one opening it.
type Registry struct {
	opts Options
	log  *zap.Logger

	mu          sync.RWMutex
	topics      map[string]*TopicQueue
	opening     map[string]*opening // topics being opened, counted in MaxTopics
	deleting    map[string]*opening // topics being deleted; creators wait for done
	quarantined map[string]error
	// recovered sums what startup recovery cut and indexed again over
	// every topic OpenAll opened (RecoveryCuts).
	recovered RecoveryCuts
	subs      map[int]func(*TopicQueue)
	delSubs   map[int]func(*TopicQueue)
	nextSub   int
	closed    bool
	// stopWatch ends the watch for topics created or deleted by other nodes
	// (watch.go); nil when there is none.
	stopWatch func()
}

// opening is one topic being opened; done is closed when q or err is set.
type opening struct {
	done chan struct{}
	q    *TopicQueue
	err  error
}

// New returns an empty registry over opts.Backend. Topics already stored
// are opened at startup by OpenAll (run by modules/recovery).
func New(opts Options) *Registry {
	if opts.MaxTopics <= 0 {
		opts.MaxTopics = 10000
	}
	if opts.Storage.FS == nil {
		opts.Storage.FS = vfs.OS{}
	}
	if opts.Backend == nil {
		opts.Backend = &LocalBackend{Root: opts.Root, Storage: opts.Storage}
	}
	l := opts.Storage.Logger
	if l == nil {
		l = zap.NewNop()
	}
	return &Registry{
		opts:        opts,
		log:         l,
		topics:      map[string]*TopicQueue{},
		opening:     map[string]*opening{},
		deleting:    map[string]*opening{},
		quarantined: map[string]error{},
		subs:        map[int]func(*TopicQueue){},
		delSubs:     map[int]func(*TopicQueue){},
	}
}

// Root is the data root directory of the local backend.
func (r *Registry) Root() string { return r.opts.Root }

// FS is the filesystem of the local backend's logs.
func (r *Registry) FS() vfs.FS { return r.opts.Storage.FS }

// Backend is where the registry's topics live.
func (r *Registry) Backend() Backend { return r.opts.Backend }

// Lock takes the backend's exclusive lock (the data root's .lock for the
// local backend); see Backend.Lock.
func (r *Registry) Lock() (release func() error, err error) { return r.opts.Backend.Lock() }

// Get returns the open topic name, if any.
func (r *Registry) Get(name string) (*TopicQueue, bool) {
	r.mu.RLock()
	q, ok := r.topics[name]
	r.mu.RUnlock()
	return q, ok
}

// GetOrCreate returns topic name, creating it (directory, first segment,
// fsyncs) when it does not exist yet: the original Java mmmq's "dynamic
// TopicQueue creation". A new topic is announced to every subscriber. While
// a topic of that name is being deleted (Delete) it waits for the deletion
// to finish, then creates the topic anew (offset 0, new incarnation id).
// Errors:
// ErrInvalidName (nothing is created on disk), ErrQuarantined,
// ErrTooManyTopics, ErrClosed, or a storage error.
func (r *Registry) GetOrCreate(name string) (*TopicQueue, error) {
	if q, ok := r.Get(name); ok {
		return q, nil
	}
	if err := contract.ValidateTopic(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	return r.open(name, true)
}

// Room is how many more topics may be created now under
// mmmq.broker.storage.max-topics (topics open or being opened count), at
// least 0. Concurrent creations may take it: GetOrCreate still decides.
func (r *Registry) Room() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.opts.MaxTopics-len(r.topics)-len(r.opening), 0)
}

// Open opens the existing topic name (startup recovery) and registers it.
// A corruption error of the backend is returned as is.
func (r *Registry) Open(name string) (*TopicQueue, error) {
	if err := contract.ValidateTopic(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	return r.open(name, false)
}

func (r *Registry) open(name string, announce bool) (*TopicQueue, error) {
	r.mu.Lock()
	for {
		d, ok := r.deleting[name]
		if !ok {
			break
		}
		// Created anew only once the old one is gone from the disk.
		r.mu.Unlock()
		<-d.done
		r.mu.Lock()
	}
	if q, ok := r.topics[name]; ok {
		r.mu.Unlock()
		return q, nil
	}
	if o, ok := r.opening[name]; ok {
		r.mu.Unlock()
		<-o.done
		return o.q, o.err
	}
	switch {
	case r.closed:
		r.mu.Unlock()
		return nil, ErrClosed
	case r.quarantined[name] != nil:
		err := r.quarantined[name]
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %s: %v", ErrQuarantined, name, err)
	case len(r.topics)+len(r.opening) >= r.opts.MaxTopics:
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %d topics are open (mmmq.broker.storage.max-topics)", ErrTooManyTopics, r.opts.MaxTopics)
	}
	o := &opening{done: make(chan struct{})}
	r.opening[name] = o
	r.mu.Unlock()

	l, err := r.opts.Backend.Open(name, announce)

	r.mu.Lock()
	delete(r.opening, name)
	var subs []func(*TopicQueue)
	switch {
	case err != nil:
		o.err = err
	case r.closed: // Close waits for this opening, then closes what it finds
		_ = l.Close()
		o.err = ErrClosed
	default:
		o.q = &TopicQueue{name: name, log: l, dd: r.opts.Dedup.Open(name, l), obs: r.opts.PublishObserver}
		r.topics[name] = o.q
		subs = r.subscribers()
	}
	r.mu.Unlock()
	close(o.done)
	if o.err != nil {
		return nil, o.err
	}
	if announce {
		r.log.Info("topic created", zap.String("topic", name))
	}
	for _, fn := range subs {
		fn(o.q)
	}
	return o.q, nil
}

func (r *Registry) subscribers() []func(*TopicQueue) { return sortedSubs(r.subs) }

func sortedSubs(subs map[int]func(*TopicQueue)) []func(*TopicQueue) {
	ids := make([]int, 0, len(subs))
	for id := range subs {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]func(*TopicQueue), len(ids))
	for i, id := range ids {
		out[i] = subs[id]
	}
	return out
}

// Quarantine records that topic name was refused by recovery (err says
// why); it is excluded from List and publishing to it fails with
// ErrQuarantined, while the rest of the broker runs.
func (r *Registry) Quarantine(name string, err error) {
	r.mu.Lock()
	r.quarantined[name] = err
	r.mu.Unlock()
}

// Quarantined returns the quarantined topics and why, by name.
func (r *Registry) Quarantined() map[string]error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make(map[string]error, len(r.quarantined))
	for k, v := range r.quarantined {
		out[k] = v
	}
	return out
}

// List returns the open topics sorted by name.
func (r *Registry) List() []*TopicQueue {
	r.mu.RLock()
	out := make([]*TopicQueue, 0, len(r.topics))
	for _, q := range r.topics {
		out = append(out, q)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// Subscribe calls fn for every open topic, then for every topic opened later
// (the "TopicQueue initialisation event" of the original Java mmmq), each
// exactly once, until cancel is called. fn runs on the creating goroutine and
// must not block for long.
func (r *Registry) Subscribe(fn func(*TopicQueue)) (cancel func()) {
	r.mu.Lock()
	id := r.nextSub
	r.nextSub++
	r.subs[id] = fn
	existing := make([]*TopicQueue, 0, len(r.topics))
	for _, q := range r.topics {
		existing = append(existing, q)
	}
	r.mu.Unlock()
	sort.Slice(existing, func(i, j int) bool { return existing[i].name < existing[j].name })
	for _, q := range existing {
		fn(q)
	}
	return func() {
		r.mu.Lock()
		delete(r.subs, id)
		r.mu.Unlock()
	}
}

// Close closes every topic's log (each finishes what was already queued)
// and refuses new topics. Call it after dispatchers and the HTTP server
// have stopped.
func (r *Registry) Close() error {
	r.mu.Lock()
	stop := r.stopWatch
	r.stopWatch = nil
	r.mu.Unlock()
	if stop != nil {
		stop() // before closed is set: no open is waited for after this
	}
	r.mu.Lock()
	r.closed = true
	pending := make([]*opening, 0, len(r.opening)+len(r.deleting))
	for _, o := range r.opening {
		pending = append(pending, o)
	}
	for _, o := range r.deleting {
		pending = append(pending, o)
	}
	r.mu.Unlock()
	// A topic being opened finishes and, seeing closed, closes its log; a
	// topic being deleted finishes its deletion.
	for _, o := range pending {
		<-o.done
	}
	r.mu.Lock()
	topics := make([]*TopicQueue, 0, len(r.topics))
	for _, q := range r.topics {
		topics = append(topics, q)
	}
	r.mu.Unlock()
	var first error
	for _, q := range topics {
		q.dd.Close()
		if err := q.log.Close(); err != nil && first == nil {
			first = fmt.Errorf("close topic %s: %w", q.name, err)
		}
	}
	return first
}
