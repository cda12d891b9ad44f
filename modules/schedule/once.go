package schedule

import (
	"context"
	"fmt"
	"hash/maphash"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Idempotent is a Scheduler that deduplicates the producer ids of
// scheduled publishes (contract.OnceScheduler): a scheduled publish whose
// producer id was already scheduled on the same topic within Window
// stores nothing and is answered with the first schedule (its scheduleId
// and deliverAt, "duplicate": true), whether that one is still pending,
// cancelled or already delivered. It is the idempotent-publish window
// (mmmq.broker.dedup.window) of ordinary publishes, kept apart: a direct
// publish of the same id to the topic is not a duplicate of the schedule,
// nor the schedule of it (both are stored), and the message the mover
// appends when due is not deduplicated against the topic's window.
//
// Memory: at most maxIDs ids (all topics together; the oldest are
// forgotten first), each about 175 bytes with its schedule id (measured
// over 100,000 ids: key, entry, schedule id, map and ring slots). Restarts:
// the first ScheduleOnce after Start reads the producer ids of the
// messages still pending (a read of every bucket file, as Start's scan
// does) and remembers those published within the window; a schedule
// delivered or cancelled before the restart is not remembered.
type Idempotent struct {
	*Scheduler
	window time.Duration
	maxIDs int
	seeds  [2]maphash.Seed

	loadMu sync.Mutex
	loaded bool

	mu    sync.Mutex
	ids   map[onceKey]*onceEntry
	order []onceRef // in the order remembered (publish time)
	head  int       // order[:head] is forgotten
}

// onceKey is the 128-bit keyed hash of a topic and a producer id.
type onceKey [2]uint64

type onceEntry struct {
	topic string
	res   contract.Scheduled
	at    int64 // publish time, Unix ns: forgotten at at + window
	// done is closed when the first schedule's outcome (res or err) is in.
	done chan struct{}
	err  error
}

type onceRef struct {
	k onceKey
	e *onceEntry
}

// closedDone is the done channel of entries known at once (rebuilt).
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewIdempotent returns s deduplicating producer ids within window (0:
// never; ScheduleOnce is then Schedule), remembering at most maxIDs ids
// (default 100000).
func NewIdempotent(s *Scheduler, window time.Duration, maxIDs int) *Idempotent {
	if maxIDs <= 0 {
		maxIDs = 100000
	}
	return &Idempotent{Scheduler: s, window: window, maxIDs: maxIDs,
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, ids: map[onceKey]*onceEntry{}}
}

var _ contract.OnceScheduler = (*Idempotent)(nil)

// Check implements contract.OnceScheduler: the rules Schedule applies
// before it stores anything, 501 NOT_IMPLEMENTED where the broker cannot
// schedule and 400 for a deliverAt beyond MaxDelay from now.
func (i *Idempotent) Check(deliverAt time.Time) error {
	o := i.Scheduler.opts
	if o.Unsupported != "" {
		return contract.NotImplemented("scheduled messages (deliverAt, delay) are not supported here: %s", o.Unsupported)
	}
	return contract.CheckMaxDelay(deliverAt, o.Now(), o.MaxDelay)
}

func (i *Idempotent) key(topic, id string) onceKey {
	var h [2]maphash.Hash
	for j := range h {
		h[j].SetSeed(i.seeds[j])
		h[j].WriteString(topic)
		h[j].WriteByte(0)
		h[j].WriteString(id)
	}
	return onceKey{h[0].Sum64(), h[1].Sum64()}
}

// ScheduleOnce implements contract.OnceScheduler. A retry that arrives
// while the first schedule of its id is being stored waits for its
// outcome: the first schedule when it was stored, or, when it failed, the
// retry is scheduled as new. ctx ends only that wait (its error is
// returned; nothing was stored by this call).
func (i *Idempotent) ScheduleOnce(ctx context.Context, topic, producerID string, stored []byte, deliverAt time.Time) (contract.Scheduled, error) {
	if i.window <= 0 || producerID == "" || i.Scheduler.opts.Unsupported != "" {
		// (Unsupported: Schedule answers 501 without touching the store.)
		id, err := i.Schedule(ctx, topic, stored, deliverAt)
		return contract.Scheduled{ID: id, DeliverAt: time.UnixMilli(roundUpMs(deliverAt))}, err
	}
	i.load()
	k := i.key(topic, producerID)
	for {
		i.mu.Lock()
		i.expireLocked(i.Scheduler.opts.Now().UnixNano())
		e := i.ids[k]
		if e == nil {
			e = &onceEntry{topic: topic, at: i.Scheduler.opts.Now().UnixNano(), done: make(chan struct{})}
			i.rememberLocked(k, e)
			i.mu.Unlock()
			return i.first(ctx, k, e, topic, stored, deliverAt)
		}
		i.mu.Unlock()
		select {
		case <-e.done:
		case <-ctx.Done():
			return contract.Scheduled{}, fmt.Errorf("schedule: wait for the first schedule of id %q: %w", producerID, ctx.Err())
		}
		if e.err == nil {
			r := e.res
			r.Duplicate = true
			return r, nil
		}
		// The first failed and was forgotten: this one is new.
	}
}

// first stores the first schedule of k and publishes its outcome to the
// retries waiting on e.
func (i *Idempotent) first(ctx context.Context, k onceKey, e *onceEntry, topic string, stored []byte, deliverAt time.Time) (contract.Scheduled, error) {
	id, err := i.Schedule(ctx, topic, stored, deliverAt)
	i.mu.Lock()
	e.res, e.err = contract.Scheduled{ID: id, DeliverAt: time.UnixMilli(roundUpMs(deliverAt))}, err
	if err != nil && i.ids[k] == e {
		delete(i.ids, k)
	}
	close(e.done)
	i.mu.Unlock()
	return e.res, err
}

// DropTopic implements contract.ScheduleDropper: the Scheduler's
// DropTopic, then the topic's producer ids are forgotten, so that a
// deleted and recreated topic starts with an empty window, as the window
// of ordinary publishes does (a retried id would otherwise be answered as
// a duplicate of a schedule that was dropped, and nothing stored). They
// are forgotten whatever the outcome: a drop that failed before dropping
// anything then lets a retry schedule its message a second time (a
// duplicate), never lose it.
func (i *Idempotent) DropTopic(ctx context.Context, topic string, del func() error) (int, error) {
	n, err := i.Scheduler.DropTopic(ctx, topic, del)
	i.mu.Lock()
	for _, r := range i.order[i.head:] {
		if r.e.topic == topic && i.ids[r.k] == r.e {
			delete(i.ids, r.k)
		}
	}
	i.mu.Unlock()
	return n, err
}

// roundUpMs is t in Unix ms, rounded up (the due time Schedule keeps).
func roundUpMs(t time.Time) int64 {
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms
}

// rememberLocked adds e under k, forgetting the oldest over maxIDs; i.mu
// is held.
func (i *Idempotent) rememberLocked(k onceKey, e *onceEntry) {
	i.ids[k] = e
	i.order = append(i.order, onceRef{k, e})
	for len(i.ids) > i.maxIDs && i.popLocked() {
	}
}

// expireLocked forgets the ids remembered before now - window; i.mu is
// held.
func (i *Idempotent) expireLocked(now int64) {
	horizon := now - int64(i.window)
	for i.head < len(i.order) && i.order[i.head].e.at < horizon && i.popLocked() {
	}
}

// popLocked forgets the oldest remembered id; false when none is left.
func (i *Idempotent) popLocked() bool {
	if i.head == len(i.order) {
		return false
	}
	r := i.order[i.head]
	i.order[i.head] = onceRef{}
	i.head++
	if i.ids[r.k] == r.e {
		delete(i.ids, r.k)
	}
	if i.head > 1024 && i.head > len(i.order)/2 {
		i.order = slices.Clip(append(i.order[:0:0], i.order[i.head:]...))
		i.head = 0
	}
	return true
}

// Remembered is the number of producer ids remembered now (after the
// window's end is applied).
func (i *Idempotent) Remembered() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.expireLocked(i.Scheduler.opts.Now().UnixNano())
	return len(i.ids)
}

// load rebuilds the window once from the pending messages of the bucket
// files: those with a producer id ("idFromProducer":true) whose timestamp
// is within the window. It only reads (a record being appended meanwhile
// ends that file's scan; it belongs to a ScheduleOnce that waits for this
// load, or to a publish without an id). A file that cannot be read is
// logged and skipped: its ids are not deduplicated.
func (i *Idempotent) load() {
	i.loadMu.Lock()
	defer i.loadMu.Unlock()
	if i.loaded {
		return
	}
	i.loaded = true
	s := i.Scheduler
	fsys, dir := s.opts.FS, s.opts.Dir
	ents, err := fsys.List(dir)
	if err != nil {
		return // nothing scheduled yet (or the store fails; Schedule says so)
	}
	horizon := s.opts.Now().UnixNano() - int64(i.window)
	type found struct {
		k     onceKey
		topic string
		at    int64
		r     contract.Scheduled
	}
	var all []found
	for _, de := range ents {
		if _, ok := parseBucketName(de.Name); de.IsDir || !ok {
			continue
		}
		name := filepath.Join(dir, de.Name)
		err := func() error {
			f, err := fsys.Open(name)
			if err != nil {
				if vfs.IsNotExist(err) {
					return nil // moved and removed meanwhile
				}
				return err
			}
			defer f.Close()
			size, err := f.Size()
			if err != nil {
				return err
			}
			// One window of pending entries at a time, as the mover loads
			// them: memory bounded by the budget, whatever the file holds.
			for lo := first; ; {
				w, err := scanWindow(f, size, lo, s.windowMax(), nil)
				if err != nil {
					return err
				}
				for _, e := range w.pending {
					msg, err := readMessage(f, e)
					if err != nil {
						return err
					}
					id, fromProducer, ts, ok := contract.StoredMeta(msg)
					if !ok || !fromProducer || ts*int64(time.Millisecond) < horizon {
						continue
					}
					all = append(all, found{i.key(e.topic, id), e.topic, ts * int64(time.Millisecond), contract.Scheduled{ID: e.id, DeliverAt: time.UnixMilli(e.at)}})
				}
				if !w.more {
					return nil
				}
				lo = w.bound
			}
		}()
		if err != nil {
			s.log.Warn("scheduled messages: producer ids of a bucket file not read; retries of them are scheduled again",
				zap.String("file", name), zap.Error(err))
		}
	}
	slices.SortStableFunc(all, func(a, b found) int { return int(min(max(a.at-b.at, -1), 1)) })
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, f := range all {
		if _, dup := i.ids[f.k]; !dup {
			i.rememberLocked(f.k, &onceEntry{topic: f.topic, res: f.r, at: f.at, done: closedDone})
		}
	}
	if len(all) > 0 {
		s.log.Info("scheduled messages: producer ids of pending schedules remembered", zap.Int("ids", len(i.ids)))
	}
}
