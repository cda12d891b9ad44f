package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

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

// readPositions reads index entries [from, from+n) of the segment.
func (s *segment) readPositions(from, n int64, buf []byte) ([]int64, error) {
	need := int(n * IndexEntrySize)
	if cap(buf) < need {
		buf = make([]byte, need)
	}
	buf = buf[:need]
	if _, err := s.idx.ReadAt(buf, from*IndexEntrySize); err != nil {
		return nil, fmt.Errorf("read index %s at entry %d: %w", s.idxPath, from, err)
	}
	pos := make([]int64, n)
	for i := range pos {
		pos[i] = int64(binary.BigEndian.Uint64(buf[i*IndexEntrySize:]))
	}
	return pos, nil
}

// badEntry is a validation failure of an entry's bytes (as opposed to an I/O
// error): callers turn it into a *CorruptionError with the place.
type badEntry struct{ reason string }

func (e *badEntry) Error() string { return e.reason }

func bad(format string, args ...any) error { return &badEntry{reason: fmt.Sprintf(format, args...)} }

// readEntryAt reads and verifies the entry at byte pos of the .mmm file.
// limit is the file size when known (repair), or -1 (reads of visible
// entries: the writer may be appending beyond them); then lengths up to
// maxRecord are read directly and longer ones are checked against the
// file's current size first. It never allocates more
// than a validated length. Validation failures are *badEntry; I/O errors are
// returned as they are.
func (s *segment) readEntryAt(pos, limit int64, maxRecord int) ([]byte, error) {
	var hdr [HeaderSize]byte
	avail := limit - pos
	if limit < 0 {
		avail = HeaderSize + int64(maxRecord)
	}
	if pos < 0 || avail < HeaderSize {
		return nil, bad("position %d outside segment of %d bytes", pos, limit)
	}
	if _, err := s.mmm.ReadAt(hdr[:], pos); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, bad("header at %d past end of file", pos)
		}
		return nil, fmt.Errorf("read header: %w", err)
	}
	n, crc, err := DecodeHeader(hdr[:], avail, maxRecord)
	if err != nil && limit < 0 {
		// Longer than the configured limit: an entry written under a
		// higher one is still valid if the file holds it.
		if size, serr := s.mmm.Size(); serr == nil {
			n, crc, err = DecodeHeader(hdr[:], size-pos, MaxEntryPayload)
		}
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
