package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/tracing"
)

// hostName is the host name, "localhost" when it cannot be read.
func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "localhost"
}

// Options tunes the Manager and the HTTPSender. The zero value means "all
// defaults"; WithDefaults fills zero fields. The defaults of the fields that
// are configuration keys (mmmq.broker.dispatch.*) are ConfigSection's;
// OptionsFromConfig maps that section to Options.
type Options struct {
	// MaxResends is how many times a NACKed message is sent again before the
	// worker logs it, commits past it and moves on (3 resends = 4 attempts
	// in all). Abnormal attempts do not count. A zero MaxResends is "unset"
	// (the default, 3) unless it was set explicitly with WithMaxResends or
	// OptionsFromConfig, which mark it set: then 0 means no resend (one
	// attempt). A negative value also means no resend.
	MaxResends int
	// BackoffInitial is the first wait after an abnormal response; each
	// further abnormal response doubles it. Default 1s.
	BackoffInitial time.Duration
	// BackoffMax caps the wait. Default 60s; raised to BackoffInitial when
	// smaller.
	BackoffMax time.Duration
	// DefaultTimeout bounds one delivery attempt of a dispatcher without its
	// own WithTimeout. Default 30s.
	DefaultTimeout time.Duration
	// MaxResponseBytes is the most of a consumer's response body read; a
	// longer body is abnormal. Default 65536 (64 KiB).
	MaxResponseBytes int64
	// DefaultPath is the path posted to when a dispatcher has no WithPath.
	// Default "/mmmq/messages".
	DefaultPath string
	// BatchSize is how many entries a worker reads from the log at once.
	// Default 256.
	BatchSize int
	// StopGrace is how long a stopping worker (broker stop, pause, seek,
	// replace) waits for the answers to the pushes it has in flight before
	// it abandons them: an answer that comes in time counts, so a consumer
	// that ACKed is not sent the message again after the restart. At most
	// the attempt timeout. Default 5s; negative: abandon at once.
	StopGrace time.Duration
	// UserAgent is the User-Agent of every push (a dispatcher's headers may
	// override it). Default "mmmq/" + contract.Version.
	UserAgent string
	// NodeName is this broker's name in CloudEvents pushes (ce-source
	// "mmmq://<NodeName>/<topic>"). Default the host name ("localhost" when
	// it cannot be read).
	NodeName string
	// InstanceID is this broker's instance id (contract.Instance), sent on
	// every push as mmmq-instance-id: the HTTP API of the broker that made
	// it refuses such a publish (508 LOOP), so a dispatcher pointed at its
	// own broker backs off instead of publishing every message again.
	// Module sets it; "" (the default) sends no such header.
	InstanceID string
	// Hooks are test-only crash-injection points; nil in production. Only
	// the crash-test build of app/mmmq (-tags crashpoints) sets them. A
	// pointer keeps Options comparable.
	Hooks *Hooks

	// resendsSet says MaxResends was set explicitly, so that 0 is kept.
	resendsSet bool
}

// Hooks are test-only injection points of the dispatch workers (like
// storage.Hooks for the write path). Each func is called, when non-nil, from
// the worker's goroutine.
type Hooks struct {
	// AfterAck is called right after the consumer ACKed offset of topic and
	// before the checkpoint is committed (written and fsynced).
	AfterAck func(dispatcher, topic string, offset int64)
	// AfterDeadLetter is called right after offset of topic was appended
	// (durably) to the dispatcher's dead-letter topic and before the
	// checkpoint moves past it.
	AfterDeadLetter func(dispatcher, topic string, offset int64)
}

// dispatchDefaults are the defaults of mmmq.broker.dispatch, the zero-value
// defaults of Options.
var dispatchDefaults = ConfigSection.Default()

// DefaultStopGrace is the default of Options.StopGrace (not a
// configuration key).
const DefaultStopGrace = 5 * time.Second

// DefaultBatchSize is the default of Options.BatchSize (not a configuration key).
const DefaultBatchSize = 256

// WithMaxResends returns o with MaxResends n, marked as set: 0 then means no
// resend instead of the default (a negative n also means no resend).
func (o Options) WithMaxResends(n int) Options {
	o.MaxResends = n
	o.resendsSet = true
	return o
}

// WithDefaults returns o with every unset field set to its default: zero
// durations, sizes, path and batch size, and a zero MaxResends not marked
// set (see MaxResends); a negative MaxResends becomes 0, marked set. It is
// idempotent.
func (o Options) WithDefaults() Options {
	switch {
	case o.MaxResends < 0:
		o = o.WithMaxResends(0)
	case o.MaxResends == 0 && !o.resendsSet:
		o.MaxResends = dispatchDefaults.MaxResends
	}
	if o.BackoffInitial <= 0 {
		o.BackoffInitial = dispatchDefaults.BackoffInitial
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = dispatchDefaults.BackoffMax
	}
	if o.BackoffMax < o.BackoffInitial {
		o.BackoffMax = o.BackoffInitial
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = dispatchDefaults.Timeout
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = dispatchDefaults.MaxResponseBytes
	}
	if o.DefaultPath == "" {
		o.DefaultPath = dispatchDefaults.Path
	}
	if o.BatchSize <= 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.StopGrace == 0 {
		o.StopGrace = DefaultStopGrace
	}
	if o.UserAgent == "" {
		o.UserAgent = "mmmq/" + contract.Version
	}
	if o.NodeName == "" {
		o.NodeName = hostName()
	}
	return o
}

// WorkerStatus is a snapshot of one (dispatcher, topic) worker, for the
// admin API and metrics. Counters count since the worker started.
type WorkerStatus struct {
	// Dispatcher is the dispatcher name.
	Dispatcher string
	// Topic is the topic name.
	Topic string
	// Committed is the durable checkpoint: the next offset to read after a
	// restart.
	Committed int64
	// Next is the offset being delivered, or the next one to arrive when the
	// worker is idle. Next - Committed messages are finished but uncommitted
	// (Interval commit policy) or in flight.
	Next int64
	// Delivered counts ACKed messages.
	Delivered uint64
	// Nacked counts NACK answers (every attempt, not messages).
	Nacked uint64
	// Exhausted counts messages moved past after MaxResends+1 NACKs, or
	// past the dispatcher's AbnormalLimit.
	Exhausted uint64
	// DeadLettered counts the exhausted messages appended to the
	// dispatcher's dead-letter topic (the others were logged and skipped:
	// dead letters off).
	DeadLettered uint64
	// Skipped counts corrupt offsets skipped.
	Skipped uint64
	// Expired counts messages retention deleted before the worker read
	// them (mmmq_retention_skipped_total{kind="dispatcher"}).
	Expired uint64
	// TTLExpired counts messages past their expiresAt (the ttl they were
	// published with) finished without a push: skipped, or dead-lettered
	// under expired: dead-letter (then DeadLettered counts them too).
	TTLExpired uint64
	// Abnormal counts abnormal attempts (transport errors, timeouts,
	// non-2xx, bad bodies).
	Abnormal uint64
	// Commits counts successful checkpoint commits (each one an fsync).
	Commits uint64
	// Backoff is true while the current message is being retried after an
	// abnormal response.
	Backoff bool
	// Running is false once the worker has ended (manager stopped, topic
	// closed, or a failure, see Err).
	Running bool
	// Err is why the worker ended on its own ("" otherwise), e.g. a failed
	// commit (fsync).
	Err string
	// State is StateDelivering, StateBackoff, StateNackResend, StateIdle or
	// StatePaused (a paused dispatcher's workers are stopped; Status
	// reports its last state as paused).
	State string
	// Attempt is the attempt number of the message at Next (1 = first
	// send); 0 when idle.
	Attempt int
	// HighWatermark is the topic's high watermark when the snapshot was
	// taken; Lag = HighWatermark - Committed, never below 0.
	HighWatermark, Lag int64
	// LastError is the last abnormal answer, NACK or failure, and
	// LastErrorAt when it happened (zero when none since the worker started).
	LastError   string
	LastErrorAt time.Time
	// LeaseEpoch is the epoch of the lease under which this node delivers
	// the topic (a backend shared by several nodes; the mmmq-lease-epoch
	// header of its pushes); 0 when no lease is held or needed.
	LeaseEpoch uint64
	// NextRetry is when the next attempt is due while backing off (zero
	// otherwise).
	NextRetry time.Time
	// OldestUnacked is the stored timestamp of the message at Next, the
	// oldest one not yet acknowledged (zero when idle or unreadable): its
	// age is how far behind the consumer is in time.
	OldestUnacked time.Time
	// Replay is the replay rate a seek or redrive set on this worker,
	// nil when none or once the checkpoint reached its Until.
	Replay *Replay
	// Ordering is the dispatcher's ordering: OrderTopic, OrderKey or
	// OrderNone.
	Ordering Ordering
	// InFlight counts the worker's pushes outstanding now (at most
	// max-in-flight; with adaptive concurrency the dispatcher's limit
	// bounds their sum over its workers).
	InFlight int
	// The fields below are set under OrderKey only.
	//
	// KeysInFlight counts the ordering keys with a push outstanding.
	KeysInFlight int
	// ParkedKeys counts the messages waiting out a backoff after a NACK or
	// an abnormal answer, each holding back its key; Parked lists the
	// oldest of them (at most 50).
	ParkedKeys int
	Parked     []ParkedKey
	// Unacked counts the messages past the checkpoint read so far (finished
	// or not), at most MaxUnacked (the dispatcher's max-unacked): how far
	// the other keys have run ahead of the oldest unfinished message.
	Unacked, MaxUnacked int64
	// HeldBy is the key of the message at the checkpoint when the window is
	// full (Unacked reached MaxUnacked): the key that holds every other
	// back. "" otherwise, or when that message has no key.
	HeldBy string
}

// Worker states of WorkerStatus.State (the admin API's "state").
const (
	StateDelivering = "delivering"  // a message is being sent
	StateBackoff    = "backoff"     // waiting after an abnormal answer (NextRetry)
	StateNackResend = "nack-resend" // the consumer NACKed the message; it is sent again
	StateIdle       = "idle"        // everything up to the high watermark is delivered
	StatePaused     = "paused"      // the dispatcher is paused: no worker runs
	StateFailed     = "failed"      // the worker ended on an error (WorkerStatus.Err); it runs again after a restart
	StateStandby    = "standby"     // another broker node holds this topic's lease and delivers it (shared backends)
)

type workerKey struct{ dispatcher, topic string }

const (
	stateNew = iota
	stateStarted
	stateStopped
)

// Manager runs the dispatch workers: for every topic of the Source matching a
// dispatcher of the Set, exactly one worker per (dispatcher, topic name)
// (the original Java mmmq's "TopicQueue subscription model"). Start and
// Stop are its lifecycle; it can be started once.
type Manager struct {
	set    *Set
	src    Source
	sender Sender
	opts   Options
	log    *zap.Logger

	mu          sync.Mutex
	state       int
	ctx         context.Context // workers' context, cancelled by Stop
	cancel      context.CancelFunc
	unsubscribe func()
	unsubDel    func()
	workers     map[workerKey]*worker   // latest worker per key, running or ended
	pending     map[workerKey]Topic     // topic handed over while the key's worker was running
	topics      map[string]Topic        // every topic handed over and not deleted
	paused      map[string]bool         // dispatchers paused (Pause)
	held        map[string]bool         // dispatchers being changed (live.go): no worker starts
	limiters    map[string]*rateLimiter // by dispatcher: its rate limit's bucket, shared by its workers (ratelimit.go)
	breakers    map[string]*breaker     // by dispatcher: its circuit breaker, shared by its workers (breaker.go)
	limits      map[string]*aimd        // by dispatcher with adaptive-concurrency aimd: its limiter, shared by its workers (concurrency.go)
	health      map[string]*health      // by dispatcher with pause-after: failing since when (autopause.go)
	pauseInfo   map[string]PauseInfo    // by paused dispatcher: why and since when
	autoPausing map[string]*autoPending // by dispatcher: an automatic pause decided, its hook running (autopause.go)
	replays     map[workerKey]*replay   // replay rates of seeks and redrives, until reached (replay.go)
	pauseHook   func(name string, info PauseInfo)
	wg          sync.WaitGroup

	liveMu sync.Mutex      // serialises the live changes (live.go)
	pub    Publisher       // dead letters and redrive (SetPublisher); nil: log and skip
	tracer *tracing.Tracer // push spans (SetTracer); nil: off

	expired    atomic.Uint64 // every worker's Expired, summed since the Manager was made
	ttlExpired atomic.Uint64 // every worker's TTLExpired, summed since the Manager was made
}

// RetentionSkipped is the number of messages retention deleted before a
// dispatcher delivered them, over every worker since the Manager was made
// (mmmq_retention_skipped_total{kind="dispatcher"}).
func (m *Manager) RetentionSkipped() uint64 { return m.expired.Load() }

// NewManager returns a Manager delivering the topics of src to the
// dispatchers of set through sender. opts zero fields take the defaults; a
// nil log discards logs.
func NewManager(set *Set, src Source, sender Sender, opts Options, log *zap.Logger) *Manager {
	if log == nil {
		log = zap.NewNop()
	}
	return &Manager{
		set:     set,
		src:     src,
		sender:  sender,
		opts:    opts.WithDefaults(),
		log:     log,
		workers: make(map[workerKey]*worker),
		pending: make(map[workerKey]Topic),
		topics:  make(map[string]Topic),
		paused:  make(map[string]bool),
		held:    make(map[string]bool),

		limiters: make(map[string]*rateLimiter),
		breakers: make(map[string]*breaker),
		limits:   make(map[string]*aimd),
		health:   make(map[string]*health),

		pauseInfo:   make(map[string]PauseInfo),
		autoPausing: make(map[string]*autoPending),
		replays:     make(map[workerKey]*replay),
	}
}

// Start subscribes to the Source and starts a worker for every matching
// (dispatcher, topic), now and for topics created later. It only launches
// goroutines; ctx bounds Start itself, not the workers. A second Start is an
// error.
func (m *Manager) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.state != stateNew {
		m.mu.Unlock()
		return errors.New("dispatcher: manager already started")
	}
	m.state = stateStarted
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.mu.Unlock()

	if m.set.Len() == 0 {
		m.log.Info("no dispatchers configured yet")
	} else {
		names := make([]string, 0, m.set.Len())
		for _, d := range m.set.All() {
			names = append(names, d.String())
		}
		m.log.Info("starting dispatchers", zap.String("dispatchers", strings.Join(names, "; ")))
	}
	for _, d := range m.set.All() {
		m.warnInsecure(d)
	}
	if err := m.startNewLatest(); err != nil {
		return err
	}
	// Subscribed even without dispatchers: the admin API may add some.
	unsubDel := func() {}
	if ds, ok := m.src.(DeletionSource); ok {
		unsubDel = ds.SubscribeDeletes(m.onDelete)
	}
	unsub := m.src.Subscribe(m.onTopic)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateStarted { // Stop ran meanwhile
		unsub()
		unsubDel()
		return nil
	}
	m.unsubscribe, m.unsubDel = unsub, unsubDel
	return nil
}

// Stop unsubscribes from the Source, cancels every worker and waits for them
// to end, at most until ctx is done (then it returns ctx's error, wrapped).
// An attempt in flight is abandoned and its message not committed: it is
// sent again after a restart. Messages already finished are committed
// before the worker ends (Interval policy). Stop does not close checkpoints;
// the topics own them, so stop the Manager before closing the topics.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	prev := m.state
	m.state = stateStopped
	unsub, unsubDel, cancel := m.unsubscribe, m.unsubDel, m.cancel
	m.unsubscribe, m.unsubDel = nil, nil
	m.mu.Unlock()
	if prev != stateStarted {
		return nil
	}
	if unsub != nil {
		unsub()
	}
	if unsubDel != nil {
		unsubDel()
	}
	cancel()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		m.log.Info("dispatchers stopped")
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop dispatcher workers: %w", ctx.Err())
	}
}

// Status returns a snapshot of every worker started so far, sorted by
// dispatcher then topic.
func (m *Manager) Status() []WorkerStatus {
	m.mu.Lock()
	ws := make([]*worker, 0, len(m.workers))
	for _, w := range m.workers {
		ws = append(ws, w)
	}
	m.mu.Unlock()
	out := make([]WorkerStatus, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.status())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Dispatcher != out[j].Dispatcher {
			return out[i].Dispatcher < out[j].Dispatcher
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

// onTopic is the Source callback: start the workers of every dispatcher
// matching t. It does no I/O (the worker opens its checkpoint).
func (m *Manager) onTopic(t Topic) {
	name := t.Name()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != stateStarted {
		return
	}
	m.topics[name] = t
	for _, d := range m.set.Matching(name) {
		if m.stoppedLocked(d.name) {
			continue
		}
		k := workerKey{d.name, name}
		if w, ok := m.workers[k]; ok && !w.ended {
			// Never two workers for one key: remember the newest topic
			// object and start it if this worker ends (topic re-created).
			m.pending[k] = t
			continue
		}
		m.startLocked(d, t)
	}
}

// startLocked starts d's worker on t.
func (m *Manager) startLocked(d *Dispatcher, t Topic) {
	w := newWorker(m, d, t)
	w.rl = m.limiterLocked(d)
	if w.rl != nil && w.batch.MaxMessages > w.rl.burst {
		w.batch.MaxMessages = w.rl.burst // a push never takes more tokens than the bucket holds
	}
	w.br = m.breakerLocked(d)
	w.hl = m.healthLocked(d)
	w.cc = m.concurrencyLocked(d)
	if w.br != nil {
		_, w.brClosings = w.br.wait()
	}
	m.workers[workerKey{d.name, w.topicName}] = w
	w.replay.Store(m.replays[workerKey{d.name, w.topicName}])
	ctx, cancel := context.WithCancel(m.ctx)
	w.cancel = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(w.done)
		defer cancel()
		err := w.run(ctx)
		m.ended(w, err)
	}()
}

// onDelete is the DeletionSource callback: it stops every worker of topic
// t (an attempt in flight is abandoned; finished messages are committed
// while the topic is still open), waits for them to end and forgets them,
// so that Status lists no worker of a deleted topic. A topic of the same
// name created later gets new workers from offset 0.
func (m *Manager) onDelete(t Topic) {
	name := t.Name()
	m.mu.Lock()
	if m.topics[name] == t {
		delete(m.topics, name)
		for k := range m.replays {
			if k.topic == name {
				delete(m.replays, k)
			}
		}
	}
	m.mu.Unlock()
	ws := m.stopWorkers(func(k workerKey) bool { return k.topic == name })
	if len(ws) > 0 {
		m.log.Info("dispatch workers stopped: topic deleted", zap.String("topic", name), zap.Int("workers", len(ws)))
	}
}

// ended records that w has returned with err. When its topic was closed and
// a topic of the same name was handed over meanwhile, that one is started. A
// worker that failed (a commit error) is not replaced.
func (m *Manager) ended(w *worker, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w.ended = true
	k := workerKey{w.d.name, w.topicName}
	t, ok := m.pending[k]
	if !ok {
		return
	}
	delete(m.pending, k)
	// The dispatcher as it is now: it may have been replaced, removed or
	// paused while this worker ran.
	d, inSet := m.set.Get(w.d.name)
	if inSet && !m.stoppedLocked(d.name) && d.Matches(t.Name()) &&
		(errors.Is(err, errTopicClosed) || w.deleting) && m.state == stateStarted && m.ctx.Err() == nil {
		m.startLocked(d, t)
	}
}

// stoppedLocked reports whether no worker of the dispatcher named name may
// start now: it is paused or being changed (m.mu held).
func (m *Manager) stoppedLocked(name string) bool { return m.paused[name] || m.held[name] }
