package dispatcher

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// memTopic is an in-memory Topic whose checkpoints are real files under dir.
type memTopic struct {
	name string
	dir  string
	fs   vfs.FS
	log  *zap.Logger

	mu       sync.Mutex
	payloads [][]byte
	corrupt  map[int64]bool
	waiting  map[int64]chan struct{} // Notify channels by offset, closed once it is stored
	closed   bool
	cps      map[string]*storage.Checkpoint
	// plainCheckpoints hides the checkpoints' optional capabilities (a
	// backend that records no finished offsets, as JetStream).
	plainCheckpoints bool
}

// plainCheckpoint is a contract.Checkpoint and nothing more.
type plainCheckpoint struct{ contract.Checkpoint }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func newMemTopic(t testing.TB, root, name string) *memTopic {
	t.Helper()
	tp := &memTopic{
		name:    name,
		dir:     filepath.Join(root, name),
		fs:      vfs.OS{},
		log:     zaptest.NewLogger(t),
		corrupt: make(map[int64]bool),
		waiting: make(map[int64]chan struct{}),
		cps:     make(map[string]*storage.Checkpoint),
	}
	if err := os.MkdirAll(tp.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tp.closeCheckpoints)
	return tp
}

// storedMessage is the stored message JSON:
// {"topic":{"name":…},"content":…,"id":…,"timestamp":…,"headers":…}.
func storedMessage(topic string, n int) []byte {
	return fmt.Appendf(nil, `{"topic":{"name":%q},"content":{"n":%d,"id":"inner"},"id":"m-%d","timestamp":1700000000000,"headers":{"id":"hdr"}}`, topic, n, n)
}

// publish appends n stored messages numbered from the current end.
func (tp *memTopic) publish(n int) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for i := 0; i < n; i++ {
		tp.payloads = append(tp.payloads, storedMessage(tp.name, len(tp.payloads)))
	}
	for off, ch := range tp.waiting {
		if off < int64(len(tp.payloads)) {
			close(ch)
			delete(tp.waiting, off)
		}
	}
}

func (tp *memTopic) setCorrupt(offsets ...int64) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for _, o := range offsets {
		tp.corrupt[o] = true
	}
}

func (tp *memTopic) Name() string { return tp.name }

func (tp *memTopic) HighWatermark() int64 {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return int64(len(tp.payloads))
}

func (tp *memTopic) Notify(offset int64) <-chan struct{} {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed || int64(len(tp.payloads)) > offset {
		return closedChan
	}
	ch, ok := tp.waiting[offset]
	if !ok {
		ch = make(chan struct{})
		tp.waiting[offset] = ch
	}
	return ch
}

func (tp *memTopic) ReadBatch(from int64, max int) ([]storage.Entry, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return nil, contract.ErrClosed
	}
	var out []storage.Entry
	for o := from; o < int64(len(tp.payloads)) && len(out) < max; o++ {
		if tp.corrupt[o] {
			return out, &contract.CorruptionError{Topic: tp.name, File: filepath.Join(tp.dir, "0000000000000000000.mmm"),
				Pos: o * 100, Offset: o, Reason: "crc mismatch"}
		}
		out = append(out, storage.Entry{Offset: o, Payload: tp.payloads[o]})
	}
	return out, nil
}

func (tp *memTopic) Checkpoint(name string) (contract.Checkpoint, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return nil, contract.ErrClosed
	}
	if cp, ok := tp.cps[name]; ok {
		if tp.plainCheckpoints {
			return plainCheckpoint{cp}, nil
		}
		return cp, nil
	}
	cp, err := storage.OpenCheckpoint(tp.fs, tp.dir, name, int64(len(tp.payloads)), tp.log)
	if err != nil {
		return nil, err
	}
	tp.cps[name] = cp
	if tp.plainCheckpoints {
		return plainCheckpoint{cp}, nil
	}
	return cp, nil
}

// close closes the topic: Notify channels fire, reads fail with ErrClosed.
func (tp *memTopic) close() {
	tp.mu.Lock()
	if !tp.closed {
		tp.closed = true
		for _, ch := range tp.waiting {
			close(ch)
		}
		tp.waiting = nil
	}
	tp.mu.Unlock()
	tp.closeCheckpoints()
}

func (tp *memTopic) closeCheckpoints() {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for n, cp := range tp.cps {
		cp.Close()
		delete(tp.cps, n)
	}
}

// checkpointFile reads the committed value from disk (-1 when absent).
func checkpointFile(t *testing.T, topicDir, name string) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(topicDir, storage.CheckpointDir, name+storage.CheckpointExt))
	if errors.Is(err, os.ErrNotExist) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8 {
		t.Fatalf("checkpoint file is %d bytes", len(b))
	}
	return int64(binary.BigEndian.Uint64(b))
}

// memSource is an in-memory Source.
type memSource struct {
	mu     sync.Mutex
	topics []Topic
	subs   map[int]func(Topic)
	nextID int
}

func newMemSource(topics ...Topic) *memSource {
	return &memSource{topics: topics, subs: make(map[int]func(Topic))}
}

func (s *memSource) Subscribe(fn func(Topic)) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	s.subs[id] = fn
	for _, t := range s.topics {
		fn(t)
	}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs, id)
	}
}

// Topics lists the source's topics (memSource is a Lister, as the
// registry's source is).
func (s *memSource) Topics() []Topic {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Topic(nil), s.topics...)
}

func (s *memSource) add(t Topic) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.topics = append(s.topics, t)
	for _, fn := range s.subs {
		fn(t)
	}
}

// received is one request seen by a test consumer.
type received struct {
	Path          string
	ConsumerID    string
	Topic         string
	Incarnation   string
	Offset        int64
	Attempt       int
	MessageID     string
	Key           string // the mmmq-key header ("" when absent: see HasKey)
	HasKey        bool   // the push had an mmmq-key header
	LeaseEpoch    uint64 // mmmq-lease-epoch; 0 when absent
	ContentType   string
	ContentLength int64
	Body          string
}

// consumer is an httptest consumer that records requests and answers with
// respond (ACK when nil).
type consumer struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []received
	respond func(r received, w http.ResponseWriter, req *http.Request)
}

func newConsumer(t testing.TB, respond func(r received, w http.ResponseWriter, req *http.Request)) *consumer {
	t.Helper()
	c := &consumer{respond: respond}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			t.Errorf("consumer: read body: %v", err)
		}
		r := received{
			Path:          req.URL.Path,
			ConsumerID:    req.Header.Get("mmmq-consumer-id"),
			Topic:         req.Header.Get("mmmq-topic"),
			Incarnation:   req.Header.Get("mmmq-topic-incarnation"),
			MessageID:     req.Header.Get("mmmq-message-id"),
			Key:           req.Header.Get("mmmq-key"),
			ContentType:   req.Header.Get("Content-Type"),
			ContentLength: req.ContentLength,
			Body:          string(body),
		}
		r.Offset, _ = strconv.ParseInt(req.Header.Get("mmmq-offset"), 10, 64)
		r.Attempt, _ = strconv.Atoi(req.Header.Get("mmmq-attempt"))
		r.LeaseEpoch, _ = strconv.ParseUint(req.Header.Get("mmmq-lease-epoch"), 10, 64)
		_, r.HasKey = req.Header["Mmmq-Key"]
		c.mu.Lock()
		c.reqs = append(c.reqs, r)
		respond := c.respond
		c.mu.Unlock()
		if respond == nil {
			answer(w, ACK)
			return
		}
		respond(r, w, req)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func answer(w http.ResponseWriter, o Outcome) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"acknowledgement": string(o)})
}

func (c *consumer) host(t testing.TB) Host {
	t.Helper()
	h, err := ParseHost(c.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (c *consumer) requests() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]received(nil), c.reqs...)
}

// requestsFor returns the requests for one topic and consumer id.
func (c *consumer) requestsFor(topic, dispatcher string) []received {
	var out []received
	for _, r := range c.requests() {
		if r.Topic == topic && r.ConsumerID == dispatcher {
			out = append(out, r)
		}
	}
	return out
}

func offsets(rs []received) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.Offset
	}
	return out
}

// testOptions are fast options for tests.
func testOptions() Options {
	// StopGrace -1: a stop abandons the pushes in flight at once, as tests
	// of a stop mid-push expect (TestStopWaitsForPushesInFlight sets one).
	return Options{BackoffInitial: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, DefaultTimeout: 10 * time.Second, BatchSize: 4, StopGrace: -1}
}

// startManager starts a Manager for ds over src with a real HTTPSender and
// stops it at cleanup.
func startManager(t testing.TB, src Source, opts Options, ds ...*Dispatcher) *Manager {
	t.Helper()
	return startWithPublisher(t, src, nil, opts, ds...)
}

// startWithPublisher is startManager with pub as the Manager's Publisher
// (nil: none, dead letters are logged and skipped).
func startWithPublisher(t testing.TB, src Source, pub Publisher, opts Options, ds ...*Dispatcher) *Manager {
	t.Helper()
	return startWithPublisherLog(t, src, pub, opts, zaptest.NewLogger(t), ds...)
}

// startWithPublisherLog is startWithPublisher logging to log.
func startWithPublisherLog(t testing.TB, src Source, pub Publisher, opts Options, log *zap.Logger, ds ...*Dispatcher) *Manager {
	t.Helper()
	set, err := SetOf(ds...)
	if err != nil {
		t.Fatal(err)
	}
	sender := NewHTTPSender(opts)
	m := NewManager(set, src, sender, opts, log)
	if pub != nil {
		m.SetPublisher(pub)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		sender.CloseIdleConnections()
	})
	return m
}

func stopManager(t testing.TB, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

// status returns the status of one worker (zero value when absent).
func status(m *Manager, dispatcher, topic string) WorkerStatus {
	for _, s := range m.Status() {
		if s.Dispatcher == dispatcher && s.Topic == topic {
			return s
		}
	}
	return WorkerStatus{}
}

// eventually polls cond every few milliseconds for up to 15 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitCommitted waits until the worker of dispatcher on topic has
// committed n messages.
func waitCommitted(t *testing.T, m *Manager, dispatcher, topic string, n int64) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s to commit %d on %s", dispatcher, n, topic), func() bool {
		return status(m, dispatcher, topic).Committed == n
	})
}

// wantOffsets fails the test unless rs were sent for exactly the offsets
// want, in this order; what names the requests in the message.
func wantOffsets(t *testing.T, what string, rs []received, want ...int64) {
	t.Helper()
	if got := offsets(rs); !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// wantCheckpoint fails the test unless the checkpoint file of dispatcher
// name in topicDir holds want.
func wantCheckpoint(t *testing.T, topicDir, name string, want int64) {
	t.Helper()
	if got := checkpointFile(t, topicDir, name); got != want {
		t.Errorf("checkpoint file = %d, want %d", got, want)
	}
}

// deliverOne publishes n messages to a new topic, runs each of before on
// it, and starts a manager, with opts, in which d delivers them.
func deliverOne(t *testing.T, topic string, n int, opts Options, d *Dispatcher, before ...func(*memTopic)) (*memTopic, *Manager) {
	t.Helper()
	tp := newMemTopic(t, t.TempDir(), topic)
	tp.publish(n)
	for _, f := range before {
		f(tp)
	}
	return tp, startManager(t, newMemSource(tp), opts, d)
}

// callCounter returns a function that counts its calls: it returns 1 the
// first time, 2 the second, and so on. It is safe for concurrent use.
func callCounter() func() int {
	var n atomic.Int64
	return func() int { return int(n.Add(1)) }
}

// faultFS is vfs.OS whose file Syncs fail while failSync is set.
type faultFS struct {
	vfs.OS
	failSync atomic.Bool
}

type faultFile struct {
	vfs.File
	fs *faultFS
}

func (f faultFile) Sync() error {
	if f.fs.failSync.Load() {
		return errors.New("injected fsync failure")
	}
	return f.File.Sync()
}

func (fs *faultFS) Create(name string) (vfs.File, error) {
	f, err := fs.OS.Create(name)
	if err != nil {
		return nil, err
	}
	return faultFile{f, fs}, nil
}

func (fs *faultFS) OpenRW(name string) (vfs.File, error) {
	f, err := fs.OS.OpenRW(name)
	if err != nil {
		return nil, err
	}
	return faultFile{f, fs}, nil
}
