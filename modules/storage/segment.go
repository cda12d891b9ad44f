package storage

import (
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
)

// File names (on-disk format, do not change): a segment is
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

// segment is one .mmm/.idx pair. Its files are open while it is the
// active segment (the writer holds them) and, once sealed, while a
// SegmentCache holds them or a reader pins them (see SegmentCache): files is
// nil when they are closed. Readers use ReadAt only, on a pinned pair, so
// they need no lock. size and count are owned by the writer goroutine (for
// the active segment) and fixed for sealed ones.
type segment struct {
	base    int64
	mmmPath string
	idxPath string
	files   atomic.Pointer[segFiles]

	// writer-owned state (active segment only changes them)
	size  int64 // bytes written to .mmm (including unsynced ones)
	count int64 // index entries written

	// tail, set only on segments a check-only repair returns (Verify,
	// Dump), holds the byte positions of the last len(tail) entries: the
	// ones repair would index again, which the index file does not list.
	tail []int64
}

// position is the byte position of entry rel of s, from the index file f
// (s's files) or, for an entry repair would index again, from s.tail.
func (s *segment) position(f *segFiles, rel int64) (int64, error) {
	if onDisk := s.count - int64(len(s.tail)); rel >= onDisk {
		return s.tail[rel-onDisk], nil
	}
	pos, err := f.readPositions(rel, 1, nil)
	if err != nil {
		return 0, err
	}
	return pos[0], nil
}

func segmentPaths(dir string, base int64) (mmm, idx string) {
	name := SegmentName(base)
	return filepath.Join(dir, name+SegmentExt), filepath.Join(dir, name+IndexExt)
}
