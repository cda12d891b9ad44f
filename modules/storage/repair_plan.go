package storage

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Plan: the second step of repair. It decides, per segment, how many index
// entries and segment bytes to keep, following the decision table in the
// package doc, or refuses the topic with a *contract.CorruptionError. It reads entry
// headers and payloads where a decision needs them (a few per segment, not
// a full scan) and writes nothing.

// segPlan is the repair decision for one segment: what scan found plus what
// to keep. It is applied only when the whole topic is free of corruption.
type segPlan struct {
	segScan
	createIdx bool // complete an interrupted rotation: create the missing .idx
	removeIdx bool // drop a lone empty .idx left by an interrupted rotation
	// finishDelete: the first segment lost one of its two files to an
	// interrupted retention deletion; remove the other one.
	finishDelete bool
	count        int64 // entries kept: index entries kept plus tail
	end          int64 // segment bytes kept
	// tail holds the byte positions of the entries indexed again (the
	// last segment's CRC-valid entries after its last valid index entry,
	// see planTail); apply appends them to the index.
	tail []int64
	// zeroTail is the number of zero bytes that end the last segment's
	// .mmm after its kept entries (preallocation), cut with the rest.
	zeroTail int64
}

// indexKept is the number of entries kept of the index file as it is.
func (p *segPlan) indexKept() int64 { return p.count - int64(len(p.tail)) }

// segment is the kept segment p describes, its files closed. Its tail is
// the plan's: set until apply writes it to the index.
func (p *segPlan) segment() *segment {
	return &segment{base: p.base, mmmPath: p.mmmPath, idxPath: p.idxPath, size: p.end, count: p.count, tail: p.tail}
}

// closeFiles closes the files scan opened for p, once p is planned: repair
// holds the files of one segment at a time, whatever the segment count.
// The index positions, no longer needed, are dropped too.
func (p *segPlan) closeFiles() {
	if p.mmm != nil {
		p.mmm.Close()
		p.mmm = nil
	}
	if p.idx != nil {
		p.idx.Close()
		p.idx = nil
	}
	p.pos = nil
}

// planner carries what every planning step shares: the topic named in a
// *contract.CorruptionError and the report the decisions are written to.
type planner struct {
	topic string
	rep   *RepairReport
}

// corrupt is the refusal of the topic: corruption at byte pos of file,
// concerning offset.
func (pl *planner) corrupt(file string, pos, offset int64, format string, args ...any) error {
	return &contract.CorruptionError{Topic: pl.topic, File: file, Pos: pos, Offset: offset, Reason: fmt.Sprintf(format, args...)}
}

// act records one planned change in the report.
func (pl *planner) act(format string, args ...any) {
	pl.rep.Actions = append(pl.rep.Actions, fmt.Sprintf(format, args...))
}

// planSegments scans and plans the segments of d in offset order and stops
// at the first corruption or I/O error. The files of each segment are open
// only while it is planned (scan opens them read-only; apply reopens what it
// changes).
func (pl *planner) planSegments(fsys vfs.FS, dir string, d *dirScan) ([]*segPlan, error) {
	plans := make([]*segPlan, 0, len(d.bases))
	var nextBase int64 = -1
	for i, base := range d.bases {
		p := &segPlan{}
		plans = append(plans, p)
		err := scanSegmentFiles(fsys.Open, dir, base, d.pairs[base], &p.segScan)
		if err == nil {
			nextBase, err = pl.planSegment(p, nextBase, i == 0, i == len(d.bases)-1)
		}
		p.closeFiles()
		if err != nil {
			return nil, err
		}
	}
	return plans, nil
}

// planSegment plans one segment given where the previous one ends
// (nextBase, -1 for the first: a chain may start at any offset, retention
// deletes from the head) and returns where this one ends (-1 when the
// segment is dropped and the next one starts the chain).
func (pl *planner) planSegment(p *segPlan, nextBase int64, first, last bool) (int64, error) {
	if nextBase >= 0 && p.base != nextBase {
		f := p.mmmPath
		if !p.hasMMM {
			f = p.idxPath
		}
		return 0, pl.corrupt(f, 0, p.base, "segment starts at offset %d but the previous segment ends at %d", p.base, nextBase)
	}
	// A pair with one file missing: only a crash during rotation at the
	// tail, leaving the other file empty, or during a retention deletion
	// at the head (any size: retention removes the .idx, then the .mmm) is
	// expected.
	if !p.hasMMM || !p.hasIdx {
		switch {
		case first && !last:
			p.finishDelete = true
			lone := p.mmmPath
			if p.hasIdx {
				lone = p.idxPath
			}
			pl.rep.InterruptedRetention = filepath.Base(lone)
			pl.act("finish interrupted retention deletion: remove %s", filepath.Base(lone))
			return -1, nil
		case last && !p.hasIdx && p.mmmSize == 0:
			p.createIdx = true
			pl.act("complete interrupted rotation: create %s", filepath.Base(p.idxPath))
			return p.base, nil
		case last && !p.hasMMM && p.idxSize == 0:
			p.removeIdx = true
			pl.act("remove lone empty index %s left by an interrupted rotation", filepath.Base(p.idxPath))
			return nextBase, nil
		case !p.hasIdx:
			return 0, pl.corrupt(p.mmmPath, 0, p.base, "offset index file %s is missing", filepath.Base(p.idxPath))
		default:
			return 0, pl.corrupt(p.idxPath, 0, p.base, "segment file %s is missing", filepath.Base(p.mmmPath))
		}
	}
	if err := pl.planPair(p, last); err != nil {
		return 0, err
	}
	return p.base + p.count, nil
}

// planPair decides how much of a segment with both files to keep,
// index-based (no full scan): the index must be a plausible increasing
// sequence, the last kept entry must be complete with a valid CRC and must
// start where the entry before it ends. A sealed segment is held to that
// strictly (its index was fsynced before the next segment existed). Only
// the last segment may lose a torn or invalid tail, and only there is the
// rest of the offset index derived data, judged against a walk of the
// segment after the last kept entry (planTail); the bytes after the last
// kept entry are cut.
func (pl *planner) planPair(p *segPlan, last bool) error {
	n, err := pl.planIndexLength(p, last)
	var prefix, k int64
	if err == nil {
		prefix, err = pl.planIndexPositions(p, last, n)
	}
	if err == nil {
		k, err = pl.planTornEntries(p, last, prefix)
	}
	if err == nil {
		err = pl.checkJoin(p, k)
	}
	if err != nil {
		return err
	}
	if k == 0 {
		p.end = 0
	}
	if last {
		if k, err = pl.planTail(p, k, prefix, n); err != nil {
			return err
		}
	}
	p.count = k
	if torn := p.mmmSize - p.end - p.zeroTail; torn > 0 {
		pl.rep.TruncatedBytes += torn
		pl.act("truncate %s from %d to %d bytes (torn tail after the last valid entry)", filepath.Base(p.mmmPath), p.end+torn, p.end)
	}
	if p.zeroTail > 0 {
		pl.zero(p, p.zeroTail, "cut a zero tail of %d bytes from %s at byte %d (preallocated, or zeros a crash left)",
			p.zeroTail, filepath.Base(p.mmmPath), p.mmmSize-p.zeroTail)
	}
	return nil
}

// zero records the cut of n zero bytes at the end of one of p's files.
func (pl *planner) zero(p *segPlan, n int64, format string, args ...any) {
	pl.rep.ZeroTailBytes += n
	pl.rep.zeroActs++
	pl.act(format, args...)
}

// planIndexLength cuts a torn index entry (a length not a multiple of
// IndexEntrySize) of the last segment and refuses one in a sealed segment.
// It returns the number of complete index entries.
func (pl *planner) planIndexLength(p *segPlan, last bool) (int64, error) {
	if rem := p.idxSize % IndexEntrySize; rem != 0 {
		if !last {
			return 0, pl.corrupt(p.idxPath, p.idxSize-rem, p.base+p.idxSize/IndexEntrySize, "sealed offset index has a torn entry (%d bytes)", rem)
		}
		pl.rep.CutIndexBytes += rem
		pl.act("cut torn index tail of %s: %d bytes", filepath.Base(p.idxPath), rem)
	}
	if p.posErr != nil {
		return 0, p.posErr
	}
	n := int64(len(p.pos))
	if last {
		// Trailing zero entries are a preallocated index tail (or zeros
		// a crash left): no entry was ever written there. Entry 0 is
		// kept (position 0 is its valid value) and judged as usual.
		z := n
		for z > 1 && p.pos[z-1] == 0 {
			z--
		}
		if z < n {
			pl.zero(p, (n-z)*IndexEntrySize, "cut a zero tail of %d index entries from %s (preallocated, or zeros a crash left; no entry was written there)",
				n-z, filepath.Base(p.idxPath))
			n = z
		}
	}
	return n, nil
}

// plausiblePrefix is the number of leading index positions that form a
// plausible sequence: the first is 0 and each next one is after the
// previous by at least the smallest entry and at most the largest.
func plausiblePrefix(pos []int64) int64 {
	const maxGap = int64(HeaderSize + MaxEntryPayload)
	k := 0
	for k < len(pos) {
		if k == 0 && pos[0] != 0 {
			break
		}
		if k > 0 {
			if d := pos[k] - pos[k-1]; d < HeaderSize+contract.MinPayloadBytes || d > maxGap {
				break
			}
		}
		k++
	}
	return int64(k)
}

// planIndexPositions returns the plausible prefix of the first n index
// entries. In a sealed segment an implausible entry refuses the topic; in
// the last segment the entries after the prefix are left to planTail,
// which rebuilds them from the segment or refuses a valid one that
// disagrees with it.
func (pl *planner) planIndexPositions(p *segPlan, last bool, n int64) (int64, error) {
	pos := p.pos[:n]
	k := plausiblePrefix(pos)
	if k < n && !last {
		return 0, pl.corrupt(p.idxPath, k*IndexEntrySize, p.base+k, "offset index entry holds implausible position %d", pos[k])
	}
	return k, nil
}

// planTornEntries walks back over the trailing entries (of the first n)
// whose bytes are torn: a bad header, a length past the end of the file or
// a CRC mismatch. They are cut in the last segment; in a sealed one, or
// when an index entry points past the end of the segment, the topic is
// refused. It sets p.end to the end of the last valid entry and returns
// the number of entries kept.
func (pl *planner) planTornEntries(p *segPlan, last bool, n int64) (int64, error) {
	for n > 0 {
		at := p.pos[n-1]
		if at >= p.mmmSize {
			// Name the first entry the segment does not hold whole, not
			// only the last one: the positions are increasing (the
			// plausible prefix), so it is the one before the first
			// position past the end, or that one when the file ends
			// exactly there.
			j := sort.Search(int(n), func(i int) bool { return p.pos[i] >= p.mmmSize })
			first := int64(j)
			if j > 0 && p.pos[j] > p.mmmSize {
				first = int64(j - 1)
			}
			return 0, pl.corrupt(p.mmmPath, p.pos[first], p.base+first,
				"segment is shorter (%d bytes) than its offset index says: offsets %d..%d (from byte %d; the last indexed entry starts at %d) are missing or cut short",
				p.mmmSize, p.base+first, p.base+n-1, p.pos[first], at)
		}
		payload, err := p.entryAt(at)
		if err == nil {
			p.end = at + EntrySize(len(payload))
			return n, nil
		}
		var be *badEntry
		if !errors.As(err, &be) {
			return 0, fmt.Errorf("read segment %s at %d: %w", p.mmmPath, at, err)
		}
		if !last {
			return 0, pl.corrupt(p.mmmPath, at, p.base+n-1, "last entry of a sealed segment is invalid: %s", be.reason)
		}
		pl.rep.CutEntries++
		pl.rep.CutIndexBytes += IndexEntrySize
		pl.act("cut torn entry at offset %d (%s byte %d: %s)", p.base+n-1, filepath.Base(p.mmmPath), at, be.reason)
		n--
	}
	return 0, nil
}

// checkJoin refuses the topic unless the entry before the last kept one
// (of n) ends exactly where the last one starts: an index entry pointing
// into the middle of an entry is corruption, not a torn tail.
func (pl *planner) checkJoin(p *segPlan, n int64) error {
	if n < 2 {
		return nil
	}
	var hdr [HeaderSize]byte
	at := p.pos[n-2]
	if _, err := p.mmm.ReadAt(hdr[:], at); err != nil {
		return fmt.Errorf("read segment %s at %d: %w", p.mmmPath, at, err)
	}
	plen, _, err := DecodeHeader(hdr[:], p.mmmSize-at, MaxEntryPayload)
	if err != nil || at+EntrySize(plen) != p.pos[n-1] {
		return pl.corrupt(p.idxPath, (n-1)*IndexEntrySize, p.base+n-1,
			"offset index entry %d (position %d) does not start where entry %d ends", p.base+n-1, p.pos[n-1], p.base+n-2)
	}
	return nil
}

// planTmps plans the removal of leftover *.tmp files (names relative to
// the topic directory).
func (pl *planner) planTmps(tmps []string) {
	for _, t := range tmps {
		pl.rep.Removed = append(pl.rep.Removed, t)
		pl.act("remove leftover %s", t)
	}
}
