package jetstream

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// How the brokers sharing a cluster divide the work (contract.WorkLeaser,
// contract.EpochCheckpoint, contract.TopicWatcher): one lease per
// (reader, topic) in the bucket <prefix>-leases (LeaseStore), renewed every
// third of mmmq.jetstream.lease-timeout; the checkpoints in
// <prefix>-checkpoints (CheckpointStore) remember the epoch of their last
// commit; and each broker learns of the topics the others create and
// delete from JetStream's stream advisories (WatchTopics).

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

// healthEvery is how long a Healthy answer is reused: /readyz may be
// polled often, and each check is a request to the cluster.
const healthEvery = time.Second

// Healthy reports whether this broker can use the cluster now
// (contract.HealthChecker, behind /readyz): connected to a NATS server,
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
