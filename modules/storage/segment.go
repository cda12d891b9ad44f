package storage

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mmmq/mmmq/modules/storage/vfs"
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

func segmentPaths(dir string, base int64) (mmm, idx string) {
	name := SegmentName(base)
	return filepath.Join(dir, name+SegmentExt), filepath.Join(dir, name+IndexExt)
}
