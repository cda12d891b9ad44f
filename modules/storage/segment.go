package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// File names (seed 000 "세그먼트"; wire format, do not change): a segment is
// the pair <start>.mmm + <start>.idx where <start> is the segment's first
// offset written as 19 decimal digits.
const (
	SegmentExt = ".mmm"
	IndexExt   = ".idx"
	nameDigits = 19
)

// SegmentName returns the base file name (without extension) of the segment
// starting at offset base, e.g. "0000000000000001024".
func SegmentName(base int64) string {
	s := strconv.FormatInt(base, 10)
	return strings.Repeat("0", nameDigits-len(s)) + s
}

// parseSegmentName returns the start offset encoded in a file name such as
// "0000000000000001024.mmm", and false for any other name.
func parseSegmentName(name, ext string) (int64, bool) {
	stem, ok := strings.CutSuffix(name, ext)
	if !ok || len(stem) != nameDigits {
		return 0, false
	}
	for i := 0; i < len(stem); i++ {
		if stem[i] < '0' || stem[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseInt(stem, 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

// segment is one .mmm/.idx pair. Files stay open for the life of the log;
// readers use ReadAt only, so they need no lock. size and count are owned by
// the writer goroutine (for the active segment) and fixed for sealed ones.
type segment struct {
	base    int64
	mmm     vfs.File
	idx     vfs.File
	mmmPath string
	idxPath string

	// writer-owned state (active segment only changes them)
	size  int64 // bytes written to .mmm (including unsynced ones)
	count int64 // index entries written
}

func (s *segment) close() error {
	var errs []error
	if s.mmm != nil {
		errs = append(errs, s.mmm.Close())
	}
	if s.idx != nil {
		errs = append(errs, s.idx.Close())
	}
	return errors.Join(errs...)
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

func segmentPaths(dir string, base int64) (mmm, idx string) {
	name := SegmentName(base)
	return filepath.Join(dir, name+SegmentExt), filepath.Join(dir, name+IndexExt)
}
