package jetstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
)

// Lease value layout (wire format, do not change):
//
//	+-------------------------+-------------------------+
//	| uint64 big-endian epoch | holder, UTF-8, the rest |
//	+-------------------------+-------------------------+
//	  bytes 0..7                bytes 8..
//
// The epoch is 0 while Acquire is between creating the lease key and
// granting the epoch. In <prefix>-epochs a key's value is the holder last
// granted an epoch (for people reading the bucket); the epoch itself is the
// revision of that entry.
//
// Both buckets key a lease by escapeKeyPart(key), one subject token.
const (
	leaseBucket     = "leases" // <prefix>-leases: TTL = the lease timeout
	epochBucket     = "epochs" // <prefix>-epochs: no TTL
	leaseHeaderSize = 8
	acquireAttempts = 3 // Create conflicts whose holder vanished before it was read
)

// LeaseStore grants leases: at most one live holder per key (for example
// "<dispatcher>/<topic>") across every mmmq node sharing the JetStream
// cluster. Safe for concurrent use.
//
// Expiry is the bucket's TTL (the stream's MaxAge), not a per-key TTL: every
// lease has the same timeout (one configuration value), a renewal is a
// compare-and-set Update and KeyValue.Update cannot set a per-key TTL (only
// Create can), and MaxAge works on every server version. A renewal writes a
// new revision, whose age starts at zero; a lease not renewed within the
// timeout has its last revision removed by the server, after which the key
// is free for Create and every Update of the old revision fails.
//
// Epochs come from a second bucket, without TTL, so they survive the
// lease's expiry: an epoch is the revision of a write to that bucket, and a
// bucket's revisions (its stream's sequence numbers) only grow. They are
// not reused after an entry is deleted (the delete marker is a newer
// revision), and since the bucket keeps its newest entries (no TTL) its
// sequence survives a server restart; a counter stored in the value would restart at 1 if an operator deleted
// the key, and every commit of the new holder would then be refused as
// stale. Acquire writes the epoch only while it holds the freshly created
// lease key and confirms the hold afterwards with a compare-and-set on the
// lease key, so every successful Acquire of a key gets an epoch strictly
// greater than every earlier one. Epochs are sparse (all keys share the
// sequence). Deleting the epochs bucket itself restarts them: delete it only
// together with the checkpoints bucket.
type LeaseStore struct {
	leases  js.KeyValue
	epochs  js.KeyValue
	timeout time.Duration
}

// NewLeaseStore creates or binds the buckets <prefix>-leases (TTL timeout)
// and <prefix>-epochs (no TTL), file storage, the given replicas. Every
// node must use the same timeout: with another one a node would renew too
// seldom for the bucket's TTL. Errors: ErrInvalidName for a bad prefix; a
// timeout under 1 s; an existing leases bucket whose TTL is not timeout;
// the JetStream error.
func NewLeaseStore(ctx context.Context, j js.JetStream, prefix string, replicas int, timeout time.Duration) (*LeaseStore, error) {
	if timeout < time.Second {
		return nil, fmt.Errorf("lease timeout %s: want at least 1s", timeout)
	}
	leases, err := bucketName(prefix, leaseBucket)
	if err != nil {
		return nil, err
	}
	epochs, _ := bucketName(prefix, epochBucket)
	s := &LeaseStore{timeout: timeout}
	s.leases, err = openBucket(ctx, j, js.KeyValueConfig{
		Bucket:      leases,
		Description: "mmmq leases: holder and epoch per key, expire unless renewed",
		TTL:         timeout,
		Replicas:    replicas,
		Storage:     js.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	st, err := s.leases.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("read bucket %s: %w", leases, err)
	}
	if st.TTL() != timeout {
		return nil, fmt.Errorf("bucket %s expires leases after %s, this node's lease timeout is %s: every node must use the same timeout (or delete the bucket while no node runs)", leases, st.TTL(), timeout)
	}
	s.epochs, err = openBucket(ctx, j, js.KeyValueConfig{
		Bucket:      epochs,
		Description: "mmmq lease epochs: last epoch granted per key, never expire",
		Replicas:    replicas,
		Storage:     js.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Timeout is how long a lease lives without a renewal.
func (s *LeaseStore) Timeout() time.Duration { return s.timeout }

// Acquire takes the lease key for holder when it is free (never taken,
// released, or expired) and returns it with an Epoch strictly greater than
// that of every earlier lease of key. holder names the taker in other
// nodes' errors and should be unique per process (a second Acquire with the
// same holder is refused like any other while the lease lives). Errors:
//   - ErrLeaseHeld, naming the live holder and its epoch;
//   - ErrLeaseLost when the new lease expired before its epoch was granted
//     (a very slow cluster); retrying is safe;
//   - ErrInvalidName for an empty key or holder; the JetStream error.
func (s *LeaseStore) Acquire(ctx context.Context, key, holder string) (*Lease, error) {
	if key == "" || holder == "" {
		return nil, fmt.Errorf("%w: lease key %q, holder %q: both must be non-empty", ErrInvalidName, key, holder)
	}
	l := &Lease{store: s, key: key, holder: holder, kvKey: escapeKeyPart(key)}
	rev, err := s.create(ctx, l)
	if err != nil {
		return nil, err
	}
	epoch, err := s.nextEpoch(ctx, l.kvKey, holder)
	if err != nil {
		// Free the key for others now (best effort: it expires anyway),
		// even when ctx was what failed.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), kvOpTimeout)
		_ = s.leases.Delete(dctx, l.kvKey, js.LastRevision(rev))
		cancel()
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	sent := time.Now()
	rev, err = s.leases.Update(ctx, l.kvKey, encodeLease(epoch, holder), rev)
	if isConflict(err) {
		return nil, fmt.Errorf("acquire lease %s: it expired while epoch %d was granted: %w", key, epoch, ErrLeaseLost)
	}
	if err != nil {
		return nil, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	l.epoch, l.revision, l.renewed = epoch, rev, sent
	return l, nil
}

// create creates l's lease key (epoch 0) and returns its revision; when the
// key exists it reads the holder for ErrLeaseHeld, and tries again when the
// lease vanished in between.
func (s *LeaseStore) create(ctx context.Context, l *Lease) (uint64, error) {
	for range acquireAttempts {
		rev, err := s.leases.Create(ctx, l.kvKey, encodeLease(0, l.holder))
		if err == nil {
			return rev, nil
		}
		if !isConflict(err) {
			return 0, fmt.Errorf("acquire lease %s: %w", l.key, err)
		}
		e, err := s.leases.Get(ctx, l.kvKey)
		if errors.Is(err, js.ErrKeyNotFound) {
			continue // released or expired since Create failed
		}
		if err != nil {
			return 0, fmt.Errorf("acquire lease %s: read holder: %w", l.key, err)
		}
		epoch, holder := decodeLease(e.Value())
		return 0, fmt.Errorf("lease %s is held by %q (epoch %d): %w", l.key, holder, epoch, ErrLeaseHeld)
	}
	return 0, fmt.Errorf("acquire lease %s: it changed hands %d times while being read: %w", l.key, acquireAttempts, ErrLeaseHeld)
}

// nextEpoch writes holder under kvKey in the epochs bucket and returns the
// write's revision as the new epoch (see LeaseStore for why).
func (s *LeaseStore) nextEpoch(ctx context.Context, kvKey, holder string) (uint64, error) {
	rev, err := s.epochs.Put(ctx, kvKey, []byte(holder))
	if err != nil {
		return 0, fmt.Errorf("grant epoch: %w", err)
	}
	return rev, nil
}

// Lease is one holder's hold on one key, valid until it is released or not
// renewed within the store's timeout. Safe for concurrent use.
type Lease struct {
	store  *LeaseStore
	key    string
	kvKey  string
	holder string
	epoch  uint64

	mu       sync.Mutex
	revision uint64    // of the lease key, last written by this holder
	renewed  time.Time // when the write of revision was sent
}

// Key is the leased key as given to Acquire.
func (l *Lease) Key() string { return l.key }

// Holder is the holder given to Acquire.
func (l *Lease) Holder() string { return l.holder }

// Epoch is the lease's epoch: strictly greater than that of every earlier
// lease of the same key. A new holder calls Checkpoint.Reload and then
// Checkpoint.SetEpoch with it, which fences out earlier holders' commits.
func (l *Lease) Epoch() uint64 { return l.epoch }

// Expires is when the lease expires unless renewed: the lease timeout after
// the last successful write (Acquire or Renew) was sent. The server, which
// starts the timeout when it stores the write, keeps the lease at least
// that long (clock skew aside: only durations on each side count).
func (l *Lease) Expires() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewed.Add(l.store.timeout)
}

// Renew restarts the lease's timeout with a compare-and-set on the revision
// this holder last wrote. Errors: ErrLeaseLost when the lease expired, was
// released, or was taken by another holder (the holder must stop its work);
// the JetStream error otherwise (the lease may still be live: retry before
// the timeout runs out).
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sent := time.Now()
	rev, err := l.store.leases.Update(ctx, l.kvKey, encodeLease(l.epoch, l.holder), l.revision)
	if isConflict(err) {
		return fmt.Errorf("renew lease %s (epoch %d): %w", l.key, l.epoch, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	l.revision, l.renewed = rev, sent
	return nil
}

// Release frees the lease for the next Acquire, deleting the key only if
// this holder's revision is still the latest. Errors: ErrLeaseLost when it
// was no longer ours (nothing was deleted); the JetStream error.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.store.leases.Delete(ctx, l.kvKey, js.LastRevision(l.revision))
	if isConflict(err) {
		return fmt.Errorf("release lease %s (epoch %d): %w", l.key, l.epoch, ErrLeaseLost)
	}
	if err != nil {
		return fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return nil
}

// Keep renews l every `every` (a third of the lease timeout is a good
// value) on a goroutine until ctx is done, stop is called, or the lease is
// lost. onLost is called at most once, on that goroutine, with an error
// wrapping ErrLeaseLost: when a renewal reports the lease lost, or when no
// renewal succeeded before Expires (counted from the sending of the last
// successful write, so the server cannot have kept the lease longer).
// onLost must not call stop (stop waits for the goroutine). stop cancels
// the renewals and returns after the goroutine exited; it may be called
// more than once. Keep does not release the lease.
func Keep(ctx context.Context, l *Lease, every time.Duration, onLost func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := keepRenewing(ctx, l, every); err != nil && onLost != nil {
			onLost(err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// keepRenewing renews l every `every` and returns nil when ctx is done, or
// the error that lost the lease.
func keepRenewing(ctx context.Context, l *Lease, every time.Duration) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		err := l.Renew(rctx)
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrLeaseLost):
			return err
		case !time.Now().Before(l.Expires()):
			return fmt.Errorf("lease %s: no renewal succeeded within the %s timeout (last error: %v): %w", l.key, l.store.timeout, err, ErrLeaseLost)
		}
	}
}

// encodeLease returns a lease value (see the layout above).
func encodeLease(epoch uint64, holder string) []byte {
	b := make([]byte, leaseHeaderSize, leaseHeaderSize+len(holder))
	binary.BigEndian.PutUint64(b, epoch)
	return append(b, holder...)
}

// decodeLease reverses encodeLease; a value too short for the epoch is
// returned whole as the holder, with epoch 0, for the error message.
func decodeLease(b []byte) (epoch uint64, holder string) {
	if len(b) < leaseHeaderSize {
		return 0, string(b)
	}
	return binary.BigEndian.Uint64(b), string(b[leaseHeaderSize:])
}
