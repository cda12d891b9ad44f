package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// DumpEntry is one entry as `mmmq dump` shows it.
type DumpEntry struct {
	Offset  int64
	File    string // segment file
	Pos     int64  // byte position in File
	Size    int64  // entry size in bytes (header included); 0 when unreadable
	Problem string // empty when the entry is valid; else why not (CRC mismatch...)
	Payload []byte // the message JSON when valid
}

// Dump calls fn for count entries of the topic in dir starting at offset
// from (count <= 0: to the end), without modifying any file: the segments
// are opened read-only as repair would keep them (a torn tail is
// not shown). A corrupt entry is reported through DumpEntry.Problem and the
// dump goes on. A topic refused by repair returns its *contract.CorruptionError.
func Dump(dir string, opts Options, from, count int64, fn func(DumpEntry) error) error {
	_, err := DumpReport(dir, opts, from, count, fn)
	return err
}

// DumpReport is Dump that also returns what repair would do to the topic
// at its next open (the plan Dump reads by; nothing is changed): what it
// would cut, including the valid entries of a torn group commit, which
// Dump does not show. The report is returned with a nil or a non-nil
// error alike, as far as planning got.
func DumpReport(dir string, opts Options, from, count int64, fn func(DumpEntry) error) (RepairReport, error) {
	o := opts.withDefaults()
	segs, rep, err := repairDir(o.FS, dir, filepath.Base(dir), o, false)
	if err != nil {
		return rep, err
	}
	if len(segs) == 0 {
		return rep, fmt.Errorf("topic %s not found: %s does not exist or holds no segments", filepath.Base(dir), dir)
	}
	return rep, dumpSegments(o, segs, from, count, fn)
}

// dumpSegments calls fn for the entries of the planned segments from
// offset from on (at most count of them when count > 0).
func dumpSegments(o Options, segs []*segment, from, count int64, fn func(DumpEntry) error) error {
	i := sort.Search(len(segs), func(i int) bool { return segs[i].base > from }) - 1
	if i < 0 {
		i = 0
	}
	shown := int64(0)
	for ; i < len(segs); i++ {
		s := segs[i]
		if max(from-s.base, 0) >= s.count {
			continue
		}
		n, err := dumpSegment(o.FS, s, from, count-shown, count > 0, fn)
		shown += n
		if err != nil || (count > 0 && shown >= count) {
			return err
		}
	}
	return nil
}

// dumpSegment calls fn for the entries of s from offset from on, at most
// limit of them when limited, with the segment's files opened read-only for
// the call. It returns how many it showed.
func dumpSegment(fsys vfs.FS, s *segment, from, limit int64, limited bool, fn func(DumpEntry) error) (int64, error) {
	f, err := openSealed(fsys, s)
	if err != nil {
		return 0, err
	}
	defer f.unref()
	shown := int64(0)
	for rel := max(from-s.base, 0); rel < s.count; rel++ {
		if limited && shown >= limit {
			return shown, nil
		}
		pos, err := s.position(f, rel)
		if err != nil {
			return shown, err
		}
		e := DumpEntry{Offset: s.base + rel, File: s.mmmPath, Pos: pos}
		payload, err := f.readEntryAt(pos, s.size, MaxEntryPayload)
		var be *badEntry
		switch {
		case errors.As(err, &be):
			e.Problem = be.reason
		case err != nil:
			return shown, err
		default:
			e.Size, e.Payload = EntrySize(len(payload)), payload
		}
		if err := fn(e); err != nil {
			return shown, err
		}
		shown++
	}
	return shown, nil
}
