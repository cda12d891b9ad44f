package jetstream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Log is one topic's log over one JetStream stream: contract.Log for the
// JetStream backend. Offset o is stream sequence o+1 (JetStream numbers
// messages from 1); streams are created with DenyDelete, so sequences have
// no gaps, as offsets must not.
//
// The high watermark is the highest sequence known stored: this log's own
// publish acknowledgements, and an ordered consumer on the stream (headers
// only, from the sequence after the one seen at open) that sees every
// message stored through any broker sharing the stream. A JetStream
// acknowledgement of sequence s comes after every sequence below s was
// stored (a stream stores in sequence order, a replicated one applies its
// log in order), so the high watermark covers only stored messages.
//
// StartOffset is cached: read when the log opens and refreshed by Stats,
// by a read that finds its message gone and, on a stream with limits, in
// the background by a StartOffset call at least startRefresh after the
// last refresh (the call itself never waits). It moves up as JetStream
// drops the head of the stream by its MaxAge and MaxBytes (the topic's
// retention policy, Options.Retention); a read below it, or of a message
// dropped since the cache was filled, is a *contract.OffsetExpiredError.
//
// Safe for concurrent use.
type Log struct {
	topic, stream, subject string
	incarnation            string
	opts                   Options
	nc                     *nats.Conn
	str                    jetstream.Stream
	cps                    checkpointStore

	hw     atomic.Int64 // one past the last offset known stored
	start  atomic.Int64 // cached log start offset
	closed atomic.Bool

	// The background refresh of start (StartOffset): only when the
	// stream has limits; one at a time; the last one's time (Unix ns).
	limited     bool
	refreshing  atomic.Bool
	refreshedAt atomic.Int64
	refreshMu   sync.Mutex     // orders a refresh's (or resync's) start with Close
	refreshWG   sync.WaitGroup // held by a refresh or resync in flight; Close waits

	// The resync (resync): while the ordered consumer reports errors or
	// is found behind, the high watermark is also read from the stream's
	// state. resyncing: one loop at a time; resyncUntil: when it ends
	// (Unix ns), pushed on by every error and every time it was behind.
	resyncing   atomic.Bool
	resyncUntil atomic.Int64
	resyncStop  chan struct{} // closed by Close: ends a resync at once
	// fed is the last stream sequence the ordered consumer delivered
	// (the stream's last at open before it); lastListed the stream's last
	// sequence in the topic watch's previous listing (listed), 0 before
	// the first.
	fed, lastListed atomic.Int64

	mu      sync.Mutex
	waiters map[int64]chan struct{} // Notify channels by offset
	opened  map[string]contract.Checkpoint

	cons     jetstream.ConsumeContext
	ajs      jetstream.JetStream // the publisher of asynchronous appends (newAsyncPublisher)
	notifies sync.Map            // *nats.Msg -> *pendingAsync
}

// Options are what every Log of a Backend shares.
type Options struct {
	// Prefix is mmmq.jetstream.stream-prefix.
	Prefix string
	// Replicas is mmmq.jetstream.replicas, for streams created.
	Replicas int
	// MaxRecordBytes is mmmq.broker.segment.max-record-bytes: larger
	// payloads are refused before anything is sent.
	MaxRecordBytes int
	// RequestTimeout bounds each JetStream request
	// (mmmq.jetstream.request-timeout).
	RequestTimeout time.Duration
	// Logger gets warnings (a lost ACCEPTED append); nil = none.
	Logger *zap.Logger
	// Budget is the broker's in-flight memory budget
	// (mmmq.broker.memory.max-inflight-bytes): ACCEPTED appends hold
	// their bytes until acknowledged. nil = not counted.
	Budget *contract.Budget
	// Leases are the work leases (AcquireWork); nil = none taken (every
	// broker delivers every topic).
	Leases *LeaseStore
	// Holder names this broker process in its leases (holderName).
	Holder string
	// DedupWindow is mmmq.broker.dedup.window: streams are created with it
	// as their duplicate window, and single appends carry the message's id
	// (Nats-Msg-Id) while it is above 0. 0 = ids are not deduplicated.
	DedupWindow time.Duration
	// Retention is a topic's retention policy (mmmq.broker.retention:
	// retention.Options.PolicyFor), set on its stream as MaxAge and
	// MaxBytes when the stream is created or opened; nil creates streams
	// without limits and leaves the limits of existing ones as they are.
	Retention func(topic string) contract.RetentionPolicy
}

// checkpointStore is where a Log's checkpoints are kept: the seam between
// the log and the key-value bucket code (kvCheckpoints over a
// CheckpointStore, work.go).
type checkpointStore interface {
	// open returns topic's checkpoint name, reading its stored offset.
	open(topic, name string) (contract.Checkpoint, error)
	// list returns the names of topic's committed checkpoints, sorted.
	list(topic string) ([]string, error)
	// remove deletes every checkpoint of topic (the topic is deleted).
	remove(topic string) error
	// removeOne deletes topic's checkpoint name.
	removeOne(topic, name string) error
}

// openLog opens topic's log over str: it reads the stream's state, then
// makes the publisher of ACCEPTED appends and starts the ordered consumer
// that keeps the high watermark current.
func openLog(ctx context.Context, nc *nats.Conn, str jetstream.Stream, topic string, o Options, cps checkpointStore) (*Log, error) {
	info, err := str.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("open topic %s: stream info: %w", topic, classify(err))
	}
	l := &Log{
		topic:       topic,
		stream:      info.Config.Name,
		subject:     Subject(o.Prefix, topic),
		incarnation: info.Config.Metadata[MetaIncarnation],
		opts:        o,
		nc:          nc,
		str:         str,
		cps:         cps,
		waiters:     map[int64]chan struct{}{},
		resyncStop:  make(chan struct{}),
		opened:      map[string]contract.Checkpoint{},
		limited:     info.Config.MaxAge > 0 || info.Config.MaxBytes > 0,
	}
	l.hw.Store(int64(info.State.LastSeq))
	l.fed.Store(int64(info.State.LastSeq))
	l.setStart(info.State)
	l.refreshedAt.Store(time.Now().UnixNano())
	if l.ajs, err = l.newAsyncPublisher(o.RequestTimeout); err != nil {
		return nil, fmt.Errorf("open topic %s: %w", topic, classify(err))
	}
	cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:   info.State.LastSeq + 1,
		HeadersOnly:   true,
	})
	if err == nil {
		l.cons, err = cons.Consume(l.onStored, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) { l.resync(err) }))
	}
	if err != nil {
		return nil, fmt.Errorf("open topic %s: consumer: %w", topic, classify(err))
	}
	return l, nil
}

// setStart caches the log start offset from a stream state: FirstSeq-1
// (an empty new stream reports FirstSeq 0; one whose every message was
// dropped LastSeq+1). It never moves down: a state read before another
// one that saw more of the head dropped is older.
func (l *Log) setStart(st jetstream.StreamState) {
	if st.FirstSeq == 0 {
		return
	}
	s := int64(st.FirstSeq) - 1
	for cur := l.start.Load(); s > cur; cur = l.start.Load() {
		if l.start.CompareAndSwap(cur, s) {
			return
		}
	}
}

// onStored is the ordered consumer's handler: a message stored at
// sequence s moves the high watermark to s.
func (l *Log) onStored(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	l.fed.Store(int64(md.Sequence.Stream))
	l.advance(int64(md.Sequence.Stream))
}

// resyncEvery is how often a resync reads the stream's state, and
// resyncWindow how long it goes on after the last consumer error or the
// last time it found the consumer behind.
var (
	resyncEvery  = 2 * time.Second
	resyncWindow = time.Minute
)

// resync is the ordered consumer's error handler: the consumer (which
// keeps the high watermark current) recreates itself after a reconnect or
// a missed heartbeat, and while a cluster regains its quorum that can
// leave it behind with no further error — a node seen serving a stale
// end of its topic for a minute, its dispatcher idle at lag 0, while the
// other node had stored 128 more messages. So for resyncWindow after an
// error, every resyncEvery, the stream's state is read and the high
// watermark raised to it; finding the consumer behind (the state ahead of
// it) pushes the window on and logs a warning. Errors of the consumer
// itself are logged at Debug (they come in bursts during a failover).
func (l *Log) resync(err error) {
	if l.opts.Logger != nil {
		l.opts.Logger.Debug("topic's message feed reported an error; reading the stream's state for a while", zap.String("topic", l.topic), zap.Error(err))
	}
	l.resyncUntil.Store(time.Now().Add(resyncWindow).UnixNano())
	if !l.resyncing.CompareAndSwap(false, true) {
		return
	}
	l.refreshMu.Lock()
	defer l.refreshMu.Unlock()
	if l.closed.Load() {
		l.resyncing.Store(false)
		return
	}
	l.refreshWG.Add(1)
	go l.resyncLoop()
}

func (l *Log) resyncLoop() {
	defer l.refreshWG.Done()
	defer l.resyncing.Store(false)
	t := time.NewTicker(resyncEvery)
	defer t.Stop()
	for time.Now().UnixNano() < l.resyncUntil.Load() {
		select {
		case <-l.resyncStop:
			return
		case <-t.C:
		}
		// Close cancels the request: it must not wait on a cluster that
		// cannot answer.
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.RequestTimeout)
		go func() {
			select {
			case <-l.resyncStop:
				cancel()
			case <-ctx.Done():
			}
		}()
		info, err := l.str.Info(ctx)
		cancel()
		if err != nil {
			continue // the cluster cannot answer yet: next tick
		}
		l.setStart(info.State)
		if end, cur := int64(info.State.LastSeq), l.hw.Load(); end > cur {
			l.resyncUntil.Store(time.Now().Add(resyncWindow).UnixNano())
			if l.opts.Logger != nil {
				l.opts.Logger.Warn("topic's message feed fell behind the stream; high watermark raised from the stream's state",
					zap.String("topic", l.topic), zap.Int64("was", cur), zap.Int64("high-watermark", end))
			}
			l.advance(end)
		}
	}
}

// listed is told, by the topic watch's listing of every stream (every
// topicRelist), the stream's last sequence: one past its last offset
// stored by a quorum. It is the safety net that needs no consumer error:
// a feed seen behind the stream without one, its dispatchers idle at a
// stale end, showed that resync alone is not enough. The high watermark
// is raised to last; a feed that had not reached even the previous
// listing's last sequence was behind for a whole listing interval: a
// warning, and a resync (the state read every resyncEvery for a while).
func (l *Log) listed(last int64) {
	prev := l.lastListed.Swap(last)
	if l.closed.Load() {
		return
	}
	if fed := l.fed.Load(); prev > 0 && fed < prev {
		if l.opts.Logger != nil {
			l.opts.Logger.Warn("topic's message feed is behind the stream's listing of a while ago; high watermark raised from the listing",
				zap.String("topic", l.topic), zap.Int64("fed", fed), zap.Int64("listed-before", prev), zap.Int64("high-watermark", max(last, l.hw.Load())))
		}
		l.resync(errFeedBehind)
	}
	l.advance(last)
}

// advance raises the high watermark to hw (never lowers it) and wakes the
// Notify channels of the offsets now below it.
func (l *Log) advance(hw int64) {
	for {
		cur := l.hw.Load()
		if hw <= cur {
			return
		}
		if l.hw.CompareAndSwap(cur, hw) {
			break
		}
	}
	l.mu.Lock()
	for off, ch := range l.waiters {
		if off < hw {
			close(ch)
			delete(l.waiters, off)
		}
	}
	l.mu.Unlock()
}

// HighWatermark is one past the last offset known stored by a quorum of the
// stream's replicas. It never decreases.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// Notify returns a channel closed once HighWatermark() > offset (a message
// stored through this or any other broker) or once the log is closed.
func (l *Log) Notify(offset int64) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() || l.hw.Load() > offset {
		return closedChan
	}
	ch, ok := l.waiters[offset]
	if !ok {
		ch = make(chan struct{})
		l.waiters[offset] = ch
	}
	return ch
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// startRefresh is the least time between two background refreshes of a
// log's start offset.
const startRefresh = time.Second

// StartOffset is the cached log start offset (see Log). On a stream with
// limits, a call startRefresh or more after the last refresh starts one
// in the background (one stream-info request) and returns the cached
// value without waiting.
func (l *Log) StartOffset() int64 {
	if l.limited && time.Now().UnixNano()-l.refreshedAt.Load() >= int64(startRefresh) && l.refreshing.CompareAndSwap(false, true) {
		l.refreshMu.Lock()
		if l.closed.Load() {
			l.refreshing.Store(false)
		} else {
			l.refreshWG.Add(1)
			go l.refreshStart()
		}
		l.refreshMu.Unlock()
	}
	return l.start.Load()
}

// refreshStart reads the stream's state and caches its start offset (a
// failure leaves the cache as it was, retried after startRefresh).
func (l *Log) refreshStart() {
	defer l.refreshWG.Done()
	defer l.refreshing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.RequestTimeout)
	defer cancel()
	if info, err := l.str.Info(ctx); err == nil {
		l.setStart(info.State)
	}
	l.refreshedAt.Store(time.Now().UnixNano())
}

// Stats asks the cluster for the stream's state (one request, bounded by
// the request timeout): Bytes is the stream's stored bytes (one replica's,
// headers and subjects included), NextOffset the high watermark,
// StartOffset refreshed; Segments and the fsync counters are 0 (the
// servers keep their own). When the cluster does not answer, the cached
// values are returned and Failed says why.
func (l *Log) Stats() contract.Stats {
	s := contract.Stats{Topic: l.topic}
	if !l.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), l.opts.RequestTimeout)
		info, err := l.str.Info(ctx)
		cancel()
		if err != nil {
			s.Failed = "jetstream: stream info: " + err.Error()
		} else {
			l.setStart(info.State)
			s.Bytes = int64(info.State.Bytes)
		}
	}
	s.NextOffset, s.StartOffset = l.HighWatermark(), l.StartOffset()
	return s
}

// OpenCheckpoint opens, or returns the already open, checkpoint name of
// this topic, stored in the key-value bucket "<prefix>-checkpoints".
// Errors: contract.ErrClosed, or the bucket's error.
func (l *Log) OpenCheckpoint(name string) (contract.Checkpoint, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return nil, fmt.Errorf("open checkpoint %s of topic %s: %w", name, l.topic, contract.ErrClosed)
	}
	if cp, ok := l.opened[name]; ok {
		return cp, nil
	}
	cp, err := l.cps.open(l.topic, name)
	if err != nil {
		return nil, err
	}
	l.opened[name] = cp
	return cp, nil
}

// RemoveCheckpoint deletes the checkpoint name of this topic (a dispatcher
// deleted with its checkpoints): a reader of that name starts again from
// offset 0. Errors: contract.ErrClosed, or the bucket's.
func (l *Log) RemoveCheckpoint(name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return fmt.Errorf("remove checkpoint %s of topic %s: %w", name, l.topic, contract.ErrClosed)
	}
	delete(l.opened, name)
	return l.cps.removeOne(l.topic, name)
}

// Checkpoints lists the topic's committed checkpoints (contract.CheckpointLister).
func (l *Log) Checkpoints() ([]string, error) {
	if l.closed.Load() {
		return nil, fmt.Errorf("list checkpoints of topic %s: %w", l.topic, contract.ErrClosed)
	}
	return l.cps.list(l.topic)
}

// Close stops the ordered consumer (without waiting on a cluster that
// cannot answer), wakes every Notify channel, waits up to the request
// timeout for the acknowledgements of ACCEPTED appends still outstanding
// (an error says how many did not come: those messages may or may not be
// stored) and releases the log. Later calls fail with
// contract.ErrClosed; a second Close returns nil.
func (l *Log) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	// Stop can wait: told of a reconnect or a missed heartbeat, nats.go's
	// ordered consumer recreates itself holding the lock Stop takes, with
	// a request of up to 10 s per attempt, which a cluster that lost its
	// quorum never answers. So Stop runs on its own; once the connection
	// closes (Backend.Close) that request ends and Stop returns. What the
	// consumer may still deliver only raises the high watermark.
	l.refreshMu.Lock()
	close(l.resyncStop) // after closed is set: no resync starts after this
	l.refreshMu.Unlock()
	stopped := make(chan struct{})
	go func() {
		l.cons.Stop()
		close(stopped)
	}()
	l.mu.Lock()
	for _, ch := range l.waiters {
		close(ch)
	}
	l.waiters = nil
	l.mu.Unlock()
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.RequestTimeout)
	defer cancel()
	select {
	case <-l.ajs.PublishAsyncComplete():
	case <-ctx.Done():
		err = fmt.Errorf("close topic %s: %d accepted appends unacknowledged after %s: %w",
			l.topic, l.ajs.PublishAsyncPending(), l.opts.RequestTimeout, ErrTimeout)
	}
	l.ajs.CleanupPublisher()
	select {
	case <-stopped: // stopped at once: wait until it has (as before)
		select {
		case <-l.cons.Closed():
		case <-ctx.Done():
		}
	default: // its Stop waits on the cluster: not waited for
	}
	// A barrier, not a critical section: a StartOffset that saw the log
	// open (under refreshMu) has called refreshWG.Add before this Lock is
	// granted, and one that takes refreshMu after it sees closed and starts
	// nothing; so no Add races with the Wait below.
	l.refreshMu.Lock()
	//lint:ignore SA2001 the empty section is the barrier described above
	l.refreshMu.Unlock()
	l.refreshWG.Wait()
	return err
}

// Incarnation is the topic's incarnation id (MetaIncarnation), "" for a
// stream made without one.
func (l *Log) Incarnation() string { return l.incarnation }

// Topic is the topic name.
func (l *Log) Topic() string { return l.topic }

// Stream is the stream's name.
func (l *Log) Stream() string { return l.stream }
