package jetstream

import (
	"context"
	"errors"
	"fmt"
	"sync"

	js "github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/admin"
)

const (
	adminBucket = "admin"       // <prefix>-admin: what the brokers of a cluster share besides topics
	adminKey    = "dispatchers" // its key holding the api dispatchers
)

// specStore keeps the dispatchers created through the admin API in the
// key "dispatchers" of the replicated bucket <prefix>-admin, as the JSON
// document dispatchers.json holds on a local broker (admin.EncodeSpecs):
// every broker of the cluster runs them (admin.SpecStore, and
// admin.SpecWatcher: a change made through one broker is applied by the
// others). A save is a compare-and-set on the revision this broker last
// loaded, saved or was told of, so two brokers changing the list at once
// cannot lose one change: the later one gets admin.ErrConflict (409).
type specStore struct {
	kv  js.KeyValue
	log *zap.Logger

	mu  sync.Mutex
	rev uint64 // the revision last loaded, saved or watched; 0: none stored
}

var (
	_ admin.SpecStore         = (*specStore)(nil)
	_ admin.SpecWatcher       = (*specStore)(nil)
	_ admin.SpecStoreProvider = (*Backend)(nil)
)

// DispatcherStore opens (creating when missing) the bucket <prefix>-admin
// (admin.SpecStoreProvider).
func (b *Backend) DispatcherStore() (admin.SpecStore, error) {
	bucket, err := bucketName(b.cfg.StreamPrefix, adminBucket)
	if err != nil {
		return nil, err
	}
	var st *specStore
	err = b.retrying("open "+bucket, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), b.cfg.RequestTimeout)
		defer cancel()
		kv, err := openBucket(ctx, b.js, js.KeyValueConfig{
			Bucket:      bucket,
			Description: "mmmq: the dispatchers created through the admin API",
			Replicas:    int(b.cfg.Replicas),
			Storage:     js.FileStorage,
		})
		if err != nil {
			return classify(err)
		}
		// A new bucket answers reads once it has a leader: wait for that
		// here, so that the admin's first Load does not fail startup.
		if _, err := kv.Get(ctx, adminKey); err != nil && !errors.Is(err, js.ErrKeyNotFound) {
			return classify(err)
		}
		st = &specStore{kv: kv, log: b.opts.Logger}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w%s", err, replicasHint(err, int(b.cfg.Replicas)))
	}
	return st, nil
}

func (s *specStore) Path() string { return "nats-kv://" + s.kv.Bucket() + "/" + adminKey }

// Load reads the list and remembers its revision (none stored: empty).
func (s *specStore) Load() ([]admin.Spec, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	e, err := s.kv.Get(ctx, adminKey)
	if errors.Is(err, js.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.Path(), classify(err))
	}
	specs, err := admin.DecodeSpecs(e.Value(), s.Path())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.rev = e.Revision()
	s.mu.Unlock()
	return specs, nil
}

// Save stores specs if the list is still at the revision this broker last
// knew; admin.ErrConflict otherwise.
func (s *specStore) Save(specs []admin.Spec) error {
	b, err := admin.EncodeSpecs(specs)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), kvOpTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	rev, err := casPut(ctx, s.kv, adminKey, b, s.rev)
	if isConflict(err) {
		return fmt.Errorf("save %s at revision %d: %w", s.Path(), s.rev, admin.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("save %s: %w", s.Path(), classify(err))
	}
	s.rev = rev
	return nil
}

// Watch calls fn with the list each time another broker stores a newer
// revision of it, until stop. stop waits for nothing from NATS; fn is not
// called once it has returned.
func (s *specStore) Watch(fn func([]admin.Spec)) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	w, err := s.kv.Watch(ctx, adminKey, js.UpdatesOnly())
	if err != nil {
		cancel()
		return nil, fmt.Errorf("watch %s: %w", s.Path(), classify(err))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.Updates() {
			if e == nil || e.Operation() != js.KeyValuePut {
				continue
			}
			s.mu.Lock()
			newer := e.Revision() > s.rev
			if newer {
				s.rev = e.Revision()
			}
			s.mu.Unlock()
			if !newer {
				continue // this broker's own save
			}
			specs, err := admin.DecodeSpecs(e.Value(), s.Path())
			if err != nil {
				s.log.Error("a dispatcher list stored by another broker is invalid; ignored", zap.Error(err))
				continue
			}
			fn(specs)
		}
	}()
	return func() {
		// Not w.Stop(): it deletes the watch's consumer with a request and
		// waits for the answer (nats.go's 5 s default), so a broker stopping
		// while its NATS cluster could not answer (nodes died, no meta
		// leader) waited those 5 s. Cancelling the watch's context
		// unsubscribes in nats.go's own goroutine (the updates end at once),
		// which then sends that delete; Backend.Close, the broker's last
		// stop hook, ends it if no answer has come by then, and the server
		// removes a consumer left behind once it has been inactive for its
		// inactive threshold.
		cancel()
		<-done
	}, nil
}
