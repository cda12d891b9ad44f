package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mmmq/mmmq/modules/contract"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Log is the append-only segmented log of one topic, the storage behind a
// topic queue. Appends from any goroutine are group-committed by one writer
// goroutine; reads take no lock and see only offsets below the high
// watermark.
type Log struct {
	topic string
	dir   string
	opts  Options
	fs    vfs.FS
	log   *zap.Logger
	cache *SegmentCache // files of sealed segments (Options.SegmentCache)

	segs   atomic.Pointer[[]*segment] // immutable snapshot sorted by base
	segsMu sync.Mutex                 // serialises replacing segs: rotation (writer) and retention
	hw     atomic.Int64               // offsets < hw are durable and visible
	notify hwWaiters
	closed atomic.Bool
	size   atomic.Int64 // total bytes of all .mmm files (written)

	mu           sync.Mutex
	pending      []*request
	pendingBytes int64
	failed       error
	closing      bool
	reopening    bool // Reopen is running: appends get ErrReopening

	// wmu is held by the writer goroutine for each batch and by Reopen,
	// which so never runs while a batch is being written.
	wmu sync.Mutex

	wake        chan struct{}
	flusherDone chan struct{}
	w           writerState // owned by the writer goroutine

	cpMu        sync.Mutex
	checkpoints map[string]*Checkpoint

	fsyncs      atomic.Int64
	indexFsyncs atomic.Int64
	datasyncs   atomic.Int64 // of fsyncs, those made with fdatasync (preallocation)
	batches     atomic.Int64
	// staleReads counts reads that failed validation and then read
	// intact from newly opened files (reader.go, reread).
	staleReads atomic.Int64
	// idxTimer fires (lazy mode) IndexSyncInterval after the active
	// index was first left unsynced; stopped otherwise. Writer-owned.
	idxTimer *time.Timer
	closeErr error // the writer's last index fsync at close (lazy mode)

	report      RepairReport
	incarnation string // the topic's incarnation id (incarnation.go)

	ret retentionState

	// pre is the preallocation state (prealloc.go), preBudget the
	// broker-wide budget it draws from (Options.Preallocation).
	pre       preState
	preBudget *PreallocBudget
}

// Open opens the log in dir (<root>/<topic>; the topic name is the
// directory's base name), creating it with an empty first segment when it
// does not exist (or holds only what an interrupted creation leaves), and
// otherwise running repair (see the package doc). A topic refused by
// repair returns a *contract.CorruptionError and leaves every file untouched; so
// does a directory that holds neither the incarnation file nor a segment
// but other entries (see unfinished.go).
func Open(dir string, opts Options) (*Log, error) {
	o := opts.withDefaults()
	l := &Log{
		topic:       filepath.Base(dir),
		dir:         dir,
		opts:        o,
		fs:          o.FS,
		log:         o.Logger.With(zap.String("topic", filepath.Base(dir))),
		cache:       o.SegmentCache,
		wake:        make(chan struct{}, 1),
		flusherDone: make(chan struct{}),
		checkpoints: map[string]*Checkpoint{},
		idxTimer:    time.NewTimer(time.Hour),
	}
	l.idxTimer.Stop()
	l.pre.cond = sync.NewCond(&l.pre.mu)
	l.preBudget = o.Preallocation

	d, err := inspectTopicDir(o.FS, dir)
	if err != nil {
		return nil, err
	}
	if d.refused() {
		// Not a topic and not what a creation leaves: never written into.
		return nil, notATopicError(dir, d)
	}
	// A creation that fails part way (a full disk, the open-file limit)
	// removes what it made: a refused publish leaves nothing behind.
	l, err = open(l, dir, o)
	if err != nil && !d.topic {
		_ = removeCreation(o.FS, dir)
	}
	return l, err
}

// open is Open after the Log is made.
func open(l *Log, dir string, o Options) (*Log, error) {
	// Read before repair changes anything: a bad file refuses the topic
	// with every file untouched.
	id, err := ReadIncarnation(o.FS, dir)
	if err != nil {
		return nil, err
	}
	segs, rep, err := repairDir(o.FS, dir, l.topic, o, true)
	if err != nil {
		return nil, err
	}
	l.report = rep
	if id == "" {
		// A new topic gets its id before its first segment exists, so
		// nothing is ever acknowledged without one; an existing topic
		// without the file (older data) gets one now.
		if err := MkdirDurable(o.FS, dir); err != nil {
			return nil, fmt.Errorf("create topic dir: %w", err)
		}
		id = contract.NewIncarnation()
		if err := WriteIncarnation(o.FS, dir, id); err != nil {
			return nil, err
		}
		if len(segs) > 0 {
			l.log.Info("topic had no incarnation id; made one", zap.String("incarnation", id))
		}
	}
	l.incarnation = id
	if len(segs) == 0 {
		seg, err := l.cache.create(false, func() (*segment, *segFiles, error) { return createTopic(o.FS, dir, 0) })
		if err != nil {
			return nil, err
		}
		segs = []*segment{seg}
	}
	last := segs[len(segs)-1]
	l.segs.Store(&segs)
	l.hw.Store(last.base + last.count)
	var total int64
	for _, s := range segs {
		total += s.size
	}
	l.size.Store(total)
	l.w.init(l)
	go l.flushLoop()
	return l, nil
}

// createTopic creates dir (durably, see MkdirDurable) with an empty segment
// at base, whose files come back open as createSegment's do.
func createTopic(fsys vfs.FS, dir string, base int64) (*segment, *segFiles, error) {
	if err := MkdirDurable(fsys, dir); err != nil {
		return nil, nil, fmt.Errorf("create topic dir: %w", err)
	}
	return createSegment(fsys, dir, base, nil)
}

// MkdirDurable creates dir and its missing parents and fsyncs the parent of
// every directory it created, up to the first one that existed: a new
// directory entry is durable only once its parent is synced (fsync(2)), so
// without this a power loss could take a fresh data root, or a new topic,
// with everything acknowledged under it.
func MkdirDurable(fsys vfs.FS, dir string) error {
	top := "" // highest directory that did not exist
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := fsys.List(d); err == nil {
			break
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	if top == "" {
		return nil
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if err := fsys.SyncDir(filepath.Dir(d)); err != nil {
			return fmt.Errorf("create %s: sync dir %s: %w", dir, filepath.Dir(d), err)
		}
		if d == top {
			return nil
		}
	}
}

// createSegment creates the .mmm and .idx pair for base and fsyncs dir. Its
// files come back open read-write with one reference, not yet attached to
// the segment: the caller is SegmentCache.create, which caches them.
func createSegment(fsys vfs.FS, dir string, base int64, between func()) (*segment, *segFiles, error) {
	mmmPath, idxPath := segmentPaths(dir, base)
	mmm, err := fsys.Create(mmmPath)
	if err != nil {
		return nil, nil, fmt.Errorf("create segment %s: %w%s", mmmPath, err, fdHint(err))
	}
	if between != nil {
		between()
	}
	idx, err := fsys.Create(idxPath)
	if err != nil {
		mmm.Close()
		return nil, nil, fmt.Errorf("create index %s: %w%s", idxPath, err, fdHint(err))
	}
	if err := fsys.SyncDir(dir); err != nil {
		mmm.Close()
		idx.Close()
		return nil, nil, fmt.Errorf("sync topic dir %s: %w%s", dir, err, fdHint(err))
	}
	seg := &segment{base: base, mmmPath: mmmPath, idxPath: idxPath}
	return seg, newSegFiles(seg, mmm, idx, true), nil
}

// Topic is the topic name (the directory's base name).
func (l *Log) Topic() string { return l.topic }

// Dir is the topic directory.
func (l *Log) Dir() string { return l.dir }

// Repair is what repair found and did when Open checked the topic.
func (l *Log) Repair() RepairReport { return l.report }

// HighWatermark is the next offset to be made visible: every offset below it
// is durable (its segment bytes fsynced; its index entry too under
// index-sync commit) and readable.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

// Notify returns a channel that is closed once HighWatermark() > offset, or
// once the log is closed, and not before: a publish that leaves the high
// watermark at or below offset does not close it. It lets dispatch workers
// and long-polls wait for "something past offset" without polling; a
// receiver that finds HighWatermark() <= offset knows the log is closed.
// Waiters for the same offset share one channel, which is kept until the
// high watermark passes that offset or the log closes.
func (l *Log) Notify(offset int64) <-chan struct{} {
	if l.hw.Load() > offset || l.closed.Load() {
		return closedChan
	}
	return l.notify.wait(offset, &l.hw)
}

// publish makes offsets below hw visible and wakes the Notify waiters of
// those offsets.
func (l *Log) publish(hw int64) {
	l.hw.Store(hw)
	l.notify.release(hw)
}

// Err returns the error that failed the log, or nil while it accepts writes.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// Stats returns counters for GET /topics and metrics.
func (l *Log) Stats() Stats {
	segs := *l.segs.Load()
	l.mu.Lock()
	pb, failed := l.pendingBytes, l.failed
	l.mu.Unlock()
	s := Stats{
		Topic:         l.topic,
		NextOffset:    l.hw.Load(),
		StartOffset:   segs[0].base,
		Segments:      len(segs),
		Bytes:         l.size.Load(),
		Fsyncs:        l.fsyncs.Load(),
		IndexFsyncs:   l.indexFsyncs.Load(),
		Datasyncs:     l.datasyncs.Load(),
		Batches:       l.batches.Load(),
		PendingBytes:  pb,
		FirstSegment:  segs[0].base,
		ActiveSegment: segs[len(segs)-1].base,
	}
	if failed != nil {
		s.Failed = failed.Error()
	}
	l.pre.mu.Lock()
	s.PreallocatedBytes = l.pre.held
	l.pre.mu.Unlock()
	return s
}

// Checkpoint opens, or returns the already open, checkpoint name of this
// topic (<topic>/checkpoints/<name>.checkpoint). See OpenCheckpoint for how
// a missing, short, garbled or too-far value is treated.
func (l *Log) Checkpoint(name string) (*Checkpoint, error) {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if l.closed.Load() {
		return nil, contract.ErrClosed
	}
	if c, ok := l.checkpoints[name]; ok {
		return c, nil
	}
	c, err := OpenCheckpoint(l.fs, l.dir, name, l.hw.Load(), l.log)
	if err != nil {
		return nil, err
	}
	c.hooks = l.opts.Hooks
	l.checkpoints[name] = c
	return c, nil
}

// Close stops accepting appends, lets the writer finish everything already
// queued (so ACCEPTED entries are written), wakes every Notify waiter and
// closes all files (a pair a reader still pins closes when its read ends).
// It is safe to call more than once.
func (l *Log) Close() error {
	l.mu.Lock()
	already := l.closing
	l.closing = true
	l.mu.Unlock()
	if !already {
		l.signal()
	}
	<-l.flusherDone
	if already {
		return nil
	}
	l.closed.Store(true)
	l.notify.closeAll()
	errs := []error{l.closeErr}
	l.cpMu.Lock()
	for _, c := range l.checkpoints {
		errs = append(errs, c.Close())
	}
	l.cpMu.Unlock()
	// The writer has stopped and released its pin: every pair of this log
	// is in the cache, or pinned by a reader and closed when its read ends.
	// A retention pass in progress finishes first (it checks closed).
	l.ret.mu.Lock()
	l.cache.drop(*l.segs.Load())
	l.ret.mu.Unlock()
	return errors.Join(errs...)
}
