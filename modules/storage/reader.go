package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

func (l *Log) corrupt(seg *segment, file string, pos, offset int64, reason string) *contract.CorruptionError {
	return &contract.CorruptionError{Topic: l.topic, File: file, Pos: pos, Offset: offset, Reason: reason}
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

// pin returns seg's files pinned for reading (see SegmentCache.pin).
func (l *Log) pin(seg *segment) (*segFiles, error) {
	return l.cache.pin(l.fs, seg, &l.closed)
}

// expired is the error of a read of offset below the log start offset.
func (l *Log) expired(offset int64) error {
	return &contract.OffsetExpiredError{Topic: l.topic, Offset: offset, StartOffset: l.StartOffset()}
}

// pinErr is the error of a failed pin of the segment holding offset: a
// segment that retention deleted between the lookup and the open (its
// files are gone) is an expired offset, not an I/O error.
func (l *Log) pinErr(offset int64, err error) error {
	if vfs.IsNotExist(err) && offset < l.StartOffset() {
		return l.expired(offset)
	}
	return l.ioErr(fmt.Errorf("read offset %d: %w", offset, err))
}

func (l *Log) ioErr(err error) error {
	if l.closed.Load() || errors.Is(err, os.ErrClosed) {
		return contract.ErrClosed
	}
	return err
}

// Read returns the message JSON stored at offset. Errors: contract.ErrOutOfRange for
// offset < 0 or >= HighWatermark(); a *contract.OffsetExpiredError
// (contract.ErrOffsetExpired) for 0 <= offset < StartOffset(), deleted by retention;
// *contract.CorruptionError when the entry fails validation on every read
// (the first one and the re-reads of rereadPauses: the caller decides to
// skip it); I/O errors as they are.
func (l *Log) Read(offset int64) ([]byte, error) {
	hw := l.hw.Load()
	if offset < 0 || offset >= hw {
		return nil, fmt.Errorf("read offset %d (high watermark %d): %w", offset, hw, contract.ErrOutOfRange)
	}
	seg, _ := l.findSegment(offset)
	if seg == nil {
		return nil, l.expired(offset)
	}
	f, err := l.pin(seg)
	if err != nil {
		return nil, l.pinErr(offset, err)
	}
	payload, err := l.readOne(seg, f, offset)
	f.unpin()
	if isCorruption(err) {
		err = l.reread(seg, offset, err, func(f *segFiles) error {
			payload, err = l.readOne(seg, f, offset)
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	return payload, nil
}

// readOne is Read of offset in seg through its pinned files f. Like
// ReadBatch it reads the index entry before offset's too (when it is in
// seg) and reports an entry that is not after it: an index page read as
// zeros (see rereadPauses) would otherwise point offset at the segment's
// first entry and return that message under offset.
func (l *Log) readOne(seg *segment, f *segFiles, offset int64) ([]byte, error) {
	rel := offset - seg.base
	first := max(rel-1, 0)
	var buf [2 * IndexEntrySize]byte
	all, err := f.readPositions(first, rel-first+1, buf[:])
	if err != nil {
		return nil, l.ioErr(err)
	}
	pos := all[len(all)-1]
	if pos < 0 {
		return nil, l.corrupt(seg, seg.idxPath, rel*IndexEntrySize, offset, fmt.Sprintf("offset index entry holds invalid position %d", pos))
	}
	if rel > 0 && all[0] >= pos {
		return nil, l.corrupt(seg, seg.idxPath, rel*IndexEntrySize, offset,
			fmt.Sprintf("offset index entry %d (position %d) is not after entry %d (position %d)", offset, pos, offset-1, all[0]))
	}
	payload, err := f.readEntryAt(pos, -1, l.opts.MaxRecordBytes)
	if err != nil {
		var be *badEntry
		if errors.As(err, &be) {
			return nil, l.corrupt(seg, seg.mmmPath, pos, offset, be.reason)
		}
		return nil, l.ioErr(fmt.Errorf("read offset %d: %w", offset, err))
	}
	return payload, nil
}

// rereadPauses are the pauses before each re-read of an entry below the
// high watermark that failed validation: the first re-read at once, the
// last about 31 ms after the first read. A re-read goes through
// descriptors opened for it.
//
// Why: every entry below the high watermark was written and fsynced
// before it was published, so bytes that do not decode there are either
// corruption or a page cache that has not seen the write yet. The second
// happens on FUSE (seen on LazyFS, with preallocation on): the kernel
// keeps one page cache per file for every descriptor, and a read that
// runs while a write(2) into bytes the file already has (preallocated
// zeros) is still on its way to the FUSE daemon can bring the page back
// from the daemon as it was before the write; that stale page then
// serves the zeros to every descriptor, after the write and the fsync
// returned, until something drops it (our reading of the kernel's FUSE
// client; the storage README has what was measured). Opening the file
// drops it (FUSE does on every open). On a local filesystem the cache is the file and
// a re-read finds what the first read found. Only what still fails
// after the last re-read is reported as corruption.
var rereadPauses = [...]time.Duration{0, time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond}

// isCorruption reports whether err is a *contract.CorruptionError.
func isCorruption(err error) bool {
	var ce *contract.CorruptionError
	return errors.As(err, &ce)
}

// reread retries read, a read of seg that failed validation with first
// (a *contract.CorruptionError at offset), through a pair of seg's files
// opened for each attempt and closed after it (counted by the segment
// cache, never cached), after each of rereadPauses, until read returns
// anything but a corruption. It returns read's last error, or the error of
// opening the pair. No pin is held while it opens one (no caller pins two
// pairs at once). An entry that reads intact on a re-read is counted
// (Log.staleReads) and logged as a warning.
func (l *Log) reread(seg *segment, offset int64, first error, read func(f *segFiles) error) error {
	err := first
	for i, pause := range rereadPauses {
		if pause > 0 {
			time.Sleep(pause)
		}
		f, oerr := l.cache.openReserved(&l.closed, func() (*segFiles, error) { return openSealed(l.fs, seg) })
		if oerr != nil {
			return l.pinErr(offset, oerr)
		}
		err = read(f)
		f.unref()
		if !isCorruption(err) {
			l.staleReads.Add(1)
			var ce *contract.CorruptionError
			errors.As(first, &ce)
			l.log.Warn("entry failed validation, then read intact from newly opened files: the page cache had not seen its write yet",
				zap.Int64("offset", ce.Offset), zap.String("file", ce.File), zap.Int64("pos", ce.Pos),
				zap.String("reason", ce.Reason), zap.Int("rereads", i+1))
			return err
		}
	}
	return err
}

// readBudget bounds the bytes one ReadBatch call reads at once.
const readBudget = 1 << 20

// ReadBatch returns up to max consecutive entries starting at from, all
// below the high watermark, read in bulk (one index read and one segment
// read per batch, within one segment). It returns no entries and no error
// when from >= HighWatermark(). On a corrupt entry at offset o (one that
// fails validation on the first read and on every re-read of
// rereadPauses) it returns the entries before o and a
// *contract.CorruptionError with Offset o; the caller skips o by reading
// again from o+1. from below StartOffset() (deleted by
// retention) is a *contract.OffsetExpiredError (contract.ErrOffsetExpired).
// Payloads share one buffer per call.
func (l *Log) ReadBatch(from int64, max int) ([]Entry, error) {
	hw := l.hw.Load()
	if from < 0 {
		return nil, fmt.Errorf("read offset %d: %w", from, contract.ErrOutOfRange)
	}
	if from >= hw || max <= 0 {
		return nil, nil
	}
	seg, end := l.findSegment(from)
	if seg == nil {
		return nil, l.expired(from)
	}
	n := min(end, hw) - from
	if n > int64(max) {
		n = int64(max)
	}
	f, err := l.pin(seg)
	if err != nil {
		return nil, l.pinErr(from, err)
	}
	out, err := l.readBatch(seg, f, from, n)
	f.unpin()
	if isCorruption(err) {
		err = l.reread(seg, from, err, func(f *segFiles) error {
			out, err = l.readBatch(seg, f, from, n)
			return err
		})
	}
	return out, err
}

// readBatch is ReadBatch of n entries from from in seg through its pinned
// files f.
func (l *Log) readBatch(seg *segment, f *segFiles, from, n int64) ([]Entry, error) {
	b := &batchRead{l: l, seg: seg, f: f, from: from, rel: from - seg.base}
	if err := b.positions(n); err != nil {
		return nil, err
	}
	if err := b.span(); err != nil {
		return nil, err
	}
	return b.decode()
}

// batchRead is one ReadBatch call within one segment: the index positions
// it read, how many of them form the span read from the segment, and where
// that span ends.
type batchRead struct {
	l       *Log
	seg     *segment
	f       *segFiles // seg's files, pinned for the call
	from    int64     // first offset asked for
	rel     int64     // from - seg.base
	pos     []int64   // byte positions of entries from, from+1, ...
	k       int       // entries in the span: pos[:k]
	badAt   int       // first index entry that is negative or not increasing, or -1
	spanEnd int64     // byte position just past entry k-1
}

// badIndex is the *contract.CorruptionError for the index entry of offset from+i.
func (b *batchRead) badIndex(i int, why string) error {
	return b.l.corrupt(b.seg, b.seg.idxPath, (b.rel+int64(i))*IndexEntrySize, b.from+int64(i), why)
}

// positions reads the index entries of the n offsets from b.from on, and
// stops the span at the first one that is negative or not after the one
// before it, and at the read budget (at least one entry).
func (b *batchRead) positions(n int64) error {
	// One index read also covers the entry before from (when it is in this
	// segment), so every position is checked to be after the previous one:
	// an index entry pointing backwards is reported instead of returning an
	// earlier message under this offset. (One pointing forward into the
	// middle of an entry fails the header or CRC check in decode.)
	first := b.rel
	if b.rel > 0 {
		first = b.rel - 1
	}
	all, err := b.f.readPositions(first, b.rel-first+n, nil)
	if err != nil {
		return b.l.ioErr(err)
	}
	b.pos = all[b.rel-first:]
	b.k, b.badAt = len(b.pos), -1
	for i := 0; i < b.k; i++ {
		if b.pos[i] < 0 || (i > 0 && b.pos[i] <= b.pos[i-1]) {
			b.k, b.badAt = i, i
			break
		}
	}
	if b.k == 0 {
		return b.badIndex(0, fmt.Sprintf("offset index entry holds invalid position %d", b.pos[0]))
	}
	if b.rel > 0 && (all[0] < 0 || all[0] >= b.pos[0]) {
		return b.badIndex(0, fmt.Sprintf("offset index entry %d (position %d) is not after entry %d (position %d)", b.from, b.pos[0], b.from-1, all[0]))
	}
	// Keep the span within the read budget (at least one entry).
	for b.k > 1 && b.pos[b.k-1]-b.pos[0] > readBudget {
		b.k--
	}
	return nil
}

// span sets spanEnd from the header of the span's last entry. A bad last
// header ends the span before that entry, or, when it is the only one, is
// reported as the corruption of from.
func (b *batchRead) span() error {
	var hdr [HeaderSize]byte
	last := b.pos[b.k-1]
	if _, err := b.f.mmm.ReadAt(hdr[:], last); err == nil {
		if pl, _, herr := b.f.decodeVisibleHeader(hdr[:], last, b.l.opts.MaxRecordBytes); herr == nil {
			b.spanEnd = last + EntrySize(pl)
		}
	} else if !errors.Is(err, io.EOF) {
		return b.l.ioErr(fmt.Errorf("read offset %d: %w", b.from+int64(b.k-1), err))
	}
	if b.spanEnd == 0 { // bad last header: stop before it, or report it alone
		if b.k == 1 {
			_, rerr := b.f.readEntryAt(last, -1, b.l.opts.MaxRecordBytes)
			return b.l.entryErr(b.seg, last, b.from, rerr)
		}
		b.k--
		b.spanEnd = b.pos[b.k]
	}
	// The budget loop bounds pos[k-1]-pos[0]; the last entry's length was
	// checked against the file: the span is bounded by what the file holds.
	if b.pos[0] < 0 || b.pos[b.k-1]-b.pos[0] > readBudget {
		_, rerr := b.f.readEntryAt(b.pos[0], -1, b.l.opts.MaxRecordBytes)
		return b.l.entryErr(b.seg, b.pos[0], b.from, rerr)
	}
	return nil
}

// decode reads the span in one ReadAt and decodes its entries, each of
// which must end where the next index entry says the next one starts. It
// returns the entries before the first problem and that problem.
func (b *batchRead) decode() ([]Entry, error) {
	buf := make([]byte, b.spanEnd-b.pos[0])
	if nr, err := b.f.mmm.ReadAt(buf, b.pos[0]); err != nil {
		if !errors.Is(err, io.EOF) {
			return nil, b.l.ioErr(fmt.Errorf("read offset %d: %w", b.from, err))
		}
		buf = buf[:nr]
	}
	out := make([]Entry, 0, b.k)
	for i := 0; i < b.k; i++ {
		off := b.pos[i] - b.pos[0]
		stop := int64(len(buf))
		if i+1 < b.k {
			stop = b.pos[i+1] - b.pos[0]
		}
		at := b.from + int64(i)
		if off >= int64(len(buf)) || stop > int64(len(buf)) {
			return out, b.l.corrupt(b.seg, b.seg.mmmPath, b.pos[i], at, "entry runs past end of file")
		}
		payload, size, derr := DecodeEntry(buf[off:stop], MaxEntryPayload) // bounded by buf
		if derr != nil {
			return out, b.l.corrupt(b.seg, b.seg.mmmPath, b.pos[i], at, derr.Error())
		}
		out = append(out, Entry{Offset: at, Payload: payload})
		if int64(size) != stop-off {
			// Entry i itself is valid (its CRC matched); the next index
			// entry is wrong. Deliver i, report i+1, so a caller that skips
			// the reported offset does not silently lose i.
			return out, b.l.corrupt(b.seg, b.seg.idxPath, (b.rel+int64(i)+1)*IndexEntrySize, at+1,
				fmt.Sprintf("index entry does not start where entry %d ends (%d != %d)", at, b.pos[i]+int64(size), b.pos[i]+stop-off))
		}
	}
	if b.badAt >= 0 && b.k == b.badAt {
		return out, b.badIndex(b.badAt, fmt.Sprintf("offset index entry %d holds position %d, not after entry %d", b.from+int64(b.badAt), b.pos[b.badAt], b.from+int64(b.badAt)-1))
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

// readPositions reads index entries [from, from+n) of the segment.
func (s *segFiles) readPositions(from, n int64, buf []byte) ([]int64, error) {
	need := int(n * IndexEntrySize)
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	if _, err := s.idx.ReadAt(buf, from*IndexEntrySize); err != nil {
		return nil, fmt.Errorf("read index %s at entry %d: %w", s.seg.idxPath, from, err)
	}
	pos := make([]int64, n)
	for i := range pos {
		pos[i] = int64(binary.BigEndian.Uint64(buf[i*IndexEntrySize:]))
	}
	return pos, nil
}

// badEntry is a validation failure of an entry's bytes (as opposed to an I/O
// error): callers turn it into a *contract.CorruptionError with the place.
type badEntry struct{ reason string }

func (e *badEntry) Error() string { return e.reason }

func bad(format string, args ...any) error { return &badEntry{reason: fmt.Sprintf(format, args...)} }

// readEntryAt reads and verifies the entry at byte pos of the .mmm file.
// limit is the file size when known (repair), or -1 (reads of visible
// entries: the writer may be appending beyond them); then the header is
// validated by decodeVisibleHeader. It never allocates more than a
// validated length. Validation failures are *badEntry; I/O errors are
// returned as they are.
func (s *segFiles) readEntryAt(pos, limit int64, maxRecord int) ([]byte, error) {
	var hdr [HeaderSize]byte
	if pos < 0 || (limit >= 0 && limit-pos < HeaderSize) {
		return nil, bad("position %d outside segment of %d bytes", pos, limit)
	}
	if _, err := s.mmm.ReadAt(hdr[:], pos); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, bad("header at %d past end of file", pos)
		}
		return nil, fmt.Errorf("read header: %w", err)
	}
	var n int
	var crc uint32
	var err error
	if limit < 0 {
		n, crc, err = s.decodeVisibleHeader(hdr[:], pos, maxRecord)
	} else {
		n, crc, err = DecodeHeader(hdr[:], limit-pos, maxRecord)
	}
	if err != nil {
		return nil, bad("%s", err.Error())
	}
	payload := make([]byte, n)
	if _, err := s.mmm.ReadAt(payload, pos+HeaderSize); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, bad("entry of %d payload bytes runs past end of file", n)
		}
		return nil, fmt.Errorf("read payload: %w", err)
	}
	if got := Checksum(payload); got != crc {
		return nil, bad("crc mismatch: stored %08x, computed %08x", crc, got)
	}
	return payload, nil
}

// decodeVisibleHeader validates the header hdr of an entry at byte pos that
// is below the high watermark, where the writer may be appending beyond it
// so the file's size is not a fixed bound. A length up to maxRecord (the
// configured max-record-bytes) is accepted as it is; a longer one is checked
// against the file's current size and the format's own ceiling,
// MaxEntryPayload: an entry written under a higher max-record-bytes stays
// valid when the setting is lowered. If the size cannot be read, the first
// error stands. This is the only place with that fallback.
func (s *segFiles) decodeVisibleHeader(hdr []byte, pos int64, maxRecord int) (payloadLen int, crc uint32, err error) {
	payloadLen, crc, err = DecodeHeader(hdr, HeaderSize+int64(maxRecord), maxRecord)
	if err != nil {
		if size, serr := s.mmm.Size(); serr == nil {
			payloadLen, crc, err = DecodeHeader(hdr, size-pos, MaxEntryPayload)
		}
	}
	return payloadLen, crc, err
}
