package schedule

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
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
	DefaultMemoryBudget       = 64 << 20
)

// Dir is the name of the directory under the data root that holds the
// pending messages: it starts with '.', so no topic can have it.
const Dir = contract.ScheduledDir

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

// BatchTarget is the optional capability of a Target that appends several
// messages of one topic at once, durably (one fsync) before it returns
// nil; the mover then appends a step's messages of one topic together.
type BatchTarget interface {
	AppendBatch(ctx context.Context, topic string, stored [][]byte) error
}

// Ledger is the optional capability of a Target that makes the move
// exactly once: before a mover step appends, the topic's high watermark is
// recorded (a moving record, fsynced); an entry found with a moving record
// and no delivered one is looked for in the topic from that watermark, by
// its HeaderScheduleID header, before it is appended again. Without it
// (a Target that is only a Target), the move is at least once.
type Ledger interface {
	// HighWatermark is the next offset of topic: 0 for a topic that does
	// not exist.
	HighWatermark(topic string) (int64, error)
	// Find returns which of ids (schedule ids) are the HeaderScheduleID of
	// a message of topic at offset from or later. from > 0 below the
	// topic's first offset (retention deleted what was there) is logged:
	// an id not found is then moved again.
	Find(ctx context.Context, topic string, from int64, ids map[string]bool) (map[string]bool, error)
}

// TopicDeleter is the optional capability of a Target that lets recovery
// finish a topic deletion a crash interrupted (DropTopic): Delete removes
// topic; nil when it does not exist.
type TopicDeleter interface {
	DeleteTopic(topic string) error
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
	// MemoryBudget bounds, in bytes, what the store holds in memory for
	// pending messages whatever their number
	// (mmmq.broker.schedule.memory-budget): half for the loaded window of
	// entry metadata (about 200 bytes per entry), half for the messages of
	// one mover step (at least one). Default 64 MiB.
	MemoryBudget int64
	// Unsupported, when not "", makes every Schedule 501 NOT_IMPLEMENTED
	// with this reason (a storage backend the scheduler cannot serve).
	Unsupported string
	// Admit, when set, is the disk guard of the data filesystem
	// (storage.SpaceGuard.Admit), asked with a scheduled message's record
	// size before it is written: its error (507 NO_SPACE with Retry-After)
	// refuses the publish, as for a publish to a topic. Cancels, drops and
	// moves are not refused (they free room, or meet the guard in the
	// topic).
	Admit func(bytes int64) error
	// Now is the clock; default time.Now.
	Now    func() time.Time
	Logger *zap.Logger

	// skipSync is the negative control of the power-loss test: nothing is
	// fsynced, so acknowledged schedules can be lost.
	skipSync bool
	// skipIntentSync is the negative control of the exactly-once move: the
	// moving records are written but not fsynced before the appends.
	skipIntentSync bool
	// listKeep, when > 0, replaces listScanMin (tests: a listing's scans
	// cut short).
	listKeep int
	// skipDropMarker is the negative control of the topic deletion: no
	// marker is written, so a crash can leave the topic without its
	// scheduled messages.
	skipDropMarker bool
}

// Scheduler is the scheduled-message store and its mover. It implements
// contract.Scheduler and contract.ScheduleDropper. Build it with New, then
// Start (recovery: scan the bucket files; launch the flusher and the
// mover) and Stop.
type Scheduler struct {
	opts   Options
	target Target
	log    *zap.Logger

	mu      sync.Mutex
	running bool
	failed  error
	sizes   map[int64]int64 // bucket start → end of its file's records
	pending map[string]int  // topic → pending messages (not yet fsynced ones too)
	// perFile is each bucket's pending messages per topic: which files a
	// topic deletion writes its dropped record to.
	perFile map[int64]map[string]int
	// lastAt is each bucket's latest due time of a scheduled record
	// written to it since Open (of a pending entry at Open): a listing
	// passes over the buckets wholly before its cursor (list.go).
	lastAt map[int64]int64
	// cur is the loaded window of one bucket: the earliest one whose start
	// has passed when the mover last looked, its pending entries sorted by
	// due time (see scanWindow).
	cur      *loaded
	moving   map[string]string // ids being appended (or cancelled) now → topic
	unsynced map[string]bool   // scheduled records written, not yet fsynced
	dropping map[string]bool   // topics being deleted
	markers  map[string]bool   // topics whose deletion marker is on disk
	moved    uint64            // messages moved since Start (Stats)
	// stuck is the topics whose last move failed (stuck.go);
	// moveFailures counts failed moves by reason since Start.
	stuck        map[string]*stuck
	moveFailures map[string]uint64
	late         lateness // their lateness (Stats)
	wakeAt       int64    // the mover's next wake-up (Unix ms), 0 for none
	// dirMade: Dir exists and its entry is durable.
	dirMade bool

	// Group commit (commit.go): the batch records are written into now,
	// and the flusher that fsyncs it.
	batch     *commitBatch
	flushReq  chan struct{}
	flushStop chan struct{}
	flushDone chan struct{}

	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

type loaded struct {
	bucket  int64
	pending []entry
	// more: the file has pending entries at or after bound, not loaded.
	more  bool
	bound entry
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
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	return &Scheduler{opts: opts, target: target, log: opts.Logger, wake: make(chan struct{}, 1)}
}

// covers says whether e belongs in the loaded window.
func (c *loaded) covers(e entry) bool { return !c.more || e.before(c.bound) }

// windowMax is the most entries a loaded window holds: half the memory
// budget.
func (s *Scheduler) windowMax() int { return max(16, int(s.opts.MemoryBudget/2/entryCost)) }

var (
	_ contract.Scheduler       = (*Scheduler)(nil)
	_ contract.ScheduleDropper = (*Scheduler)(nil)
	_ contract.ScheduleDropper = (*Idempotent)(nil)
)

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
// its delivered records) to finish or ctx to end, then the flusher (the
// records written so far are fsynced and their writers answered).
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
	stop, done := s.flushStop, s.flushDone
	s.flushStop = nil
	s.mu.Unlock()
	if stop != nil {
		close(stop)
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Open scans every bucket file (recovery, see the package documentation):
// it cuts torn tails, removes files with nothing pending, counts each
// topic's pending messages (one file and one window of entries at a
// time), finishes a topic deletion a crash interrupted, and launches the
// flusher. Start calls it; tests that drive MoveDue themselves call it
// instead of Start (and Stop after).
func (s *Scheduler) Open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fsys, dir := s.opts.FS, s.opts.Dir
	s.sizes, s.pending, s.perFile, s.cur, s.failed, s.wakeAt = map[int64]int64{}, map[string]int{}, map[int64]map[string]int{}, nil, nil, 0
	s.lastAt = map[int64]int64{}
	s.moving, s.unsynced, s.dropping, s.markers = map[string]string{}, map[string]bool{}, map[string]bool{}, map[string]bool{}
	s.stuck, s.moveFailures = map[string]*stuck{}, map[string]uint64{}
	s.dirMade = false
	ents, err := fsys.List(dir)
	switch {
	case vfs.IsNotExist(err):
		// Nothing was ever scheduled: the directory is made by the
		// first Schedule (a broker that never schedules writes nothing).
		s.startFlusher()
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
	var drops []string
	for _, e := range ents {
		if t, ok := strings.CutSuffix(e.Name, dropExt); ok && !e.IsDir {
			drops = append(drops, t)
			continue
		}
		b, ok := parseBucketName(e.Name)
		if e.IsDir || !ok {
			continue
		}
		name := filepath.Join(dir, e.Name)
		end, counts, last, err := s.countPath(name)
		if err != nil {
			return err
		}
		if len(counts) == 0 {
			if err := fsys.Remove(name); err != nil {
				return fmt.Errorf("schedule: remove %s: %w", name, err)
			}
			removed = true
			continue
		}
		s.sizes[b] = end
		s.perFile[b] = counts
		s.lastAt[b] = last
		for t, n := range counts {
			s.pending[t] += n
		}
	}
	if removed {
		if err := fsys.SyncDir(dir); err != nil {
			return fmt.Errorf("schedule: sync %s: %w", dir, err)
		}
	}
	slices.Sort(drops)
	for _, t := range drops {
		n, err := s.finishDrop(t)
		if err != nil {
			return fmt.Errorf("schedule: finish the deletion of topic %s: %w", t, err)
		}
		s.log.Warn("scheduled messages: finished a topic deletion interrupted by a crash", zap.String("topic", t), zap.Int("scheduled-dropped", n))
	}
	if total := s.pendingTotalLocked(); total > 0 {
		s.log.Info("scheduled messages: pending ones recovered", zap.Int("pending", total),
			zap.Int("topics", len(s.pending)), zap.Int("bucket-files", len(s.sizes)))
	}
	s.startFlusher()
	s.running = true
	return nil
}

// pendingTotalLocked is the pending messages of every topic; s.mu is held
// or the scheduler is not yet running.
func (s *Scheduler) pendingTotalLocked() int {
	n := 0
	for _, c := range s.pending {
		n += c
	}
	return n
}

// countPath scans one bucket file, cuts a torn tail (truncate, fsync) and
// counts its pending entries per topic, one window at a time; last is the
// latest due time of a pending entry.
func (s *Scheduler) countPath(name string) (end int64, counts map[string]int, last int64, err error) {
	f, err := s.opts.FS.OpenRW(name)
	if err != nil {
		return 0, nil, 0, fmt.Errorf("schedule: open %s: %w", name, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return 0, nil, 0, fmt.Errorf("schedule: size %s: %w", name, err)
	}
	counts = map[string]int{}
	lo := first
	end = size
	for pass := 0; ; pass++ {
		w, err := scanWindow(f, end, lo, s.windowMax(), nil)
		if err != nil {
			return 0, nil, 0, fmt.Errorf("schedule: scan %s: %w", name, err)
		}
		if pass == 0 {
			if w.end < size {
				at, err := validAfterDamage(f, w.end, size)
				if err != nil {
					return 0, nil, 0, fmt.Errorf("schedule: scan %s: %w", name, err)
				}
				if at >= 0 {
					return 0, nil, 0, &CorruptionError{File: name, Pos: w.end, ValidAt: at}
				}
			}
			if err := s.cutTail(f, name, w.end, size); err != nil {
				return 0, nil, 0, err
			}
			end = w.end
		}
		for _, e := range w.pending {
			counts[e.topic]++
			last = max(last, e.at)
		}
		if !w.more {
			return end, counts, last, nil
		}
		lo = w.bound
	}
}

// cutTail cuts f (named name, size bytes) at end when end < size.
func (s *Scheduler) cutTail(f vfs.File, name string, end, size int64) error {
	if end >= size {
		return nil
	}
	s.logCut(f, name, end, size)
	if err := f.Truncate(end); err != nil {
		return fmt.Errorf("schedule: cut %s at %d: %w", name, end, err)
	}
	if err := s.sync(f); err != nil {
		return fmt.Errorf("schedule: sync %s: %w", name, err)
	}
	return nil
}

// loadWindow loads the window of bucket b's pending entries starting at
// lo, leaving out those not yet fsynced. s.mu is held.
func (s *Scheduler) loadWindow(b int64, lo entry) (*loaded, error) {
	name := s.path(b)
	f, err := s.opts.FS.Open(name)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	w, err := scanWindow(f, s.sizes[b], lo, s.windowMax(), func(e entry) bool { return s.unsynced[e.id] })
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", name, err)
	}
	return &loaded{bucket: b, pending: w.pending, more: w.more, bound: w.bound}, nil
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

// appendRecordSync writes rec at the end of bucket's file and fsyncs it,
// outside the group commit (recovery only, before the flusher runs). Any
// error fails the store. s.mu is held.
func (s *Scheduler) appendRecordSync(bucket int64, rec []byte) error {
	name := s.path(bucket)
	f, err := s.opts.FS.OpenRW(name)
	if err != nil {
		return s.fail(fmt.Errorf("open %s: %w", name, err))
	}
	defer f.Close()
	end := s.sizes[bucket]
	if _, err := f.WriteAt(rec, end); err != nil {
		return s.fail(fmt.Errorf("write %s: %w", name, err))
	}
	if err := s.sync(f); err != nil {
		return s.fail(fmt.Errorf("fsync %s: %w", name, err))
	}
	s.sizes[bucket] = end + int64(len(rec))
	return nil
}

// Schedule implements contract.Scheduler: the message is in its bucket
// file, fsynced, when it returns nil; concurrent calls share one fsync
// (group commit). A deliverAt more than MaxDelay from now is 400; a topic
// at MaxPendingPerTopic is 507; a topic being deleted (DropTopic) is 409
// TOPIC_BUSY.
func (s *Scheduler) Schedule(_ context.Context, topic string, stored []byte, deliverAt time.Time) (string, error) {
	if s.opts.Unsupported != "" {
		return "", contract.NotImplemented("scheduled messages (deliverAt, delay) are not supported here: %s", s.opts.Unsupported)
	}
	now := s.opts.Now()
	at := deliverAt.UnixMilli()
	if time.UnixMilli(at).Before(deliverAt) {
		at++
	}
	if err := contract.CheckMaxDelay(time.UnixMilli(at), now, s.opts.MaxDelay); err != nil {
		return "", err
	}
	if len(topic) > 255 {
		return "", contract.BadRequest("topic name too long to schedule") // unreachable: ValidateTopic caps it at 249 bytes
	}
	b := s.bucketOf(at)
	id := scheduleID(b, rand.Uint64())
	rec := appendScheduled(nil, at, id, topic, stored)
	if s.opts.Admit != nil {
		// The disk guard, as for a publish to a topic: nothing is written
		// while free space is under the guard (507 NO_SPACE).
		if err := s.opts.Admit(int64(len(rec))); err != nil {
			return "", err
		}
	}
	s.mu.Lock()
	if err := s.waitRoom(b, len(rec)); err != nil {
		s.mu.Unlock()
		return "", err
	}
	if s.dropping[topic] {
		s.mu.Unlock()
		return "", ErrTopicDeleting
	}
	if n := s.pending[topic]; n >= s.opts.MaxPendingPerTopic {
		s.mu.Unlock()
		return "", contract.TooManyScheduled("topic %q has %d pending scheduled messages, the maximum (mmmq.broker.schedule.max-pending-per-topic is %d); this message was not stored",
			topic, n, s.opts.MaxPendingPerTopic)
	}
	cb, off, err := s.write(b, rec)
	if err != nil {
		s.mu.Unlock()
		return "", err
	}
	s.pending[topic]++
	s.countFile(b, topic, 1)
	if l, ok := s.lastAt[b]; !ok || at > l {
		s.lastAt[b] = at
	}
	s.unsynced[id] = true
	cb.added = append(cb.added, added{bucket: b, e: entry{id: id, topic: topic, at: at, off: off, n: len(rec), hwm: -1}})
	s.mu.Unlock()
	if err := cb.wait(); err != nil {
		return "", err
	}
	return id, nil
}

// ErrTopicDeleting is a Schedule for a topic whose deletion (DropTopic)
// is running: 409 TOPIC_BUSY; retry once the deletion is answered.
var ErrTopicDeleting = contract.NewError(contract.CodeTopicBusy, "schedule: the topic is being deleted with its scheduled messages; retry once the deletion is answered (the message then creates the topic again when due)")

// countFile adds n to bucket b's pending count of topic; s.mu is held.
func (s *Scheduler) countFile(b int64, topic string, n int) {
	m := s.perFile[b]
	if m == nil {
		m = map[string]int{}
		s.perFile[b] = m
	}
	if m[topic] += n; m[topic] <= 0 {
		delete(m, topic)
	}
	if len(m) == 0 {
		delete(s.perFile, b)
	}
}

// visible makes the fsynced scheduled records of a batch visible to the
// mover and to Cancel; s.mu is held.
func (s *Scheduler) visible(adds []added) {
	for _, a := range adds {
		delete(s.unsynced, a.e.id)
		if c := s.cur; c != nil && c.bucket == a.bucket && c.covers(a.e) {
			i, _ := slices.BinarySearchFunc(c.pending, a.e, func(x, t entry) int {
				if x.before(t) {
					return -1
				}
				return 1
			})
			c.pending = slices.Insert(c.pending, i, a.e)
			if k := s.windowMax(); len(c.pending) > k {
				// Kept within the budget: the latest go back to the
				// file, loaded again from the bound.
				c.more, c.bound = true, entry{at: c.pending[k].at, off: c.pending[k].off}
				c.pending = slices.Clip(c.pending[:k])
			}
		}
		if s.wakeAt == 0 || a.e.at < s.wakeAt {
			s.wakeAt = a.e.at
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// Cancel implements contract.Scheduler: a pending message of topic gets
// its cancelled record (fsynced) and is never delivered.
func (s *Scheduler) Cancel(topic, id string) (bool, error) {
	b, ok := parseScheduleID(id)
	if !ok {
		return false, nil
	}
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return false, err
	}
	if _, ok := s.sizes[b]; !ok || s.moving[id] != "" || s.unsynced[id] || s.dropping[topic] {
		s.mu.Unlock()
		return false, nil
	}
	found := false
	if c := s.cur; c != nil && c.bucket == b {
		found = slices.ContainsFunc(c.pending, func(e entry) bool { return e.id == id && e.topic == topic })
	}
	if !found && (s.cur == nil || s.cur.bucket != b || s.cur.more) {
		var err error
		if found, err = s.findPending(b, topic, id); err != nil {
			s.mu.Unlock()
			return false, err
		}
	}
	if !found {
		s.mu.Unlock()
		return false, nil
	}
	cb, _, err := s.write(b, appendDone(nil, kindCancelled, id))
	if err != nil {
		s.mu.Unlock()
		return false, err
	}
	s.moving[id] = topic // not moved while the cancel is being fsynced
	s.mu.Unlock()
	err = cb.wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.moving, id)
	if err != nil {
		return false, err
	}
	s.dropPending(topic, 1)
	s.countFile(b, topic, -1)
	if c := s.cur; c != nil && c.bucket == b {
		c.pending = slices.DeleteFunc(c.pending, func(e entry) bool { return e.id == id })
	}
	return true, nil
}

// findPending reports whether id is a pending entry of topic in bucket
// b's file (a scan of the file, one record at a time); s.mu is held.
func (s *Scheduler) findPending(b int64, topic, id string) (bool, error) {
	name := s.path(b)
	f, err := s.opts.FS.Open(name)
	if err != nil {
		return false, s.fail(fmt.Errorf("open %s: %w", name, err))
	}
	defer f.Close()
	_, ok, err := findEntry(f, s.sizes[b], topic, id)
	if err != nil {
		return false, s.fail(fmt.Errorf("scan %s: %w", name, err))
	}
	return ok, nil
}

// dropPending lowers topic's pending count by n; s.mu is held.
func (s *Scheduler) dropPending(topic string, n int) {
	if s.pending[topic] -= n; s.pending[topic] <= 0 {
		delete(s.pending, topic)
		delete(s.stuck, topic) // nothing left to retry
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
	return s.pendingTotalLocked()
}
