package storage

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Scan: the first step of repair. It reads and opens files and describes
// what it found; it decides nothing and writes nothing.

// dirScan is a topic directory's listing sorted out: the segment start
// offsets with which of their two files exist, leftover *.tmp files, and
// names that belong to neither (in listing order, for the warnings).
type dirScan struct {
	bases   []int64 // segment start offsets, ascending
	pairs   map[int64]*pairFiles
	tmps    []string // base names of leftover *.tmp files
	unknown []unknownEntry
}

// pairFiles says which files of a segment's .mmm/.idx pair exist.
type pairFiles struct{ mmm, idx bool }

// unknownEntry is a directory entry repair leaves alone and warns about.
type unknownEntry struct {
	name string
	dir  bool
}

// scanDir lists dir. Errors are List's, unwrapped (the caller tells a
// missing directory from a failure).
func scanDir(fsys vfs.FS, dir string) (*dirScan, error) {
	ents, err := fsys.List(dir)
	if err != nil {
		return nil, err
	}
	d := &dirScan{pairs: map[int64]*pairFiles{}}
	pair := func(b int64) *pairFiles {
		p := d.pairs[b]
		if p == nil {
			p = &pairFiles{}
			d.pairs[b] = p
			d.bases = append(d.bases, b)
		}
		return p
	}
	for _, e := range ents {
		if e.IsDir {
			if e.Name != CheckpointDir {
				d.unknown = append(d.unknown, unknownEntry{name: e.Name, dir: true})
			}
			continue
		}
		if b, ok := parseSegmentName(e.Name, SegmentExt); ok {
			pair(b).mmm = true
			continue
		}
		if b, ok := parseSegmentName(e.Name, IndexExt); ok {
			pair(b).idx = true
			continue
		}
		if e.Name == IncarnationFile {
			continue
		}
		if strings.HasSuffix(e.Name, vfs.TmpExt) {
			d.tmps = append(d.tmps, e.Name)
			continue
		}
		d.unknown = append(d.unknown, unknownEntry{name: e.Name})
	}
	sort.Slice(d.bases, func(i, j int) bool { return d.bases[i] < d.bases[j] })
	return d, nil
}

// logUnknown warns about every unknown directory and file, in listing order.
func (d *dirScan) logUnknown(log *zap.Logger) {
	for _, u := range d.unknown {
		if u.dir {
			log.Warn("ignoring unknown directory in topic", zap.String("name", u.name))
		} else {
			log.Warn("ignoring unknown file in topic", zap.String("name", u.name))
		}
	}
}

// segScan is what scan found for one segment: which of its files exist,
// the files opened read-only (while the segment is planned; closed after),
// their sizes in bytes, and the byte positions held by the complete entries
// of the offset index.
type segScan struct {
	base             int64
	mmmPath, idxPath string
	hasMMM, hasIdx   bool
	mmm, idx         vfs.File // nil when the file is missing
	mmmSize, idxSize int64
	pos              []int64 // index entry i → position in .mmm
	posErr           error   // reading the index failed; plan reports it when it needs pos
}

// scanSegmentFiles opens the files of the segment starting at base and reads
// its index into s. Files it opened stay in s even on error, for the
// caller to close. Errors: opening ("open segment|index <path>: ...", with
// a hint when the open-file limit is reached) or sizing ("stat ...") a
// file.
func scanSegmentFiles(open func(string) (vfs.File, error), dir string, base int64, pr *pairFiles, s *segScan) error {
	s.base, s.hasMMM, s.hasIdx = base, pr.mmm, pr.idx
	s.mmmPath, s.idxPath = segmentPaths(dir, base)
	var err error
	if pr.mmm {
		if s.mmm, err = open(s.mmmPath); err != nil {
			return fmt.Errorf("open segment %s: %w%s", s.mmmPath, err, fdHint(err))
		}
		if s.mmmSize, err = s.mmm.Size(); err != nil {
			return fmt.Errorf("stat segment %s: %w", s.mmmPath, err)
		}
	}
	if pr.idx {
		if s.idx, err = open(s.idxPath); err != nil {
			return fmt.Errorf("open index %s: %w%s", s.idxPath, err, fdHint(err))
		}
		if s.idxSize, err = s.idx.Size(); err != nil {
			return fmt.Errorf("stat index %s: %w", s.idxPath, err)
		}
	}
	if pr.mmm && pr.idx {
		s.pos, s.posErr = readIndex(s.idx, s.idxPath, s.idxSize/IndexEntrySize)
	}
	return nil
}

// readIndex reads the first n entries of an offset index (int64 big-endian
// byte positions, IndexEntrySize bytes each) in one read.
func readIndex(idx vfs.File, path string, n int64) ([]int64, error) {
	pos := make([]int64, n)
	if n == 0 {
		return pos, nil
	}
	buf := make([]byte, n*IndexEntrySize)
	if _, err := idx.ReadAt(buf, 0); err != nil {
		return nil, fmt.Errorf("read index %s: %w", path, err)
	}
	for i := range pos {
		pos[i] = int64(binary.BigEndian.Uint64(buf[i*IndexEntrySize:]))
	}
	return pos, nil
}

// entryAt reads and verifies the entry at byte pos of the segment, bounded
// by the segment's scanned size and the format's ceiling (never by
// max-record-bytes). Validation failures are *badEntry.
func (s *segScan) entryAt(pos int64) ([]byte, error) {
	return (&segFiles{mmm: s.mmm}).readEntryAt(pos, s.mmmSize, MaxEntryPayload)
}
