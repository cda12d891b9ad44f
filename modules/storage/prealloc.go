package storage

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Preallocation (Options.Preallocate, mmmq.broker.storage.preallocate):
// the active segment's .mmm and .idx are extended with written, fsynced
// zeros ahead of the writer, so that a group commit overwrites zeros and
// makes them durable with fdatasync(2), which then has no size or block
// allocation to flush (PostgreSQL writes each new WAL file full of
// zeros for the same reason; fallocate(2) alone would not do: unwritten
// extents still need converting at the first write, RocksDB notes).
//
// The rule, in one place:
//
//   - Only the active segment of a running (or crashed) broker carries a
//     zero tail. A rotation cuts the full segment's .mmm and .idx to their
//     last entry and fsyncs both before the next segment is created, a
//     clean close and a give-back (an idle topic) do the same, and repair
//     cuts the zero tail of the last segment at startup: sealed, closed
//     and repaired files end exactly at their last entry, as the original
//     Java mmmq writes them. A sealed segment whose index ends in zero
//     entries is refused as before (it cannot have been left so).
//   - A zero chunk is written and fsynced by its own goroutine on its own
//     descriptors (so an fsync error is reported to the writer's
//     descriptor too: Linux reports a writeback error once per open
//     file), off the writer's path, while the writer's read-write pair
//     is pinned in the segment cache (never closed or evicted under it).
//     A failed chunk write or fsync fails the log like any other.
//   - The writer uses fdatasync for a file only when everything it wrote
//     in that group lies below what a completed fsync made part of the
//     file (zeros of a chunk, or data of an earlier group): no size
//     change. Otherwise, and always with preallocation off, it uses
//     fsync as before. It waits for a chunk only when its group would
//     reach the chunk being written (it caught up).
//   - A topic is preallocated only while busy (a group commit within
//     preallocBusy of the previous one), never past the segment's
//     rotation size, and only while the broker-wide PreallocBudget has
//     room and the disk guard (min-free-bytes) would keep its minimum
//     after the chunk. A topic idle for Options.PreallocateIdle gives its
//     zero tail back (cut and fsynced). The disk guard sees preallocated
//     bytes as used (they are, for statfs), and still counts every append
//     as new bytes, whether it lands in zeros or not.
//   - Sizes (rotation, retention, GET /topics bytes, metrics) are the
//     data's, never the file's.
//   - Retention-deleted segments are never reused: entries carry no
//     offset, so an old entry in a recycled file would pass its CRC.

// Defaults of the preallocation settings.
const (
	// DefaultPreallocate is mmmq.broker.storage.preallocate's default
	// (Options.Preallocate's zero value is off): 4 MiB ahead of the writer.
	DefaultPreallocate = 4 << 20
	// DefaultPreallocateMaxBytes is the broker-wide cap of preallocated
	// zero bytes (mmmq.broker.storage.preallocate-max-bytes): 256 MiB,
	// so 10,000 busy topics never hold more than that of zeros.
	DefaultPreallocateMaxBytes = 256 << 20
	// DefaultPreallocateIdle is Options.PreallocateIdle's default.
	DefaultPreallocateIdle = 10 * time.Second
	// preallocBusy: a topic is preallocated only when its group commit
	// follows the previous one within this interval.
	preallocBusy = time.Second
	// preallocAlign: chunks end on multiples of this (a page).
	preallocAlign = 4096
	// preallocWrite is the largest zero write of a chunk.
	preallocWrite = 1 << 20
	// preallocConcurrent bounds the chunks being written at once per
	// budget (broker-wide): each holds one extra descriptor.
	preallocConcurrent = 4
)

// zeros is the source of every zero write.
var zeros = make([]byte, preallocWrite)

// PreallocBudget is the broker-wide budget of preallocated bytes, shared
// by every topic's log (Options.Preallocation): at most Max bytes of zero
// tails exist at once, and at most a few chunks are written at once. It
// also holds the disk guard preallocation respects. A nil budget is
// never used: a log with preallocation on and no budget makes its own.
type PreallocBudget struct {
	max   int64
	guard *SpaceGuard
	used  atomic.Int64
	slots chan struct{}
	// Chunks not written, by cause: the cap would be passed, the disk
	// guard would go under its minimum, preallocConcurrent chunks were
	// being written.
	overCap, lowSpace, busy atomic.Int64
}

// NewPreallocBudget returns a budget of max bytes (<= 0:
// DefaultPreallocateMaxBytes) checking guard (nil: no guard) before
// every chunk.
func NewPreallocBudget(max int64, guard *SpaceGuard) *PreallocBudget {
	if max <= 0 {
		max = DefaultPreallocateMaxBytes
	}
	return &PreallocBudget{max: max, guard: guard, slots: make(chan struct{}, preallocConcurrent)}
}

// PreallocStats is a snapshot of a PreallocBudget, for metrics. The
// counters count chunks since the budget was made; a chunk not written
// costs nothing but the fdatasync its topic's group commits then do
// without (they use fsync), and the topic asks again at its next group
// commit.
type PreallocStats struct {
	Max  int64 // the cap, bytes (mmmq.broker.storage.preallocate-max-bytes)
	Used int64 // zero bytes the active segments' tails hold, as of each topic's last group commit (or a chunk being written), <= Max
	// Skipped is every chunk not written: OverCap + LowSpace + Busy.
	Skipped int64
	// OverCap: chunks not written because Used would pass Max (the
	// budget is exhausted: more busy topics than it covers).
	OverCap int64
	// LowSpace: chunks not written because the disk guard would go under
	// min-free-bytes after them.
	LowSpace int64
	// Busy: chunks not written because preallocConcurrent (4) chunks
	// were being written at that moment.
	Busy int64
}

// Stats returns the budget's counters now; zero for nil (preallocation
// off).
func (b *PreallocBudget) Stats() PreallocStats {
	if b == nil {
		return PreallocStats{}
	}
	st := PreallocStats{Max: b.max, Used: b.used.Load(),
		OverCap: b.overCap.Load(), LowSpace: b.lowSpace.Load(), Busy: b.busy.Load()}
	st.Skipped = st.OverCap + st.LowSpace + st.Busy
	return st
}

// take reserves n bytes and a writing slot, or reports false (nothing
// taken): the cap would be passed, the disk guard would go under its
// minimum, or preallocConcurrent chunks are being written.
func (b *PreallocBudget) take(n int64) bool {
	select {
	case b.slots <- struct{}{}:
	default:
		b.busy.Add(1)
		return false
	}
	for {
		u := b.used.Load()
		if u+n > b.max {
			<-b.slots
			b.overCap.Add(1)
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			break
		}
	}
	if !b.guard.allows(n) {
		b.used.Add(-n)
		<-b.slots
		b.lowSpace.Add(1)
		return false
	}
	return true
}

// done frees the writing slot of a chunk taken with take.
func (b *PreallocBudget) done() { <-b.slots }

// give returns n bytes (a zero tail cut).
func (b *PreallocBudget) give(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// preState is a log's preallocation state. mu guards every field; the
// writer, the chunk goroutine and the give-back share it.
type preState struct {
	mu   sync.Mutex
	cond *sync.Cond
	// inflight: a chunk goroutine writes .mmm from mmmFrom and .idx from
	// idxFrom on; the writer must not write there until it is done.
	inflight         bool
	mmmFrom, idxFrom int64
	// mmmEnd, idxEnd: bytes of the active segment's files that a
	// completed fsync made part of the file (its size included): zeros
	// of a chunk or data of an earlier group. A write below them changes
	// no size: fdatasync suffices.
	mmmEnd, idxEnd int64
	// held: bytes taken from the budget for the active segment's zero
	// tails: the zeros ahead of the data (and a chunk being written),
	// given back as the data overwrites them (preAfterCommit) and when
	// they are cut.
	held int64
	wg   sync.WaitGroup
	// last is the time of the last group commit (writer-owned).
	last  time.Time
	timer *time.Timer // give-back check (writer-owned)
}

// preallocating reports whether the log preallocates at all.
func (l *Log) preallocating() bool { return l.opts.Preallocate > 0 }

// preReset sets the durable ends to the active segment's data, as repair
// or a trim left it (fsynced). l.wmu is held or the writer is not running.
func (l *Log) preReset(seg *segment) {
	p := &l.pre
	p.mu.Lock()
	p.mmmEnd, p.idxEnd = seg.size, seg.count*IndexEntrySize
	p.mu.Unlock()
}

// preWait waits until no chunk is being written.
func (l *Log) preWait() {
	p := &l.pre
	p.mu.Lock()
	for p.inflight {
		p.cond.Wait()
	}
	p.mu.Unlock()
}

// preBeforeWrite is called by the writer before it writes a group of seg
// ending at mmmEnd in .mmm and idxEnd in .idx: it waits while a chunk
// being written lies where the group goes (the writer caught up) and
// reports, per file, whether the group lies below the durable end, so
// that fdatasync makes it durable.
func (l *Log) preBeforeWrite(mmmEnd, idxEnd int64) (mmmData, idxData bool) {
	if !l.preallocating() {
		return false, false
	}
	p := &l.pre
	p.mu.Lock()
	for p.inflight && (mmmEnd > p.mmmFrom || idxEnd > p.idxFrom) {
		p.cond.Wait()
	}
	mmmData, idxData = mmmEnd <= p.mmmEnd, idxEnd <= p.idxEnd
	p.mu.Unlock()
	return mmmData, idxData
}

// preIndexData reports whether the first n bytes of the active index
// lie below its durable end (fdatasync makes a write there durable).
func (l *Log) preIndexData(n int64) bool {
	if !l.preallocating() {
		return false
	}
	p := &l.pre
	p.mu.Lock()
	defer p.mu.Unlock()
	return n <= p.idxEnd
}

// preAfterCommit is called by the writer after a group commit of seg
// (files pinned, everything fsynced): when the topic is busy and its
// zero tail runs short, it starts a chunk that extends the segment to
// Preallocate bytes ahead of the data (never past SegmentMaxBytes) and
// the index to twice the index bytes those would need at the segment's
// average entry size (4 KiB to an eighth of Preallocate; never past what
// a full segment of the smallest entries needs). l.wmu is held.
func (l *Log) preAfterCommit(seg *segment, files *segFiles) {
	if !l.preallocating() {
		return
	}
	p := &l.pre
	now := time.Now()
	busy := !p.last.IsZero() && now.Sub(p.last) < preallocBusy
	p.last = now
	grow := busy && seg.size < l.opts.SegmentMaxBytes && l.Err() == nil
	ahead := l.opts.Preallocate
	idxAhead := int64(preallocAlign)
	if seg.size > 0 {
		idxAhead = max(idxAhead, min(ahead/8, 2*ahead*seg.count*IndexEntrySize/seg.size))
	}
	idxMax := (l.opts.SegmentMaxBytes/(HeaderSize+contract.MinPayloadBytes) + 1) * IndexEntrySize
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight {
		return
	}
	dataIdx := seg.count * IndexEntrySize
	// The data has overwritten zeros since the last chunk: those are no
	// longer held, and go back to the budget. Without this a busy topic
	// held every chunk it wrote until its next trim (up to a whole
	// segment), a few busy topics filled the broker-wide cap, and every
	// topic's chunks were refused while the files held few zeros.
	if zeros := max(0, p.mmmEnd-seg.size) + max(0, p.idxEnd-dataIdx); zeros < p.held {
		l.preBudget.give(p.held - zeros)
		p.held = zeros
	}
	if !grow {
		return
	}
	mmmFrom, idxFrom := max(p.mmmEnd, seg.size), max(p.idxEnd, dataIdx)
	var mmmTo, idxTo int64 = mmmFrom, idxFrom
	if mmmFrom-seg.size < ahead/2 {
		mmmTo = max(mmmFrom, min(alignDown(seg.size+ahead), l.opts.SegmentMaxBytes))
	}
	if idxFrom-dataIdx < idxAhead/2 {
		idxTo = max(idxFrom, min(alignDown(dataIdx+idxAhead), idxMax))
	}
	n := (mmmTo - mmmFrom) + (idxTo - idxFrom)
	if n <= 0 || !l.preBudget.take(n) {
		return
	}
	p.inflight, p.mmmFrom, p.idxFrom = true, mmmFrom, idxFrom
	p.held += n
	// The chunk pins the writer's pair: the cache neither closes nor
	// evicts it while the chunk's zeros are unsynced.
	files.refs.Add(1)
	p.wg.Add(1)
	if p.timer == nil {
		p.timer = time.NewTimer(l.opts.PreallocateIdle)
	} else {
		p.timer.Reset(l.opts.PreallocateIdle)
	}
	go l.preChunk(seg, files, mmmFrom, mmmTo, idxFrom, idxTo)
}

func alignDown(n int64) int64 { return n / preallocAlign * preallocAlign }

// preChunk writes zeros to seg's .mmm over [mmmFrom, mmmTo) and .idx
// over [idxFrom, idxTo) through descriptors of its own, fsyncs both and
// publishes the new durable ends. A failure fails the log.
func (l *Log) preChunk(seg *segment, files *segFiles, mmmFrom, mmmTo, idxFrom, idxTo int64) {
	p := &l.pre
	defer p.wg.Done()
	defer files.unpin()
	err := errors.Join(
		zeroFill(l, seg.mmmPath, mmmFrom, mmmTo),
		zeroFill(l, seg.idxPath, idxFrom, idxTo))
	l.preBudget.done()
	p.mu.Lock()
	p.inflight = false
	if err == nil {
		p.mmmEnd, p.idxEnd = max(p.mmmEnd, mmmTo), max(p.idxEnd, idxTo)
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	if err != nil {
		l.fail(err)
	}
}

// zeroFill writes zeros to the file at path over [from, to) and fsyncs
// it, on a descriptor opened for the call.
func zeroFill(l *Log, path string, from, to int64) error {
	if to <= from {
		return nil
	}
	f, err := l.fs.OpenRW(path)
	if err != nil {
		return fmt.Errorf("preallocate %s: %w", path, err)
	}
	for at := from; at < to && err == nil; {
		n := min(to-at, preallocWrite)
		_, err = f.WriteAt(zeros[:n], at)
		at += n
	}
	if err == nil {
		err = f.Sync()
		l.fsyncs.Add(1)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("preallocate %s: %w", path, err)
	}
	return nil
}

// preTrim cuts the active segment's files to their data (seg.size bytes,
// seg.count index entries) when they are longer, fsyncs what it cut and
// gives the budget back: before a rotation seals seg, at close and when
// the topic is idle. files is the writer's pinned pair, or nil (then the
// pair is pinned here when a cut is needed). l.wmu is held.
func (l *Log) preTrim(seg *segment, files *segFiles) error {
	if !l.preallocating() {
		return nil
	}
	l.preWait()
	p := &l.pre
	p.mu.Lock()
	held := p.held
	p.mu.Unlock()
	if held == 0 {
		return nil
	}
	if files == nil {
		f, err := l.cache.pinWritable(l.fs, seg)
		if err != nil {
			return fmt.Errorf("open active segment to cut its preallocated tail: %w", err)
		}
		defer f.unpin()
		files = f
	}
	if err := trimFile(files.mmm, seg.size); err != nil {
		return fmt.Errorf("cut preallocated tail of %s: %w", seg.mmmPath, err)
	}
	if err := trimFile(files.idx, seg.count*IndexEntrySize); err != nil {
		return fmt.Errorf("cut preallocated tail of %s: %w", seg.idxPath, err)
	}
	l.fsyncs.Add(2)
	p.mu.Lock()
	p.held = 0
	p.mmmEnd, p.idxEnd = seg.size, seg.count*IndexEntrySize
	p.mu.Unlock()
	l.preBudget.give(held)
	return nil
}

// trimFile truncates f to size when it is longer and fsyncs it either
// way (a rotation and a close rely on the fsync).
func trimFile(f interface {
	Size() (int64, error)
	Truncate(int64) error
	Sync() error
}, size int64) error {
	cur, err := f.Size()
	if err != nil {
		return err
	}
	if cur > size {
		if err := f.Truncate(size); err != nil {
			return err
		}
	}
	return f.Sync()
}

// preIdle is the give-back check, run by the writer when the timer
// fires: a topic without a group commit for PreallocateIdle has its zero
// tail cut. l.wmu is held.
func (l *Log) preIdle() {
	p := &l.pre
	if since := time.Since(p.last); since < l.opts.PreallocateIdle {
		p.timer.Reset(l.opts.PreallocateIdle - since)
		return
	}
	if l.Err() != nil {
		return
	}
	if err := l.preTrim(l.w.active, nil); err != nil {
		l.fail(err)
		l.cutAfterFailure()
		return
	}
	l.log.Debug("idle topic gave its preallocated tail back")
}

// preTimerC is the give-back timer's channel, nil (never ready) without one.
func (l *Log) preTimerC() <-chan time.Time {
	if l.pre.timer == nil {
		return nil
	}
	return l.pre.timer.C
}

// preStop waits for the chunk in flight, stops the timer and gives the
// budget back, when the writer returns.
func (l *Log) preStop() {
	l.pre.wg.Wait()
	if l.pre.timer != nil {
		l.pre.timer.Stop()
	}
	// A failed log keeps its zero tail on disk (the next start cuts it);
	// the budget is the running broker's.
	l.preDropHeld()
}

// preDropHeld gives back the budget of a zero tail that a cut other than
// preTrim removed (a failure's cut, Reopen). l.wmu is held.
func (l *Log) preDropHeld() {
	p := &l.pre
	p.mu.Lock()
	held := p.held
	p.held = 0
	p.mu.Unlock()
	l.preBudget.give(held)
}
