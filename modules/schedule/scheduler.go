package schedule

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Defaults of Options (and of mmmq.broker.schedule).
const (
	DefaultMaxDelay           = 30 * 24 * time.Hour
	DefaultMaxPendingPerTopic = 1_000_000
	DefaultBucketWidth        = time.Minute
	DefaultMoveBatch          = 1000
)

// Dir is the name of the directory under the data root that holds the
// pending messages: it starts with '.', so no topic can have it.
const Dir = ".scheduled"

// Errors.
var (
	// ErrClosed is an operation before Start or after Stop.
	ErrClosed = contract.NewError(contract.CodeUnavailable, "schedule: not running")
	// ErrFailed wraps the write or fsync error after which the scheduler
	// takes no more messages (an fsync is never retried, then trusted).
	ErrFailed = contract.NewError(contract.CodeUnavailable, "schedule: store failed")
)

// Target is where due messages go: Append stores stored in topic
// durably (fsynced) before it returns nil.
type Target interface {
	Append(ctx context.Context, topic string, stored []byte) error
}

// Options configures a Scheduler.
type Options struct {
	// FS and Dir hold the bucket files (Dir is created when missing).
	FS  vfs.FS
	Dir string
	// MaxDelay is the latest a message may be due, from the publish
	// (mmmq.broker.schedule.max-delay); later is 400. Default 30 days.
	MaxDelay time.Duration
	// MaxPendingPerTopic caps a topic's pending messages
	// (mmmq.broker.schedule.max-pending-per-topic); one more is 507.
	// Default 1000000.
	MaxPendingPerTopic int
	// BucketWidth is the span of due times one bucket file holds
	// (mmmq.broker.schedule.bucket-width). Default 1m.
	BucketWidth time.Duration
	// MoveBatch is the most messages read into memory and moved per step
	// (mmmq.broker.schedule.move-batch). Default 1000.
	MoveBatch int
	// Unsupported, when not "", makes every Schedule 501 NOT_IMPLEMENTED
	// with this reason (a storage backend the scheduler cannot serve).
	Unsupported string
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *zap.Logger

	// skipSync is the negative control of the power-loss test: nothing is
	// fsynced, so acknowledged schedules can be lost.
	skipSync bool
}

// Scheduler is the scheduled-message store and its mover. It implements
// contract.Scheduler. Build it with New, then Start (recovery: scan the
// bucket files; launch the mover) and Stop.
type Scheduler struct {
	opts   Options
	target Target
	log    *zap.Logger

	mu      sync.Mutex
	running bool
	failed  error
	sizes   map[int64]int64 // bucket start → end of its file's records
	pending map[string]int  // topic → pending messages
	// cur is the loaded bucket: the earliest one whose start has passed
	// when the mover last looked, its pending entries sorted by due time.
	cur    *loaded
	moving map[string]bool // ids being appended to their topic now
	wakeAt int64           // the mover's next wake-up (Unix ms), 0 for none
	// dirMade: Dir exists and its entry is durable.
	dirMade bool

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

type loaded struct {
	bucket  int64
	pending []entry
}

// New returns a scheduler that moves due messages to target. Nothing is
// read before Start.
func New(opts Options, target Target) *Scheduler {
	if opts.MaxDelay <= 0 {
		opts.MaxDelay = DefaultMaxDelay
	}
	if opts.MaxPendingPerTopic <= 0 {
		opts.MaxPendingPerTopic = DefaultMaxPendingPerTopic
	}
	if opts.BucketWidth <= 0 {
		opts.BucketWidth = DefaultBucketWidth
	}
	if opts.MoveBatch <= 0 {
		opts.MoveBatch = DefaultMoveBatch
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Scheduler{opts: opts, target: target, log: opts.Logger, wake: make(chan struct{}, 1)}
}

var _ contract.Scheduler = (*Scheduler)(nil)

// Start recovers the store (Open) and launches the mover.
func (s *Scheduler) Start(context.Context) error {
	if err := s.Open(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.run(ctx)
	return nil
}

// Stop stops the mover, waiting for its current step (a topic append and
// its delivered records) to finish or ctx to end.
func (s *Scheduler) Stop(ctx context.Context) error {
	if s.cancel != nil {
		s.cancel()
		select {
		case <-s.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.mu.Lock()
	s.running = false
	s.mu.Unlock()
	return nil
}

// Open scans every bucket file (recovery, see the package documentation):
// it cuts torn tails, removes files with nothing pending and counts each
// topic's pending messages, one file at a time. Start calls it; tests that
// drive MoveDue themselves call it instead of Start.
func (s *Scheduler) Open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fsys, dir := s.opts.FS, s.opts.Dir
	s.sizes, s.pending, s.moving, s.cur, s.failed, s.wakeAt = map[int64]int64{}, map[string]int{}, map[string]bool{}, nil, nil, 0
	s.dirMade = false
	ents, err := fsys.List(dir)
	switch {
	case vfs.IsNotExist(err):
		// Nothing was ever scheduled: the directory is made by the
		// first Schedule (a broker that never schedules writes nothing).
		s.running = true
		return nil
	case err != nil:
		return fmt.Errorf("schedule: list %s: %w", dir, err)
	}
	// Its entry (and its parents') may still be only in the page cache
	// after a killed process: made durable before anything is served.
	if err := s.makeDir(); err != nil {
		return fmt.Errorf("schedule: %w", err)
	}
	removed := false
	for _, e := range ents {
		b, ok := parseBucketName(e.Name)
		if e.IsDir || !ok {
			continue
		}
		name := filepath.Join(dir, e.Name)
		res, err := s.scanPath(name)
		if err != nil {
			return err
		}
		if len(res.pending) == 0 {
			if err := fsys.Remove(name); err != nil {
				return fmt.Errorf("schedule: remove %s: %w", name, err)
			}
			removed = true
			continue
		}
		s.sizes[b] = res.end
		for _, p := range res.pending {
			s.pending[p.topic]++
		}
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			return fmt.Errorf("schedule: sync %s: %w", dir, err)
		}
	}
	s.running = true
	return nil
}

// scanPath scans one bucket file and cuts a torn tail (truncate, fsync).
func (s *Scheduler) scanPath(name string) (scanResult, error) {
	f, err := s.opts.FS.OpenRW(name)
	if err != nil {
		return scanResult{}, fmt.Errorf("schedule: open %s: %w", name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return scanResult{}, fmt.Errorf("schedule: size %s: %w", name, err)
	}
	res, err := scanFile(f, size)
	if err != nil {
		return res, fmt.Errorf("schedule: scan %s: %w", name, err)
	}
	if res.end < size {
		s.log.Warn("scheduled messages: cut a torn tail", zap.String("file", name), zap.Int64("at", res.end), zap.Int64("bytes", size-res.end))
		if err := f.Truncate(res.end); err != nil {
			return res, fmt.Errorf("schedule: cut %s at %d: %w", name, res.end, err)
		}
		if err := s.sync(f); err != nil {
			return res, fmt.Errorf("schedule: sync %s: %w", name, err)
		}
	}
	return res, nil
}

// makeDir creates Dir and makes its entry durable, and every parent
// MkdirAll may have made with it (a few fsyncs, once). s.mu is held.
func (s *Scheduler) makeDir() error {
	fsys, dir := s.opts.FS, s.opts.Dir
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for d := dir; filepath.Dir(d) != d; d = filepath.Dir(d) {
		if err := fsys.SyncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("fsync %s: %w", filepath.Dir(d), err)
		}
	}
	s.dirMade = true
	return nil
}

func (s *Scheduler) sync(f vfs.File) error {
	if s.opts.skipSync {
		return nil
	}
	return f.Sync()
}

func (s *Scheduler) syncDir() error {
	if s.opts.skipSync {
		return nil
	}
	return s.opts.FS.SyncDir(s.opts.Dir)
}

func (s *Scheduler) bucketOf(at int64) int64 {
	w := s.opts.BucketWidth.Milliseconds()
	return at - at%w
}

func (s *Scheduler) path(bucket int64) string { return filepath.Join(s.opts.Dir, bucketName(bucket)) }

// usable is nil when the store takes writes; s.mu is held.
func (s *Scheduler) usable() error {
	switch {
	case s.failed != nil:
		return s.failed
	case !s.running:
		return ErrClosed
	}
	return nil
}

// fail records err as the store's failure; s.mu is held.
func (s *Scheduler) fail(err error) error {
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		s.log.Error("scheduled messages: store failed; restart the broker", zap.Error(err))
	}
	return s.failed
}

// appendRecord writes rec at the end of bucket's file (created when
// missing) and fsyncs it (and the directory for a new file). Any error
// fails the store. s.mu is held.
func (s *Scheduler) appendRecord(bucket int64, rec []byte) error {
	name := s.path(bucket)
	end, exists := s.sizes[bucket]
	if !s.dirMade {
		if err := s.makeDir(); err != nil {
			return s.fail(err)
		}
	}
	var f vfs.File
	var err error
	if exists {
		f, err = s.opts.FS.OpenRW(name)
	} else {
		f, err = s.opts.FS.Create(name)
	}
	if err != nil {
		return s.fail(fmt.Errorf("open %s: %w", name, err))
	}
	defer f.Close()
	if _, err := f.WriteAt(rec, end); err != nil {
		return s.fail(fmt.Errorf("write %s: %w", name, err))
	}
	if err := s.sync(f); err != nil {
		return s.fail(fmt.Errorf("fsync %s: %w", name, err))
	}
	if !exists {
		if err := s.syncDir(); err != nil {
			return s.fail(fmt.Errorf("fsync %s: %w", s.opts.Dir, err))
		}
	}
	s.sizes[bucket] = end + int64(len(rec))
	return nil
}

// Schedule implements contract.Scheduler: the message is in its bucket
// file, fsynced, when it returns nil. A deliverAt more than MaxDelay from
// now is 400; a topic at MaxPendingPerTopic is 507.
func (s *Scheduler) Schedule(_ context.Context, topic string, stored []byte, deliverAt time.Time) (string, error) {
	if s.opts.Unsupported != "" {
		return "", contract.NotImplemented("scheduled messages (deliverAt, delay) are not supported here: %s", s.opts.Unsupported)
	}
	now := s.opts.Now()
	at := deliverAt.UnixMilli()
	if time.UnixMilli(at).Before(deliverAt) {
		at++
	}
	if d := time.UnixMilli(at).Sub(now); d > s.opts.MaxDelay {
		return "", contract.BadRequest("deliverAt is %v from now, over the maximum delay of %v (mmmq.broker.schedule.max-delay)", d.Round(time.Second), s.opts.MaxDelay)
	}
	if len(topic) > 255 {
		return "", contract.BadRequest("topic name too long to schedule") // unreachable: ValidateTopic caps it at 249 bytes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return "", err
	}
	if n := s.pending[topic]; n >= s.opts.MaxPendingPerTopic {
		return "", contract.TooManyScheduled("topic %q has %d pending scheduled messages, the maximum (mmmq.broker.schedule.max-pending-per-topic is %d); nothing was stored",
			topic, n, s.opts.MaxPendingPerTopic)
	}
	b := s.bucketOf(at)
	id := scheduleID(b, rand.Uint64())
	end := s.sizes[b]
	if err := s.appendRecord(b, appendScheduled(nil, at, id, topic, stored)); err != nil {
		return "", err
	}
	s.pending[topic]++
	if c := s.cur; c != nil && c.bucket == b {
		e := entry{id: id, topic: topic, at: at, off: end, n: int(s.sizes[b] - end)}
		i, _ := slices.BinarySearchFunc(c.pending, at, func(x entry, t int64) int {
			if x.at <= t {
				return -1
			}
			return 1
		})
		c.pending = slices.Insert(c.pending, i, e)
	}
	if s.wakeAt == 0 || at < s.wakeAt {
		s.wakeAt = at
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return id, nil
}

// Cancel implements contract.Scheduler: a pending message of topic gets
// its cancelled record (fsynced) and is never delivered.
func (s *Scheduler) Cancel(topic, id string) (bool, error) {
	b, ok := parseScheduleID(id)
	if !ok {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return false, err
	}
	if _, ok := s.sizes[b]; !ok || s.moving[id] {
		return false, nil
	}
	var pend []entry
	if c := s.cur; c != nil && c.bucket == b {
		pend = c.pending
	} else {
		res, err := s.scanPath(s.path(b))
		if err != nil {
			return false, err
		}
		pend = res.pending
	}
	i := slices.IndexFunc(pend, func(e entry) bool { return e.id == id && e.topic == topic })
	if i < 0 {
		return false, nil
	}
	if err := s.appendRecord(b, appendDone(nil, kindCancelled, id)); err != nil {
		return false, err
	}
	s.dropPending(topic, 1)
	if c := s.cur; c != nil && c.bucket == b {
		c.pending = slices.Delete(c.pending, i, i+1)
	}
	return true, nil
}

// dropPending lowers topic's pending count by n; s.mu is held.
func (s *Scheduler) dropPending(topic string, n int) {
	if s.pending[topic] -= n; s.pending[topic] <= 0 {
		delete(s.pending, topic)
	}
}

// Pending implements contract.Scheduler.
func (s *Scheduler) Pending(topic string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[topic]
}

// PendingTotal is the number of pending messages of every topic.
func (s *Scheduler) PendingTotal() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.pending {
		n += c
	}
	return n
}

// due is one message the mover appends.
type due struct {
	entry
	bucket int64 // its file (not bucketOf(at): the width may have changed since)
	stored []byte
}

// MoveDue appends every message due at the clock's now to its topic and
// records it delivered, bucket by bucket, MoveBatch at a time. It returns
// the number moved and the next time something falls due (zero when
// nothing is pending). The mover calls it; tests may call it directly.
func (s *Scheduler) MoveDue(ctx context.Context) (moved int, next time.Time, err error) {
	for {
		batch, next, err := s.takeDue()
		if err != nil || len(batch) == 0 {
			return moved, next, err
		}
		n, err := s.deliver(ctx, batch)
		moved += n
		if err != nil {
			return moved, time.Time{}, err
		}
	}
}

// takeDue picks the next due messages (reading them from their file) and
// marks them moving; none when nothing is due, with the next due time.
func (s *Scheduler) takeDue() ([]due, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return nil, time.Time{}, err
	}
	now := s.opts.Now().UnixMilli()
	keys := make([]int64, 0, len(s.sizes))
	for k := range s.sizes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// Every bucket whose start has passed may hold due entries (buckets
	// of another bucket-width, from before a restart, may overlap), so
	// they are visited in order; the next wake-up is the earliest of
	// their first pending entries and the next bucket's start.
	next := int64(0)
	soonest := func(t int64) {
		if next == 0 || t < next {
			next = t
		}
	}
	for _, b := range keys {
		if b > now {
			soonest(b)
			break
		}
		if s.cur == nil || s.cur.bucket != b {
			res, err := s.scanPath(s.path(b))
			if err != nil {
				return nil, time.Time{}, s.fail(err)
			}
			s.cur = &loaded{bucket: b, pending: res.pending}
		}
		c := s.cur
		if len(c.pending) == 0 {
			if err := s.opts.FS.Remove(s.path(b)); err != nil {
				return nil, time.Time{}, s.fail(fmt.Errorf("remove %s: %w", s.path(b), err))
			}
			if err := s.syncDir(); err != nil {
				return nil, time.Time{}, s.fail(fmt.Errorf("fsync %s: %w", s.opts.Dir, err))
			}
			delete(s.sizes, b)
			s.cur = nil
			continue
		}
		var batch []due
		var f vfs.File
		for _, e := range c.pending {
			if e.at > now || len(batch) == s.opts.MoveBatch {
				break
			}
			if s.moving[e.id] {
				continue
			}
			if f == nil {
				var err error
				if f, err = s.opts.FS.Open(s.path(b)); err != nil {
					return nil, time.Time{}, s.fail(fmt.Errorf("open %s: %w", s.path(b), err))
				}
				defer f.Close()
			}
			msg, err := readMessage(f, e)
			if err != nil {
				return nil, time.Time{}, s.fail(fmt.Errorf("read %s at %d: %w", s.path(b), e.off, err))
			}
			batch = append(batch, due{entry: e, bucket: b, stored: msg})
		}
		if len(batch) > 0 {
			for _, d := range batch {
				s.moving[d.id] = true
			}
			return batch, time.Time{}, nil
		}
		soonest(c.pending[0].at)
	}
	s.wakeAt = next
	if next == 0 {
		return nil, time.Time{}, nil
	}
	return nil, time.UnixMilli(next), nil
}

// deliver appends batch (one bucket's) to the topics in order, then
// records the appended ones delivered with one fsync. It returns how many
// were appended; a failed append stops the batch (its rest is moved on a
// later pass).
func (s *Scheduler) deliver(ctx context.Context, batch []due) (int, error) {
	var appendErr error
	n := 0
	for _, d := range batch {
		if err := s.target.Append(ctx, d.topic, d.stored); err != nil {
			appendErr = fmt.Errorf("schedule: append to topic %q: %w", d.topic, err)
			break
		}
		n++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range batch {
		delete(s.moving, d.id)
	}
	if n == 0 {
		return 0, appendErr
	}
	var rec []byte
	for _, d := range batch[:n] {
		rec = appendDone(rec, kindDelivered, d.id)
	}
	b := batch[0].bucket
	if err := s.appendRecord(b, rec); err != nil {
		return n, err
	}
	done := map[string]bool{}
	for _, d := range batch[:n] {
		done[d.id] = true
		s.dropPending(d.topic, 1)
	}
	if c := s.cur; c != nil && c.bucket == b {
		c.pending = slices.DeleteFunc(c.pending, func(e entry) bool { return done[e.id] })
	}
	return n, appendErr
}

// run is the mover: it moves what is due, then sleeps until the next due
// time, a Schedule of an earlier one, or Stop. After an error it retries
// a second later (a failed store stays failed: it needs a restart).
func (s *Scheduler) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		_, next, err := s.MoveDue(ctx)
		wait := time.Hour
		switch {
		case err != nil:
			if !errors.Is(err, context.Canceled) {
				s.log.Warn("scheduled messages: move failed; retrying in 1s", zap.Error(err))
			}
			wait = time.Second
		case !next.IsZero():
			// Never early: woken at or after the due time, and MoveDue
			// compares again.
			wait = max(next.Sub(s.opts.Now())+time.Millisecond, time.Millisecond)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-t.C:
		}
	}
}
