package storage

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Options configures a Log. The zero value of every field means its default.
type Options struct {
	// FS is the filesystem; default vfs.OS{}.
	FS vfs.FS
	// Logger receives repair reports, slow-fsync warnings and failures;
	// default zap.NewNop().
	Logger *zap.Logger
	// SegmentMaxBytes is the rotation threshold in bytes
	// (mmmq.broker.segment.max-bytes); default 64 MiB. Rotation is checked
	// before each append (seed 000), so a segment may end up to one entry
	// larger.
	SegmentMaxBytes int64
	// MaxRecordBytes caps one message JSON (mmmq.broker.segment.max-record-bytes);
	// default 1 MiB. Decoding never allocates more than this from a length field.
	MaxRecordBytes int
	// MaxPendingBytes caps the bytes queued for the writer; Append beyond it
	// fails fast with ErrQueueFull (HTTP 503). Default 64 MiB.
	MaxPendingBytes int64
	// SlowFsync is the fsync duration above which a warning is logged;
	// default 1s.
	SlowFsync time.Duration
	// Observer, when set, is told about every fsync and every committed batch
	// (metrics). It is called from the writer goroutine and must not block.
	Observer Observer
	// Hooks are crash-injection points for tests; nil in production.
	Hooks *Hooks
}

// Observer receives write-path measurements (for Prometheus metrics).
type Observer interface {
	// ObserveFsync is called after each fsync of a segment or index file.
	ObserveFsync(topic string, d time.Duration)
	// ObserveBatch is called after each group commit with its entry count.
	ObserveBatch(topic string, entries int)
}

// Hooks are named injection points on the write path, used by crash and
// power-loss tests to stop the process (or snapshot a MemFS) at an exact
// moment. Each func is called, when non-nil, from the writer goroutine.
type Hooks struct {
	AfterSegmentWrite  func() // .mmm write returned, not fsynced
	AfterSegmentSync   func() // .mmm fsynced, .idx not yet written
	AfterIndexWrite    func() // .idx write returned, not fsynced
	AfterIndexSync     func() // .idx fsynced, before the high watermark moves and waiters are answered
	AfterRotateSegment func() // rotation: new .mmm created, .idx not yet created
	// AckBeforeSync, when true, makes DURABLE waiters be answered right
	// after the .mmm write, before any fsync. It is the deliberately wrong
	// variant used as the negative control of the power-loss tests: it must
	// lose acknowledged data. Never set outside tests.
	AckBeforeSync bool
}

func (o *Options) withDefaults() Options {
	r := *o
	if r.FS == nil {
		r.FS = vfs.OS{}
	}
	if r.Logger == nil {
		r.Logger = zap.NewNop()
	}
	if r.SegmentMaxBytes <= 0 {
		r.SegmentMaxBytes = DefaultSegmentMaxBytes
	}
	if r.MaxRecordBytes <= 0 {
		r.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if r.MaxPendingBytes <= 0 {
		r.MaxPendingBytes = 64 << 20
	}
	if r.SlowFsync <= 0 {
		r.SlowFsync = time.Second
	}
	return r
}

// Log is the append-only segmented log of one topic (seed 000 TopicQueue
// storage). Appends from any goroutine are group-committed by one writer
// goroutine; reads take no lock and see only offsets below the high
// watermark.
type Log struct {
	topic string
	dir   string
	opts  Options
	fs    vfs.FS
	log   *zap.Logger

	segs   atomic.Pointer[[]*segment] // immutable snapshot sorted by base
	hw     atomic.Int64               // offsets < hw are durable and visible
	notify atomic.Pointer[chan struct{}]
	closed atomic.Bool
	size   atomic.Int64 // total bytes of all .mmm files (written)

	mu           sync.Mutex
	pending      []*request
	pendingBytes int64
	failed       error
	closing      bool

	wake        chan struct{}
	flusherDone chan struct{}
	w           writerState // owned by the writer goroutine

	cpMu        sync.Mutex
	checkpoints map[string]*Checkpoint

	fsyncs  atomic.Int64
	batches atomic.Int64

	report RepairReport
}

// Open opens the log in dir (<root>/<topic>; the topic name is the
// directory's base name), creating it with an empty first segment when it
// does not exist, and otherwise running repair (see the package doc).
// A topic refused by repair returns a *CorruptionError and leaves every
// file untouched.
func Open(dir string, opts Options) (*Log, error) {
	o := opts.withDefaults()
	l := &Log{
		topic:       filepath.Base(dir),
		dir:         dir,
		opts:        o,
		fs:          o.FS,
		log:         o.Logger.With(zap.String("topic", filepath.Base(dir))),
		wake:        make(chan struct{}, 1),
		flusherDone: make(chan struct{}),
		checkpoints: map[string]*Checkpoint{},
	}
	ch := make(chan struct{})
	l.notify.Store(&ch)

	segs, rep, err := repairDir(o.FS, dir, l.topic, o, true)
	if err != nil {
		return nil, err
	}
	l.report = rep
	if len(segs) == 0 {
		seg, err := createTopic(o.FS, dir, 0)
		if err != nil {
			return nil, err
		}
		segs = []*segment{seg}
	}
	l.segs.Store(&segs)
	last := segs[len(segs)-1]
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
// at base.
func createTopic(fsys vfs.FS, dir string, base int64) (*segment, error) {
	if err := MkdirDurable(fsys, dir); err != nil {
		return nil, fmt.Errorf("create topic dir: %w", err)
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

// createSegment creates the .mmm and .idx pair for base and fsyncs dir.
func createSegment(fsys vfs.FS, dir string, base int64, between func()) (*segment, error) {
	mmmPath, idxPath := segmentPaths(dir, base)
	mmm, err := fsys.Create(mmmPath)
	if err != nil {
		return nil, fmt.Errorf("create segment %s: %w", mmmPath, err)
	}
	if between != nil {
		between()
	}
	idx, err := fsys.Create(idxPath)
	if err != nil {
		mmm.Close()
		return nil, fmt.Errorf("create index %s: %w", idxPath, err)
	}
	if err := fsys.SyncDir(dir); err != nil {
		mmm.Close()
		idx.Close()
		return nil, fmt.Errorf("sync topic dir %s: %w", dir, err)
	}
	return &segment{base: base, mmm: mmm, idx: idx, mmmPath: mmmPath, idxPath: idxPath}, nil
}

// Topic is the topic name (the directory's base name).
func (l *Log) Topic() string { return l.topic }

// Dir is the topic directory.
func (l *Log) Dir() string { return l.dir }

// Repair is what repair found and did when Open checked the topic.
func (l *Log) Repair() RepairReport { return l.report }

// Recovery is the old name of Repair.
//
// Deprecated: use Repair.
func (l *Log) Recovery() RepairReport { return l.Repair() }

// HighWatermark is the next offset to be made visible: every offset below it
// is durable (segment and index fsynced) and readable.
func (l *Log) HighWatermark() int64 { return l.hw.Load() }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Notify returns a channel that is closed once HighWatermark() > offset, or
// once the log is closed. It lets dispatch workers and long-polls wait for
// "something past offset" without polling.
func (l *Log) Notify(offset int64) <-chan struct{} {
	ch := *l.notify.Load() // load the channel before the watermark (see publish)
	if l.hw.Load() > offset || l.closed.Load() {
		return closedChan
	}
	return ch
}

// publish makes offsets below hw visible and wakes every Notify waiter.
func (l *Log) publish(hw int64) {
	l.hw.Store(hw)
	next := make(chan struct{})
	old := l.notify.Swap(&next)
	close(*old)
}

// Err returns the error that failed the log, or nil while it accepts writes.
func (l *Log) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *Log) corrupt(seg *segment, file string, pos, offset int64, reason string) *CorruptionError {
	return &CorruptionError{Topic: l.topic, File: file, Pos: pos, Offset: offset, Reason: reason}
}

func (l *Log) findSegment(offset int64) (*segment, int64) {
	segs := *l.segs.Load()
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > offset }) - 1
	if i < 0 {
		return nil, 0
	}
	end := l.hw.Load()
	if i+1 < len(segs) {
		end = segs[i+1].base
	}
	return segs[i], end
}

func (l *Log) ioErr(err error) error {
	if l.closed.Load() || errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Read returns the message JSON stored at offset. Errors: ErrOutOfRange for
// offset < 0 or >= HighWatermark(); *CorruptionError when the entry fails
// validation (the caller decides to skip it: seed 000); I/O errors as they are.
func (l *Log) Read(offset int64) ([]byte, error) {
	hw := l.hw.Load()
	if offset < 0 || offset >= hw {
		return nil, fmt.Errorf("read offset %d (high watermark %d): %w", offset, hw, ErrOutOfRange)
	}
	seg, _ := l.findSegment(offset)
	if seg == nil {
		return nil, fmt.Errorf("read offset %d: %w", offset, ErrOutOfRange)
	}
	rel := offset - seg.base
	var buf [IndexEntrySize]byte
	pos, err := seg.readPositions(rel, 1, buf[:])
	if err != nil {
		return nil, l.ioErr(err)
	}
	payload, err := seg.readEntryAt(pos[0], -1, l.opts.MaxRecordBytes)
	if err != nil {
		var be *badEntry
		if errors.As(err, &be) {
			return nil, l.corrupt(seg, seg.mmmPath, pos[0], offset, be.reason)
		}
		return nil, l.ioErr(fmt.Errorf("read offset %d: %w", offset, err))
	}
	return payload, nil
}

// readBudget bounds the bytes one ReadBatch call reads at once.
const readBudget = 1 << 20

// ReadBatch returns up to max consecutive entries starting at from, all
// below the high watermark, read in bulk (one index read and one segment
// read per batch, within one segment). It returns no entries and no error
// when from >= HighWatermark(). On a corrupt entry at offset o it returns the
// entries before o and a *CorruptionError with Offset o; the caller skips o
// by reading again from o+1. Payloads share one buffer per call.
func (l *Log) ReadBatch(from int64, max int) ([]Entry, error) {
	hw := l.hw.Load()
	if from < 0 {
		return nil, fmt.Errorf("read offset %d: %w", from, ErrOutOfRange)
	}
	if from >= hw || max <= 0 {
		return nil, nil
	}
	seg, end := l.findSegment(from)
	if seg == nil {
		return nil, fmt.Errorf("read offset %d: %w", from, ErrOutOfRange)
	}
	if end > hw {
		end = hw
	}
	n := end - from
	if n > int64(max) {
		n = int64(max)
	}
	rel := from - seg.base
	// One index read also covers the entry before from (when it is in this
	// segment), so every position is checked to be after the previous one:
	// an index entry pointing backwards is reported instead of returning an
	// earlier message under this offset. (One pointing forward into the
	// middle of an entry fails the header or CRC check below.)
	first := rel
	if rel > 0 {
		first = rel - 1
	}
	all, err := seg.readPositions(first, rel-first+n, nil)
	if err != nil {
		return nil, l.ioErr(err)
	}
	pos := all[rel-first:]
	k := len(pos)
	badAt := -1 // first index entry that is negative or not increasing
	for i := 0; i < k; i++ {
		if pos[i] < 0 || (i > 0 && pos[i] <= pos[i-1]) {
			k, badAt = i, i
			break
		}
	}
	badIndex := func(i int, why string) error {
		return l.corrupt(seg, seg.idxPath, (rel+int64(i))*IndexEntrySize, from+int64(i), why)
	}
	if k == 0 {
		return nil, badIndex(0, fmt.Sprintf("offset index entry holds invalid position %d", pos[0]))
	}
	if rel > 0 && (all[0] < 0 || all[0] >= pos[0]) {
		return nil, badIndex(0, fmt.Sprintf("offset index entry %d (position %d) is not after entry %d (position %d)", from, pos[0], from-1, all[0]))
	}
	// Keep the span within the read budget (at least one entry).
	for k > 1 && pos[k-1]-pos[0] > readBudget {
		k--
	}
	// The end of the last entry comes from its header.
	var hdr [HeaderSize]byte
	last := pos[k-1]
	var spanEnd int64
	if _, err := seg.mmm.ReadAt(hdr[:], last); err == nil {
		pl, _, herr := DecodeHeader(hdr[:], HeaderSize+int64(l.opts.MaxRecordBytes), l.opts.MaxRecordBytes)
		if herr != nil { // longer than today's limit: valid if the file holds it
			if size, serr := seg.mmm.Size(); serr == nil {
				pl, _, herr = DecodeHeader(hdr[:], size-last, MaxEntryPayload)
			}
		}
		if herr == nil {
			spanEnd = last + EntrySize(pl)
		}
	} else if !errors.Is(err, io.EOF) {
		return nil, l.ioErr(fmt.Errorf("read offset %d: %w", from+int64(k-1), err))
	}
	if spanEnd == 0 { // bad last header: stop before it, or report it alone
		if k == 1 {
			_, rerr := seg.readEntryAt(last, -1, l.opts.MaxRecordBytes)
			return nil, l.entryErr(seg, last, from, rerr)
		}
		k--
		spanEnd = pos[k]
	}
	// The budget loop bounds pos[k-1]-pos[0]; the last entry's length was
	// checked against the file: the span is bounded by what the file holds.
	if pos[0] < 0 || pos[k-1]-pos[0] > readBudget {
		_, rerr := seg.readEntryAt(pos[0], -1, l.opts.MaxRecordBytes)
		return nil, l.entryErr(seg, pos[0], from, rerr)
	}
	buf := make([]byte, spanEnd-pos[0])
	if nr, err := seg.mmm.ReadAt(buf, pos[0]); err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, l.ioErr(fmt.Errorf("read offset %d: %w", from, err))
		}
		buf = buf[:nr]
	}
	out := make([]Entry, 0, k)
	for i := 0; i < k; i++ {
		off := pos[i] - pos[0]
		stop := int64(len(buf))
		if i+1 < k {
			stop = pos[i+1] - pos[0]
		}
		if off >= int64(len(buf)) || stop > int64(len(buf)) {
			return out, l.corrupt(seg, seg.mmmPath, pos[i], from+int64(i), "entry runs past end of file")
		}
		payload, size, derr := DecodeEntry(buf[off:stop], MaxEntryPayload) // bounded by buf
		if derr != nil {
			return out, l.corrupt(seg, seg.mmmPath, pos[i], from+int64(i), derr.Error())
		}
		if int64(size) != stop-off {
			// Entry i itself is valid (its CRC matched); the next index
			// entry is wrong. Deliver i, report i+1, so a caller that skips
			// the reported offset does not silently lose i.
			out = append(out, Entry{Offset: from + int64(i), Payload: payload})
			return out, l.corrupt(seg, seg.idxPath, (rel+int64(i)+1)*IndexEntrySize, from+int64(i)+1,
				fmt.Sprintf("index entry does not start where entry %d ends (%d != %d)", from+int64(i), pos[i]+int64(size), pos[i]+stop-off))
		}
		out = append(out, Entry{Offset: from + int64(i), Payload: payload})
	}
	if badAt >= 0 && k == badAt {
		return out, badIndex(badAt, fmt.Sprintf("offset index entry %d holds position %d, not after entry %d", from+int64(badAt), pos[badAt], from+int64(badAt)-1))
	}
	return out, nil
}

func (l *Log) entryErr(seg *segment, pos, offset int64, err error) error {
	var be *badEntry
	if errors.As(err, &be) {
		return l.corrupt(seg, seg.mmmPath, pos, offset, be.reason)
	}
	if err == nil {
		return l.corrupt(seg, seg.mmmPath, pos, offset, "implausible entry span")
	}
	return l.ioErr(fmt.Errorf("read offset %d: %w", offset, err))
}

// Stats is a point-in-time summary of a log.
type Stats struct {
	Topic         string `json:"name"`
	NextOffset    int64  `json:"nextOffset"` // the high watermark
	Segments      int    `json:"segments"`
	Bytes         int64  `json:"bytes"`   // bytes in .mmm files
	Fsyncs        int64  `json:"fsyncs"`  // fsyncs of segment and index files since open
	Batches       int64  `json:"batches"` // group commits since open
	Failed        string `json:"failed,omitempty"`
	PendingBytes  int64  `json:"pendingBytes"`
	FirstSegment  int64  `json:"firstSegment"`
	ActiveSegment int64  `json:"activeSegment"`
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
		Segments:      len(segs),
		Bytes:         l.size.Load(),
		Fsyncs:        l.fsyncs.Load(),
		Batches:       l.batches.Load(),
		PendingBytes:  pb,
		FirstSegment:  segs[0].base,
		ActiveSegment: segs[len(segs)-1].base,
	}
	if failed != nil {
		s.Failed = failed.Error()
	}
	return s
}

// Checkpoint opens, or returns the already open, checkpoint name of this
// topic (<topic>/checkpoints/<name>.checkpoint). See OpenCheckpoint for how
// a missing, short, garbled or too-far value is treated.
func (l *Log) Checkpoint(name string) (*Checkpoint, error) {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if c, ok := l.checkpoints[name]; ok {
		return c, nil
	}
	c, err := OpenCheckpoint(l.fs, l.dir, name, l.hw.Load(), l.log)
	if err != nil {
		return nil, err
	}
	l.checkpoints[name] = c
	return c, nil
}

// Close stops accepting appends, lets the writer finish everything already
// queued (so ACCEPTED entries are written), wakes every Notify waiter and
// closes all files. It is safe to call more than once.
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
	old := l.notify.Swap(&closedChan)
	close(*old)
	var errs []error
	l.cpMu.Lock()
	for _, c := range l.checkpoints {
		errs = append(errs, c.Close())
	}
	l.cpMu.Unlock()
	for _, s := range *l.segs.Load() {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}
