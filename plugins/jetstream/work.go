package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// How the brokers sharing a cluster divide the work (contract.WorkLeaser,
// contract.EpochCheckpoint, topicqueue.TopicWatcher): one lease per
// (reader, topic) in the bucket <prefix>-leases (LeaseStore), renewed every
// third of mmmq.jetstream.lease-timeout; the checkpoints in
// <prefix>-checkpoints (CheckpointStore) remember the epoch of their last
// commit; and each broker learns of the topics the others create from
// JetStream's stream-created advisories, with a full listing every
// topicRelist in case an advisory was missed (a reconnect).

// topicRelist is how often WatchTopics lists every stream again.
const topicRelist = 30 * time.Second

// advisoryStreamCreated is the subject of JetStream's stream-created
// advisories (the stream name is the last token and the "stream" member).
const advisoryStreamCreated = "$JS.EVENT.ADVISORY.STREAM.CREATED.>"

// kvCheckpoints is the Log's checkpointStore over a CheckpointStore.
type kvCheckpoints struct{ s *CheckpointStore }

func (k kvCheckpoints) open(topic, name string) (contract.Checkpoint, error) {
	c, err := k.s.Open(topic, name)
	if err != nil {
		return nil, err
	}
	return &epochCheckpoint{c}, nil
}

func (k kvCheckpoints) list(topic string) ([]string, error) { return k.s.List(topic) }

func (k kvCheckpoints) removeOne(topic, name string) error { return k.s.Remove(topic, name) }

// remove deletes every committed checkpoint of topic.
func (k kvCheckpoints) remove(topic string) error {
	names, err := k.s.List(topic)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := k.s.Remove(topic, n); err != nil {
			return err
		}
	}
	return nil
}

// epochCheckpoint is a Checkpoint as contract.EpochCheckpoint.
type epochCheckpoint struct{ *Checkpoint }

// BindEpoch reloads what the previous holder committed, takes epoch as
// this writer's and stamps the stored value with it at once, so that from
// then on a commit of an older holder is refused (ErrStaleCommit, which
// wraps contract.ErrStaleCommit): a new holder's lease is only a fence
// once a value under its epoch is stored.
func (c *epochCheckpoint) BindEpoch(epoch uint64) error {
	if err := c.Reload(); err != nil {
		return err
	}
	c.SetEpoch(epoch)
	return c.Commit(c.Offset())
}

// workLease is a Lease renewed in the background (contract.WorkLease).
type workLease struct {
	l    *Lease
	lost chan struct{}
	stop func()
	once sync.Once
	log  *zap.Logger
}

func (w *workLease) Epoch() uint64         { return w.l.Epoch() }
func (w *workLease) Holder() string        { return w.l.Holder() }
func (w *workLease) Lost() <-chan struct{} { return w.lost }

// Release stops the renewals and deletes the lease if it is still ours, so
// that another broker takes over without waiting for it to expire. A lease
// already lost (expired or taken over) has nothing to give back: not an
// error.
func (w *workLease) Release() error {
	var err error
	w.once.Do(func() {
		w.stop()
		ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
		defer cancel()
		if err = w.l.Release(ctx); errors.Is(err, ErrLeaseLost) {
			err = nil
		}
	})
	return err
}

// AcquireWork takes the lease of reader (a dispatcher or consumer group)
// on this topic for this broker, and keeps renewing it until Release or
// until a renewal finds it lost (Lost is then closed). Errors: one
// wrapping contract.ErrLeaseHeld that names the holder, or the bucket's.
func (l *Log) AcquireWork(ctx context.Context, reader string) (contract.WorkLease, error) {
	if l.opts.Leases == nil {
		return nil, nil
	}
	lease, err := l.opts.Leases.Acquire(ctx, l.stream+"/"+reader, l.opts.Holder)
	if err != nil {
		return nil, err
	}
	w := &workLease{l: lease, lost: make(chan struct{}), log: l.opts.Logger}
	w.stop = Keep(context.Background(), lease, l.opts.Leases.Timeout()/3, func(err error) {
		if w.log != nil {
			w.log.Warn("lease lost", zap.String("topic", l.topic), zap.String("reader", reader), zap.Uint64("epoch", lease.Epoch()), zap.Error(err))
		}
		close(w.lost)
	})
	return w, nil
}

// holderName names this broker process in the leases it holds:
// "<node>-<pid>", node being mmmq.node-name or the host name.
func holderName(node string) string {
	if node == "" {
		node, _ = os.Hostname()
	}
	return fmt.Sprintf("%s-%d", node, os.Getpid())
}

// WatchTopics calls fn, on one goroutine of its own, with every topic of
// the cluster (a full listing at start and every topicRelist) and every
// topic created later by any broker (JetStream's stream-created
// advisories), until stop (topicqueue.TopicWatcher).
func (b *Backend) WatchTopics(fn func(topicqueue.TopicEvent)) (stop func(), err error) {
	emit := func(t string) { fn(topicqueue.TopicEvent{Name: t}) }
	streams := make(chan string, 256)
	sub, err := b.nc.Subscribe(advisoryStreamCreated, func(m *nats.Msg) {
		var a struct {
			Stream string `json:"stream"`
		}
		if json.Unmarshal(m.Data, &a) == nil && strings.HasPrefix(a.Stream, b.cfg.StreamPrefix+"_") {
			select {
			case streams <- a.Stream:
			default: // full: the next listing finds it
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: subscribe to stream advisories: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.watchLoop(ctx, streams, emit)
	}()
	return func() {
		_ = sub.Unsubscribe()
		cancel()
		<-done
	}, nil
}

func (b *Backend) watchLoop(ctx context.Context, streams <-chan string, fn func(string)) {
	relist := time.NewTicker(topicRelist)
	defer relist.Stop()
	b.listTopics(ctx, fn)
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-streams:
			if t, ok := b.topicOfStream(ctx, s); ok {
				fn(t)
			}
		case <-relist.C:
			b.listTopics(ctx, fn)
		}
	}
}

func (b *Backend) listTopics(ctx context.Context, fn func(string)) {
	names, _, err := b.Topics()
	if err != nil {
		b.opts.Logger.Warn("list topics for the topic watch", zap.Error(err))
		return
	}
	for _, n := range names {
		if ctx.Err() != nil {
			return
		}
		fn(n)
	}
}

// topicOfStream is the topic stream s holds: its MetaTopic metadata when
// that names s, else the decoded stream name.
func (b *Backend) topicOfStream(ctx context.Context, s string) (string, bool) {
	ictx, cancel := context.WithTimeout(ctx, b.cfg.RequestTimeout)
	defer cancel()
	if str, err := b.js.Stream(ictx, s); err == nil {
		if t := str.CachedInfo().Config.Metadata[MetaTopic]; t != "" && contract.ValidateTopic(t) == nil && StreamName(b.cfg.StreamPrefix, t) == s {
			return t, true
		}
	}
	t, _, ok := DecodeStreamName(b.cfg.StreamPrefix, s)
	return t, ok
}

// healthEvery is how long a Healthy answer is reused: /readyz may be
// polled often, and each check is a request to the cluster.
const healthEvery = time.Second

// Healthy reports whether this broker can use the cluster now
// (topicqueue.HealthChecker, behind /readyz): connected to a NATS server,
// and JetStream answering an account-info request within a second (it does
// not while the cluster has lost the quorum of its metadata). The answer
// is reused for healthEvery.
func (b *Backend) Healthy() error {
	b.healthMu.Lock()
	defer b.healthMu.Unlock()
	if time.Since(b.healthAt) < healthEvery {
		return b.healthErr
	}
	b.healthAt = time.Now()
	if st := b.nc.Status(); st != nats.CONNECTED {
		b.healthErr = fmt.Errorf("jetstream: not connected to the NATS servers (%s)", st)
		return b.healthErr
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := b.js.AccountInfo(ctx); err != nil {
		b.healthErr = fmt.Errorf("jetstream: the cluster does not answer: %w", classify(err))
		return b.healthErr
	}
	b.healthErr = nil
	return nil
}
