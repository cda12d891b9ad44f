package storage

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Verify statuses, the vocabulary `mmmq verify` prints per topic.
const (
	StatusOK       = "OK"        // every indexed entry is valid
	StatusTornTail = "TORN_TAIL" // repair would cut a never-acknowledged tail on open
	// StatusIndexTail: the last segment holds valid entries its offset
	// index does not list yet (a lazily synced index, or a crash between
	// the segment's fsync and the index's); repair indexes them again on
	// open and cuts nothing. The entries are counted and checked.
	StatusIndexTail = "INDEX_TAIL"
	StatusCorrupt   = "CORRUPT" // refused: corruption with valid data after it, or a bad old entry
	// StatusZeroTail: the last segment's files end in zeros after their
	// last entry, and nothing else needs repair: the preallocated tail
	// of a broker that did not close cleanly (killed, or a power loss),
	// which repair cuts on open. Nothing acknowledged is involved.
	StatusZeroTail = "ZERO_TAIL"
	// StatusInterruptedRetention: the first segment lost one of its two
	// files to a retention deletion a crash interrupted; repair (the
	// broker's next start) removes the other one.
	StatusInterruptedRetention = "INTERRUPTED_RETENTION"
	// StatusInterruptedCreation: the directory holds only what a topic
	// creation interrupted before its incarnation id leaves (empty, or
	// incarnation.tmp); nothing was acknowledged in it, and the broker
	// removes it when it starts.
	StatusInterruptedCreation = "INTERRUPTED_CREATION"
	// StatusInterruptedDeletion: a .deleting- directory, the rest of a
	// topic deletion a crash interrupted; the broker removes it when it
	// starts.
	StatusInterruptedDeletion = "INTERRUPTED_DELETION"
)

// TopicReport is the result of a full offline check of one topic.
type TopicReport struct {
	Topic       string                    `json:"topic"`
	Status      string                    `json:"status"`
	Entries     int64                     `json:"entries"`     // entries on disk: NextOffset - StartOffset
	StartOffset int64                     `json:"startOffset"` // the first offset stored (above 0 once retention deleted segments)
	NextOffset  int64                     `json:"nextOffset"`  // one past the last offset stored: the high watermark
	Bytes       int64                     `json:"bytes"`
	Recovery    RepairReport              `json:"recovery"` // what repair would do; field and JSON names kept for `mmmq verify --json`
	Corruption  *contract.CorruptionError `json:"corruption,omitempty"`
	Checkpoints []string                  `json:"checkpointProblems,omitempty"`
	// Removed: `mmmq verify --repair` removed the directory (an interrupted
	// creation or deletion).
	Removed bool `json:"removed,omitempty"`
	// Detail says more where the status is not about entries (why a
	// directory is skipped).
	Detail string `json:"detail,omitempty"`
}

// Verify walks every index entry and every CRC of the topic in dir without
// modifying anything (for `mmmq verify`). It first sorts the directory out
// as startup does: one holding only what an interrupted creation leaves
// (startup removes it) is StatusInterruptedCreation, one holding neither
// the incarnation file nor a segment but other entries is CORRUPT. Then it
// checks the incarnation file, runs repair in check mode (what Open would
// cut or refuse), reads every kept entry sequentially, checking that each
// index entry starts where the previous entry ends and that every CRC
// matches, and finally checks the checkpoint files. progress, when set, is
// called with the number of segment bytes scanned since the previous call.
// The error is for I/O failures only; corruption is reported in the
// TopicReport.
func Verify(dir string, opts Options, progress func(n int64)) (TopicReport, error) {
	o := opts.withDefaults()
	rep := TopicReport{Topic: filepath.Base(dir), Status: StatusOK}
	if done, err := verifyDir(o.FS, dir, &rep); done || err != nil {
		return rep, err
	}
	segs, rr, err := repairDir(o.FS, dir, rep.Topic, o, false)
	rep.Recovery = rr
	var ce *contract.CorruptionError
	if errors.As(err, &ce) {
		rep.Status, rep.Corruption = StatusCorrupt, ce
		return rep, nil
	}
	if err != nil {
		return rep, err
	}
	rep.Status = repairStatus(rr)
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		rep.StartOffset, rep.NextOffset = segs[0].base, last.base+last.count
		rep.Entries = rep.NextOffset - rep.StartOffset
	}
	buf := make([]byte, 0, 64<<10)
	for _, s := range segs {
		if s.count == 0 {
			continue
		}
		if ce, err := scanSegment(o.FS, s, rep.Topic, MaxEntryPayload, buf, progress); err != nil {
			return rep, err
		} else if ce != nil {
			rep.Status, rep.Corruption = StatusCorrupt, ce
			return rep, nil
		}
		rep.Bytes += s.size
	}
	rep.Checkpoints = verifyCheckpoints(o.FS, dir, rep.NextOffset)
	return rep, nil
}

// verifyDir is what the broker decides before repair looks at a segment:
// the directory sorted out (an interrupted creation, startup removes it;
// a directory that is no topic, refused) and the incarnation file read
// (a bad one refuses the topic). It reports whether that settled rep.
func verifyDir(fsys vfs.FS, dir string, rep *TopicReport) (done bool, err error) {
	switch d, err := inspectTopicDir(fsys, dir); {
	case err != nil:
		return true, err
	case d.unfinished():
		rep.Status = StatusInterruptedCreation
		return true, nil
	case d.refused():
		rep.Status, rep.Corruption = StatusCorrupt, notATopicError(dir, d)
		return true, nil
	}
	var ce *contract.CorruptionError
	if _, err := ReadIncarnation(fsys, dir); errors.As(err, &ce) {
		rep.Status, rep.Corruption = StatusCorrupt, ce
		return true, nil
	} else if err != nil {
		return true, err
	}
	return false, nil
}

// repairStatus is the status of a topic repair would change as rr says:
// OK when clean, StatusInterruptedRetention when finishing an interrupted
// retention deletion is all it would do, else StatusTornTail.
func repairStatus(rr RepairReport) string {
	switch {
	case rr.Clean():
		return StatusOK
	case rr.InterruptedRetention != "" && len(rr.Actions) == 1:
		return StatusInterruptedRetention
	case rr.zeroTail():
		return StatusZeroTail
	case rr.ReindexedEntries > 0 && len(rr.Actions) == 1:
		return StatusIndexTail
	}
	return StatusTornTail
}

// scanSegment reads every entry of s (its files opened read-only for the
// call) and returns the first corruption found.
func scanSegment(fsys vfs.FS, s *segment, topic string, maxRecord int, buf []byte, progress func(int64)) (*contract.CorruptionError, error) {
	f, err := openSealed(fsys, s)
	if err != nil {
		return nil, err
	}
	defer f.unref()
	onDisk := s.count - int64(len(s.tail)) // the rest: entries repair would index again
	idx := bufio.NewReaderSize(io.NewSectionReader(f.idx, 0, onDisk*IndexEntrySize), 64<<10)
	mmm := bufio.NewReaderSize(io.NewSectionReader(f.mmm, 0, s.size), 1<<20)
	var pos int64
	var ib [IndexEntrySize]byte
	var hdr [HeaderSize]byte
	reported := int64(0)
	for i := int64(0); i < s.count; i++ {
		off := s.base + i
		var p int64
		if i < onDisk {
			if _, err := io.ReadFull(idx, ib[:]); err != nil {
				return nil, fmt.Errorf("read index %s: %w", s.idxPath, err)
			}
			p = int64(binary.BigEndian.Uint64(ib[:]))
		} else {
			p = s.tail[i-onDisk]
		}
		if p != pos {
			return &contract.CorruptionError{Topic: topic, File: s.idxPath, Pos: i * IndexEntrySize, Offset: off,
				Reason: fmt.Sprintf("index says entry starts at %d, previous entry ends at %d", p, pos)}, nil
		}
		if _, err := io.ReadFull(mmm, hdr[:]); err != nil {
			return &contract.CorruptionError{Topic: topic, File: s.mmmPath, Pos: pos, Offset: off, Reason: "truncated header"}, nil
		}
		n, crc, err := DecodeHeader(hdr[:], s.size-pos, maxRecord)
		if err != nil {
			return &contract.CorruptionError{Topic: topic, File: s.mmmPath, Pos: pos, Offset: off, Reason: err.Error()}, nil
		}
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if _, err := io.ReadFull(mmm, b); err != nil {
			return nil, fmt.Errorf("read segment %s at %d: %w", s.mmmPath, pos, err)
		}
		if got := Checksum(b); got != crc {
			return &contract.CorruptionError{Topic: topic, File: s.mmmPath, Pos: pos, Offset: off,
				Reason: fmt.Sprintf("crc mismatch: stored %08x, computed %08x", crc, got)}, nil
		}
		pos += EntrySize(n)
		if progress != nil && pos-reported >= 1<<20 {
			progress(pos - reported)
			reported = pos
		}
	}
	if progress != nil && pos > reported {
		progress(pos - reported)
	}
	return nil, nil
}

func verifyCheckpoints(fsys vfs.FS, dir string, end int64) []string {
	cdir := filepath.Join(dir, CheckpointDir)
	ents, err := fsys.List(cdir)
	if err != nil {
		if vfs.IsNotExist(err) {
			return nil
		}
		return []string{fmt.Sprintf("list %s: %v", cdir, err)}
	}
	var out []string
	for _, e := range ents {
		switch {
		case !e.IsDir && strings.HasSuffix(e.Name, FinishedExt):
			out = append(out, verifyFinished(fsys, filepath.Join(cdir, e.Name), e.Name, end)...)
			continue
		case !e.IsDir && strings.HasSuffix(e.Name, FinishedExt+vfs.TmpExt):
			continue // an interrupted rewrite's leftover, removed when the checkpoint opens
		case !e.IsDir && strings.Contains(e.Name, FinishedExt+FinishedCorruptExt):
			out = append(out, fmt.Sprintf("%s: a damaged finished-offsets file set aside by recovery (inspect, then delete it)", e.Name))
			continue
		case !e.IsDir && strings.HasSuffix(e.Name, ModeExt):
			out = append(out, verifyMode(fsys, filepath.Join(cdir, e.Name), e.Name)...)
			continue
		case !e.IsDir && strings.HasSuffix(e.Name, ModeExt+vfs.TmpExt):
			continue // an interrupted SetGroupMode's leftover: never read, replaced by the next one
		}
		if e.IsDir || !strings.HasSuffix(e.Name, CheckpointExt) {
			out = append(out, fmt.Sprintf("unexpected entry %s", e.Name))
			continue
		}
		f, err := fsys.Open(filepath.Join(cdir, e.Name))
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", e.Name, err))
			continue
		}
		size, _ := f.Size()
		var b [checkpointSize]byte
		switch {
		case size != checkpointSize:
			out = append(out, fmt.Sprintf("%s: %d bytes, want 8 (would restart from offset 0)", e.Name, size))
		default:
			if _, err := f.ReadAt(b[:], 0); err != nil {
				out = append(out, fmt.Sprintf("%s: %v", e.Name, err))
				break
			}
			v := int64(binary.BigEndian.Uint64(b[:]))
			if v < 0 {
				out = append(out, fmt.Sprintf("%s: negative value %d (would restart from offset 0)", e.Name, v))
			} else if v > end {
				out = append(out, fmt.Sprintf("%s: value %d beyond log end %d (would clamp)", e.Name, v, end))
			}
		}
		f.Close()
	}
	return out
}

// verifyMode checks the .mode file p (named name in the report): exactly
// "shared\n" or "exclusive\n".
func verifyMode(fsys vfs.FS, p, name string) []string {
	data, problem := readForVerify(fsys, p, name)
	if problem != nil {
		return problem
	}
	if _, err := parseGroupMode(data); err != nil {
		return []string{fmt.Sprintf("%s: %v: the consumer group's mode is unknown and the broker will not guess it (write one of them into the file, or delete the file and the group's checkpoint)", name, err)}
	}
	return nil
}

// verifyFinished checks every record of the .finished file p (named name
// in the report): CRC, kind, ranges and delivery counts ascending within a
// record. It says
// what the next open would do with an invalid record: cut it (a torn last
// append) or set the file aside (damage to fsynced data).
func verifyFinished(fsys vfs.FS, p, name string, end int64) []string {
	data, problem := readForVerify(fsys, p, name)
	if problem != nil {
		return problem
	}
	s := scanFinished(data)
	var out []string
	switch {
	case s.end == s.size:
	case s.torn():
		out = append(out, fmt.Sprintf("%s: invalid record at byte %d (%s), %d bytes before the end: a torn last append (would be cut)", name, s.end, s.reason, s.size-s.end))
	default:
		out = append(out, fmt.Sprintf("%s: corrupt record at byte %d (%s), %d bytes before the end: damage to fsynced data (would be set aside as %s%s, keeping the %d valid records before it)",
			name, s.end, s.reason, s.size-s.end, name, FinishedCorruptExt, s.records))
	}
	if n := len(s.ranges); n > 0 && s.ranges[n-1].Hi > end {
		out = append(out, fmt.Sprintf("%s: finished offsets up to %d beyond log end %d (would be dropped)", name, s.ranges[n-1].Hi, end))
	}
	if n := len(s.counts); n > 0 && s.counts[n-1].Offset >= end {
		out = append(out, fmt.Sprintf("%s: delivery counts up to offset %d at or beyond log end %d (would be dropped)", name, s.counts[n-1].Offset, end))
	}
	return out
}

// readForVerify reads the whole file p, or returns the problem to report
// (named name).
func readForVerify(fsys vfs.FS, p, name string) ([]byte, []string) {
	f, err := fsys.Open(p)
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", name, err)}
	}
	data, err := readWhole(f)
	f.Close()
	if err != nil {
		return nil, []string{fmt.Sprintf("%s: %v", name, err)}
	}
	return data, nil
}
