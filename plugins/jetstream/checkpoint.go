package jetstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	js "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Checkpoint value layout (wire format, do not change):
//
//	+------------------------------+-------------------------------+
//	| int64 big-endian next offset | uint64 big-endian lease epoch |
//	+------------------------------+-------------------------------+
//	  bytes 0..7                     bytes 8..15
//
// The next offset is the offset the owner (a dispatcher or a consumer
// group) reads next; the epoch is the lease epoch of the writer that stored
// it (0 when the writer held no lease). Every value is exactly 16 bytes.
//
// Key layout: <topic>.<name>, each part escaped by escapeKeyPart, so a key
// is always exactly two subject tokens ("orders.eu" / "billing" →
// "orders=2Eeu.billing") and List finds the names of one topic with the
// filter "<topic>.*".
const (
	checkpointValueSize = 16
	checkpointBucket    = "checkpoints" // bucket name: <prefix>-checkpoints
	// kvOpTimeout bounds every key-value request that the contract gives no
	// context for (Commit, SeekTo, Reload, Open, List): long enough for a
	// replicated write during a leader election, short enough that a
	// dispatcher does not hang on a partitioned cluster.
	kvOpTimeout = 10 * time.Second
	// seekAttempts bounds the compare-and-set retries of SeekTo when commits
	// race it.
	seekAttempts = 16
)

// Errors of the checkpoint and lease stores.
var (
	// ErrStaleCommit: the stored checkpoint changed since this writer last
	// read it (another node committed, or an operator seeked), or it was
	// stored under a greater lease epoch. Nothing was written; the caller
	// must Reload (and, for an epoch, stop: it lost its lease).
	// It wraps contract.ErrStaleCommit, which the dispatchers and consumer
	// groups test for.
	ErrStaleCommit = fmt.Errorf("jetstream: stale commit, a newer writer owns this checkpoint: %w", contract.ErrStaleCommit)
	// ErrBackwardCommit: Commit with an offset below the stored one. Only
	// SeekTo moves a checkpoint backwards.
	ErrBackwardCommit = errors.New("jetstream: commit would move the checkpoint backwards (only a seek may)")
	// ErrInvalidName: an empty or invalid topic, checkpoint name, lease key
	// or holder, or a bucket prefix that is not [A-Za-z0-9_-]+.
	ErrInvalidName = errors.New("jetstream: invalid name")
	// ErrLeaseHeld: another live holder has the lease; the message names it.
	// It wraps contract.ErrLeaseHeld (GROUP_BUSY, a standing-by worker).
	ErrLeaseHeld = fmt.Errorf("jetstream: %w", contract.ErrLeaseHeld)
	// ErrLeaseLost: the lease expired (it was not renewed within the lease
	// timeout) or was released, and possibly taken by another holder. The
	// holder must stop the work the lease guarded.
	ErrLeaseLost = errors.New("jetstream: lease lost")
)

// checkpointNameRE is the rule of contract.ValidCheckpointName, so that a
// dispatcher or group name valid for the local backend is valid here too:
// 1–200 bytes of [A-Za-z0-9_.-], not starting with '.'.
var checkpointNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$`)

// bucketPrefixRE is what a key-value bucket name allows.
var bucketPrefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckpointStore keeps the checkpoints of every topic in one replicated
// key-value bucket, <prefix>-checkpoints (file storage, history 1), shared
// by every mmmq node of the cluster. Safe for concurrent use.
//
// Reads may be served by a replica that lags the leader; writes are
// compare-and-set on the leader, so a stale read costs one ErrStaleCommit
// and a Reload, never a lost or reordered commit.
type CheckpointStore struct {
	kv  js.KeyValue
	log *zap.Logger
}

// NewCheckpointStore creates the bucket <prefix>-checkpoints with the given
// replicas, or binds it when another node created it first (its replica
// count then stays what that node chose). log may be nil.
// Errors: ErrInvalidName for a prefix that is not [A-Za-z0-9_-]+, or the
// JetStream error.
func NewCheckpointStore(ctx context.Context, j js.JetStream, prefix string, replicas int, log *zap.Logger) (*CheckpointStore, error) {
	if log == nil {
		log = zap.NewNop()
	}
	bucket, err := bucketName(prefix, checkpointBucket)
	if err != nil {
		return nil, err
	}
	kv, err := openBucket(ctx, j, js.KeyValueConfig{
		Bucket:      bucket,
		Description: "mmmq checkpoints: next offset and lease epoch per topic and reader",
		Replicas:    replicas,
		Storage:     js.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	return &CheckpointStore{kv: kv, log: log}, nil
}

// Bucket is the name of the key-value bucket.
func (s *CheckpointStore) Bucket() string { return s.kv.Bucket() }

// Open reads the checkpoint name of topic and returns it; it writes nothing,
// so a name that is never committed is never listed. A missing key is offset
// 0; a value that is not 16 bytes or holds a negative offset is logged as an
// error and read as offset 0 (at-least-once: redeliver, never skip, as the
// local backend does with a garbled file), and the next Commit overwrites it.
// Errors: ErrInvalidName, or the JetStream error of the read.
func (s *CheckpointStore) Open(topic, name string) (*Checkpoint, error) {
	key, err := checkpointKey(topic, name)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{
		kv:   s.kv,
		log:  s.log,
		name: name,
		key:  key,
		path: "nats-kv://" + s.kv.Bucket() + "/" + key,
	}
	if err := c.Reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// List returns the names of the checkpoints stored for topic, sorted and
// without duplicates: only names committed (or seeked) at least once.
// Errors: ErrInvalidName, a stored key that does not decode, or the
// JetStream error (a timeout after kvOpTimeout included).
func (s *CheckpointStore) List(topic string) ([]string, error) {
	if err := contract.ValidateTopic(topic); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	kl, err := s.kv.ListKeysFiltered(ctx, escapeKeyPart(topic)+".*")
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of %s: %w", topic, err)
	}
	defer kl.Stop()
	var names []string
	var bad error
	for k := range kl.Keys() {
		_, name, err := splitCheckpointKey(k)
		if err != nil && bad == nil {
			bad = err
		}
		names = append(names, name)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list checkpoints of %s: %w", topic, err)
	}
	if bad != nil {
		return nil, fmt.Errorf("list checkpoints of %s: %w", topic, bad)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Remove deletes the checkpoint name of topic and its history (a purge), so
// that List no longer shows it and a later Open starts from 0. An open
// Checkpoint of it then fails its next Commit with ErrStaleCommit and
// starts from 0 after Reload. Removing a missing checkpoint is not an
// error. Errors: ErrInvalidName, or the JetStream error.
func (s *CheckpointStore) Remove(topic, name string) error {
	key, err := checkpointKey(topic, name)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	if err := s.kv.Purge(ctx, key); err != nil {
		return fmt.Errorf("remove checkpoint %s of %s: %w", name, topic, err)
	}
	return nil
}

// Checkpoint is the durable next offset of one reader on one topic, stored
// under compare-and-set: it remembers the revision it last read or wrote,
// and a Commit succeeds only while that revision is still the latest.
// It implements contract.Checkpoint. Safe for concurrent use.
type Checkpoint struct {
	kv   js.KeyValue
	log  *zap.Logger
	name string
	key  string
	path string

	mu          sync.Mutex
	offset      int64
	storedEpoch uint64 // epoch of the stored value
	revision    uint64 // revision of the stored value; 0 when there is none
	epoch       uint64 // the writer's lease epoch (SetEpoch)
}

// Name is the reader's name (dispatcher or consumer group).
func (c *Checkpoint) Name() string { return c.name }

// Path is nats-kv://<bucket>/<key>, for logs.
func (c *Checkpoint) Path() string { return c.path }

// Offset is the last committed (or read) next offset; 0 for a new checkpoint.
func (c *Checkpoint) Offset() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// StoredEpoch is the lease epoch of the value last read or written.
func (c *Checkpoint) StoredEpoch() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.storedEpoch
}

// SetEpoch sets the lease epoch under which this writer commits (the
// Epoch of its Lease). A commit is refused while the stored epoch is
// greater: the writer lost its lease to a newer holder, which may already
// have committed past it. The fence takes effect once a value under the new
// epoch is stored, so a new holder stamps it at once:
//
//	c.Reload(); c.SetEpoch(lease.Epoch()); c.Commit(c.Offset())
func (c *Checkpoint) SetEpoch(epoch uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch = epoch
}

// Commit stores next under the writer's epoch with a compare-and-set on the
// revision last read or written (a create for the first value), and returns
// after the bucket's replicas acknowledged it. Errors:
//   - ErrStaleCommit: the revision moved (another node committed, or an
//     operator seeked) or the stored epoch is greater than the writer's;
//     the caller must Reload.
//   - ErrBackwardCommit: next is below the stored offset.
//   - the JetStream error; the stored value is then unknown (the write may
//     have landed), and the next Commit tells by failing with ErrStaleCommit.
//
// On every error Offset keeps its previous value.
func (c *Checkpoint) Commit(next int64) error {
	if next < 0 {
		return fmt.Errorf("commit checkpoint %s: negative offset %d", c.path, next)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storedEpoch > c.epoch {
		return fmt.Errorf("commit checkpoint %s under epoch %d: stored under epoch %d: %w", c.path, c.epoch, c.storedEpoch, ErrStaleCommit)
	}
	if next < c.offset {
		return fmt.Errorf("commit checkpoint %s: %d is below the stored %d: %w", c.path, next, c.offset, ErrBackwardCommit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	rev, err := casPut(ctx, c.kv, c.key, encodeCheckpoint(next, c.epoch), c.revision)
	if isConflict(err) {
		return fmt.Errorf("commit checkpoint %s: revision %d is no longer the latest: %w", c.path, c.revision, ErrStaleCommit)
	}
	if err != nil {
		return fmt.Errorf("commit checkpoint %s: %w", c.path, err)
	}
	c.offset, c.storedEpoch, c.revision = next, c.epoch, rev
	return nil
}

// Reload re-reads the stored value and revision (after ErrStaleCommit, or
// after taking over a lease). A deleted or missing key is offset 0, epoch
// 0. Errors: the JetStream error; the checkpoint is then unchanged.
func (c *Checkpoint) Reload() error {
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	off, epoch, rev, err := c.read(ctx)
	if err != nil {
		return err
	}
	c.offset, c.storedEpoch, c.revision = off, epoch, rev
	return nil
}

// SeekTo stores next whatever the stored offset, revision or epoch: the one
// way a checkpoint moves backwards (an operator's explicit seek). It keeps
// the stored epoch, so a seek neither fences out the lease holder nor lets
// a stale one back in. It is a compare-and-set loop rather than a blind put
// so that a commit racing the seek cannot have its (greater) epoch
// overwritten by an older one. Every other writer's next Commit fails with
// ErrStaleCommit and must Reload. Errors: the JetStream error, or more than
// 16 conflicts in a row.
func (c *Checkpoint) SeekTo(next int64) error {
	if next < 0 {
		return fmt.Errorf("seek checkpoint %s: negative offset %d", c.path, next)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	for range seekAttempts {
		_, epoch, rev, err := c.read(ctx)
		if err != nil {
			return fmt.Errorf("seek: %w", err)
		}
		newRev, err := casPut(ctx, c.kv, c.key, encodeCheckpoint(next, epoch), rev)
		if isConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("seek checkpoint %s: %w", c.path, err)
		}
		c.offset, c.storedEpoch, c.revision = next, epoch, newRev
		return nil
	}
	return fmt.Errorf("seek checkpoint %s: %d compare-and-set conflicts in a row", c.path, seekAttempts)
}

// read returns the stored offset, epoch and revision (zeros when there is no
// value). A garbled value is logged and read as offset 0, epoch 0 at its
// revision, so that the next write replaces it.
func (c *Checkpoint) read(ctx context.Context) (offset int64, epoch, rev uint64, err error) {
	e, err := c.kv.Get(ctx, c.key)
	if errors.Is(err, js.ErrKeyNotFound) {
		return 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read checkpoint %s: %w", c.path, err)
	}
	offset, epoch, ok := decodeCheckpoint(e.Value())
	if !ok {
		c.log.Error("checkpoint value is garbled; restarting from the first offset (messages will be redelivered)",
			zap.String("checkpoint", c.path), zap.Int("size", len(e.Value())), zap.Int("want-size", checkpointValueSize))
		return 0, 0, e.Revision(), nil
	}
	return offset, epoch, e.Revision(), nil
}

// encodeCheckpoint returns the 16-byte value (see the layout above).
func encodeCheckpoint(next int64, epoch uint64) []byte {
	b := make([]byte, checkpointValueSize)
	binary.BigEndian.PutUint64(b[0:8], uint64(next))
	binary.BigEndian.PutUint64(b[8:16], epoch)
	return b
}

// decodeCheckpoint reverses encodeCheckpoint; ok is false for a value that
// is not 16 bytes or holds a negative offset.
func decodeCheckpoint(b []byte) (next int64, epoch uint64, ok bool) {
	if len(b) != checkpointValueSize {
		return 0, 0, false
	}
	next = int64(binary.BigEndian.Uint64(b[0:8]))
	epoch = binary.BigEndian.Uint64(b[8:16])
	return next, epoch, next >= 0
}

// checkpointKey validates topic (contract.ValidateTopic) and name (the local
// backend's checkpoint name rule) and returns the key of the pair.
func checkpointKey(topic, name string) (string, error) {
	if err := contract.ValidateTopic(topic); err != nil {
		return "", fmt.Errorf("%w: %v", ErrInvalidName, err)
	}
	if !checkpointNameRE.MatchString(name) {
		return "", fmt.Errorf("%w: checkpoint name %q: want 1-200 characters of [A-Za-z0-9_.-], not starting with '.'", ErrInvalidName, name)
	}
	return escapeKeyPart(topic) + "." + escapeKeyPart(name), nil
}

// splitCheckpointKey reverses checkpointKey.
func splitCheckpointKey(key string) (topic, name string, err error) {
	t, n, ok := strings.Cut(key, ".")
	if !ok || strings.Contains(n, ".") {
		return "", "", fmt.Errorf("checkpoint key %q is not <topic>.<name>", key)
	}
	if topic, err = unescapeKeyPart(t); err != nil {
		return "", "", err
	}
	if name, err = unescapeKeyPart(n); err != nil {
		return "", "", err
	}
	return topic, name, nil
}

// escapeKeyPart turns any non-empty string into one key-value subject token:
// the bytes [A-Za-z0-9_-] stay, every other byte becomes '=' and two
// upper-case hex digits ('.' → "=2E", '/' → "=2F", '=' → "=3D"). The result
// holds no '.', so it never splits into tokens, and unescapeKeyPart reverses
// it exactly. Topic segments and reader names are mostly [A-Za-z0-9_-], so
// keys stay readable in `nats kv ls`.
func escapeKeyPart(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plainKeyByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&0x0f])
	}
	return b.String()
}

// unescapeKeyPart reverses escapeKeyPart. Errors: a byte outside
// [A-Za-z0-9_=-], or an '=' not followed by two upper-case hex digits.
func unescapeKeyPart(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case plainKeyByte(c):
			b.WriteByte(c)
		case c == '=' && i+2 < len(s) && isUpperHex(s[i+1]) && isUpperHex(s[i+2]):
			b.WriteByte(hexValue(s[i+1])<<4 | hexValue(s[i+2]))
			i += 2
		default:
			return "", fmt.Errorf("key part %q: bad escape at byte %d", s, i)
		}
	}
	return b.String(), nil
}

func plainKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func hexValue(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// bucketName returns <prefix>-<suffix>. Errors: ErrInvalidName for a prefix
// that is not [A-Za-z0-9_-]+ (what a bucket name allows).
func bucketName(prefix, suffix string) (string, error) {
	if !bucketPrefixRE.MatchString(prefix) {
		return "", fmt.Errorf("%w: bucket prefix %q: want [A-Za-z0-9_-]+", ErrInvalidName, prefix)
	}
	return prefix + "-" + suffix, nil
}

// openBucket creates the bucket described by cfg, or binds it when it
// already exists (created by another node, perhaps with other settings).
func openBucket(ctx context.Context, j js.JetStream, cfg js.KeyValueConfig) (js.KeyValue, error) {
	kv, err := j.CreateKeyValue(ctx, cfg)
	if errors.Is(err, js.ErrBucketExists) {
		kv, err = j.KeyValue(ctx, cfg.Bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// casPut writes value under key if rev is still its latest revision: a
// create when rev is 0 (the key is missing or deleted), an update otherwise.
// A lost race is an error for which isConflict is true.
func casPut(ctx context.Context, kv js.KeyValue, key string, value []byte, rev uint64) (uint64, error) {
	if rev == 0 {
		return kv.Create(ctx, key, value)
	}
	return kv.Update(ctx, key, value, rev)
}

// isConflict reports whether err is a lost compare-and-set: the key exists
// (Create) or its revision moved (Update, Delete with LastRevision).
func isConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, js.ErrKeyExists) || errors.Is(err, js.ErrKeyRevisionMismatch) {
		return true
	}
	// The server's "wrong last sequence" codes, which the client does not
	// always map to the errors above: 10071 and, on newer servers, 10164.
	var je js.JetStreamError
	if errors.As(err, &je) && je.APIError() != nil {
		code := je.APIError().ErrorCode
		return code == 10071 || code == 10164
	}
	return false
}
