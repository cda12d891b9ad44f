package jetstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// kvCheckpoints keeps every topic's checkpoints in one key-value bucket,
// "<prefix>-checkpoints": key "<stream name>.<checkpoint name with '.' as
// '='>" (the stream name has no '.', a checkpoint name no '='; both are
// valid key characters), value the next offset as 8 bytes big-endian.
// A commit is a compare-and-set on the key's last revision, so two
// brokers committing the same checkpoint cannot both win.
type kvCheckpoints struct {
	kv      jetstream.KeyValue
	prefix  string
	timeout time.Duration
}

// newKVCheckpoints opens the bucket, creating it (file storage, replicas
// copies, one value per key) when missing; a creation by another broker at
// the same moment is tolerated.
func newKVCheckpoints(ctx context.Context, js jetstream.JetStream, prefix string, replicas int, timeout time.Duration) (*kvCheckpoints, error) {
	bucket := prefix + "-checkpoints"
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bucket, Replicas: replicas, Storage: jetstream.FileStorage, History: 1,
		Description: "mmmq checkpoints: next offset per topic and reader",
	})
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint bucket %s: %w%s", bucket, classify(err), replicasHint(err, replicas))
	}
	return &kvCheckpoints{kv: kv, prefix: prefix, timeout: timeout}, nil
}

func (s *kvCheckpoints) key(topic, name string) string {
	return StreamName(s.prefix, topic) + "." + strings.ReplaceAll(name, ".", "=")
}

func (s *kvCheckpoints) open(topic, name string) (contract.Checkpoint, error) {
	if err := storage.ValidCheckpointName(name); err != nil {
		return nil, err
	}
	cp := &kvCheckpoint{s: s, name: name, key: s.key(topic, name)}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	e, err := s.kv.Get(ctx, cp.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return cp, nil
	case err != nil:
		return nil, fmt.Errorf("open checkpoint %s of topic %s: %w", name, topic, classify(err))
	case len(e.Value()) != 8:
		return nil, fmt.Errorf("open checkpoint %s of topic %s: %w: value of %d bytes, want 8", name, topic, storage.ErrCorrupt, len(e.Value()))
	}
	cp.next, cp.rev = int64(binary.BigEndian.Uint64(e.Value())), e.Revision()
	return cp, nil
}

func (s *kvCheckpoints) list(topic string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	keys, err := s.keys(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("list checkpoints of topic %s: %w", topic, err)
	}
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		_, n, _ := strings.Cut(k, ".")
		names = append(names, strings.ReplaceAll(n, "=", "."))
	}
	sort.Strings(names)
	return names, nil
}

// keys lists topic's keys in the bucket.
func (s *kvCheckpoints) keys(ctx context.Context, topic string) ([]string, error) {
	kl, err := s.kv.ListKeysFiltered(ctx, StreamName(s.prefix, topic)+".*")
	if err != nil {
		return nil, classify(err)
	}
	defer kl.Stop()
	var out []string
	for k := range kl.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// remove purges topic's checkpoints (a topic deleted).
func (s *kvCheckpoints) remove(topic string) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	keys, err := s.keys(ctx, topic)
	for _, k := range keys {
		if perr := s.kv.Purge(ctx, k); perr != nil && err == nil {
			err = classify(perr)
		}
	}
	if err != nil {
		return fmt.Errorf("remove checkpoints of topic %s: %w", topic, err)
	}
	return nil
}

// kvCheckpoint is one checkpoint in the bucket. Safe for concurrent use.
type kvCheckpoint struct {
	s         *kvCheckpoints
	name, key string

	mu   sync.Mutex
	next int64
	rev  uint64 // the key's revision last read or written; 0 = no key yet
}

func (c *kvCheckpoint) Name() string { return c.name }

// Path is "nats-kv:<bucket>/<key>".
func (c *kvCheckpoint) Path() string { return "nats-kv:" + c.s.kv.Bucket() + "/" + c.key }

func (c *kvCheckpoint) Offset() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next
}

// Commit stores next with a compare-and-set on the revision this
// checkpoint last saw (a create for the first commit): once the bucket
// acknowledged it, it is stored by a majority of the bucket's replicas.
// Errors: the key changed under it (another broker committed it), or the
// cluster did not answer; Offset keeps the previous value.
func (c *kvCheckpoint) Commit(next int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(next))
	ctx, cancel := context.WithTimeout(context.Background(), c.s.timeout)
	defer cancel()
	var rev uint64
	var err error
	if c.rev == 0 {
		rev, err = c.s.kv.Create(ctx, c.key, v[:])
	} else {
		rev, err = c.s.kv.Update(ctx, c.key, v[:], c.rev)
	}
	if err != nil {
		return fmt.Errorf("commit checkpoint %s: %w", c.name, classify(err))
	}
	c.next, c.rev = next, rev
	return nil
}
