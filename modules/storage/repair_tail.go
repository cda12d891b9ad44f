package storage

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Tail: part of the plan step for the last segment, the one place where a
// power loss leaves its marks. Whatever index-sync wrote the topic, the
// bytes after the last index entry that checks out may hold entries the
// index does not list (lazy mode fsyncs the index later than the segment;
// commit mode may crash between the two fsyncs), and the bytes written
// since the segment's last completed fsync may have reached the disk in
// any order: a page cache writes dirty pages back as it likes, so a hole
// (zeros, or a torn sector) followed by data that did persist is an
// ordinary crash outcome there, not corruption.
//
// The rule, in three steps:
//
//  1. Walk: from the end of the last kept index entry, follow every
//     CRC-valid entry that starts where the previous one ends. They are
//     indexed again. E is the first position where no valid entry starts.
//  2. Index: the last segment's offset index past the kept entries is
//     derived data. An entry that agrees with the walk is kept; a zero or
//     garbage entry (one that points at no valid entry) is rebuilt from
//     the walk. An index entry that points at a valid entry the walk does
//     not put there is refused: an index entry is written only after the
//     segment bytes it points at were fsynced, so a disagreement means
//     bytes that had been fsynced were damaged.
//  3. Segment: a group commit writes at most MaxGroupBytes (or one larger
//     entry, which holds no other) before it fsyncs, and every earlier
//     group was fsynced, so the unsynced bytes a crash can damage start at
//     or before E and the valid entries among them start within one group
//     of it. A CRC-valid entry starting at E +
//     DamageWindow or beyond therefore lies in fsynced data after damage:
//     refused, naming file, byte and offset. Anything closer is a torn
//     group commit: cut at E, however many holes, zeros or valid entries
//     lie between; the valid entries cut are counted.
//
// The residual risk, the trade PostgreSQL makes at the end of its WAL:
// damage to acknowledged bytes that lies within DamageWindow of the end of
// the data cannot be told from a torn group commit, and is cut with
// whatever follows it — logged and counted.

// planTail extends p, the last segment with kept index entries ending at
// p.end, a plausible index prefix of prefix entries (those after kept were
// cut by planTornEntries) and n complete index entries in its file, by the
// CRC-valid entries
// that follow contiguously (their positions go to p.tail), judges the
// index entries after the kept ones and the bytes after the walk, and sets
// p.end to the end of the walk. It returns the number of entries kept,
// index and tail together.
func (pl *planner) planTail(p *segPlan, kept, prefix, n int64) (int64, error) {
	r := &tailReader{f: p.mmm, path: p.mmmPath, size: p.mmmSize, at: -1}
	at := p.end
	var firstBad string
	for at < p.mmmSize {
		size, reason, err := r.entry(at)
		if err != nil {
			return 0, err
		}
		if reason != "" {
			firstBad = reason
			break
		}
		p.tail = append(p.tail, at)
		at += size
	}
	if err := pl.planLaterIndex(p, r, kept, prefix, n, at); err != nil {
		return 0, err
	}
	if t := int64(len(p.tail)); t > 0 {
		pl.rep.ReindexedEntries += t
		pl.act("index again %d entries of %s from offset %d (valid in the segment after the last index entry)",
			t, filepath.Base(p.mmmPath), p.base+kept)
	}
	if at < p.mmmSize {
		// The zeros that end the file (a preallocated tail) are found
		// from the end, a window at a time: no entry starts in them,
		// so the damage scan stops where they start.
		zs, err := r.zeroTailStart(at)
		if err != nil {
			return 0, err
		}
		p.zeroTail = p.mmmSize - zs
		if err := pl.planDamage(p, r, kept, at, firstBad, zs); err != nil {
			return 0, err
		}
	}
	p.end = at
	return kept + int64(len(p.tail)), nil
}

// planLaterIndex judges the index entries from..n-1 against the walk
// (p.tail, from entry kept on, ending at byte end): agreeing ones are
// rewritten as they are,
// zero and garbage ones are cut (rebuilt from the walk), and one that
// points at a valid entry the walk does not put there refuses the topic.
func (pl *planner) planLaterIndex(p *segPlan, r *tailReader, kept, from, n, end int64) error {
	var cut, firstCut int64 = 0, -1
	for j := from; j < n; j++ {
		q := p.pos[j]
		t := j - kept
		if t < int64(len(p.tail)) && p.tail[t] == q {
			continue
		}
		if q > 0 && q < p.mmmSize {
			_, reason, err := r.entry(q)
			if err != nil {
				return err
			}
			if reason == "" {
				want := fmt.Sprintf("the segment walk ends at byte %d before it", end)
				if t < int64(len(p.tail)) {
					want = fmt.Sprintf("the segment walk puts it at byte %d", p.tail[t])
				}
				return pl.corrupt(p.idxPath, j*IndexEntrySize, p.base+j,
					"offset index entry %d points at a valid entry at byte %d but %s: bytes fsynced before that index entry was written were damaged",
					p.base+j, q, want)
			}
		}
		if firstCut < 0 {
			firstCut = j
		}
		cut++
	}
	if cut > 0 {
		pl.rep.CutEntries += cut
		pl.rep.CutIndexBytes += cut * IndexEntrySize
		pl.act("cut %d invalid index entries of %s from offset %d (zero or garbage; the index is rebuilt from the segment)",
			cut, filepath.Base(p.idxPath), p.base+firstCut)
	}
	return nil
}

// planDamage judges the bytes of the last segment from at, the first
// position where no valid entry starts (why: reason), to zs, where the
// zeros that end the file start (no entry starts after it):
// a CRC-valid entry at at+DamageWindow or beyond refuses the topic;
// closer ones are a torn group commit, counted and cut with the rest.
func (pl *planner) planDamage(p *segPlan, r *tailReader, kept, at int64, reason string, zs int64) error {
	const window = DamageWindow
	offset := p.base + kept + int64(len(p.tail))
	var cutValid int64
	for from := at + 1; ; {
		pos, size, found, err := r.findEntry(from, zs)
		if err != nil {
			return err
		}
		if !found {
			break
		}
		if pos >= at+window {
			return pl.corrupt(p.mmmPath, at, offset,
				"entry at byte %d is invalid (%s) but a valid entry follows at byte %d, %d bytes after it: more than one group commit (%d bytes) can leave unsynced, so bytes that had been fsynced were damaged",
				at, reason, pos, pos-at, window)
		}
		cutValid++
		from = pos + size
	}
	if cutValid > 0 {
		pl.rep.CutValidEntries += cutValid
		pl.act("cut a torn group commit of %s at byte %d (%s): %d bytes, holding %d CRC-valid entries after the damage, within %d bytes of it (not acknowledged, unless acknowledged bytes were damaged there: the residual risk)",
			filepath.Base(p.mmmPath), at, reason, max(zs, at)-at, cutValid, window)
	}
	return nil
}

// scanWindow is how much of the segment tailReader reads at a time.
const scanWindow = 1 << 20

// tailReader reads the last segment's bytes after its index in windows of
// scanWindow bytes, so that walking many small entries costs one read per
// window rather than two per entry, and memory stays bounded whatever the
// file's size (an entry larger than a window is read on its own).
type tailReader struct {
	f    vfs.File
	path string
	size int64  // the file's size, as scanned
	buf  []byte // the window
	at   int64  // file position of buf[0]; -1 before the first read
}

// window returns the buffered bytes from pos on, at least HeaderSize of
// them unless the file ends sooner, reading a new window when needed.
func (r *tailReader) window(pos int64) ([]byte, error) {
	if r.at >= 0 && pos >= r.at && pos+HeaderSize <= r.at+int64(len(r.buf)) {
		return r.buf[pos-r.at:], nil
	}
	if r.at >= 0 && pos >= r.at && r.at+int64(len(r.buf)) == r.size {
		return r.buf[pos-r.at:], nil
	}
	return r.fill(pos)
}

// fill reads a new window at pos (up to scanWindow bytes, fewer at the
// file's end).
func (r *tailReader) fill(pos int64) ([]byte, error) {
	n := max(min(int64(scanWindow), r.size-pos), 0)
	if int64(cap(r.buf)) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if err := readFullAt(r.f, r.buf, pos); err != nil {
		r.at = -1
		return nil, fmt.Errorf("read segment %s at %d: %w", r.path, pos, err)
	}
	r.at = pos
	return r.buf, nil
}

// payload returns the n bytes at pos, from the window when they lie in it.
func (r *tailReader) payload(pos int64, n int) ([]byte, error) {
	if r.at >= 0 && pos >= r.at && pos+int64(n) <= r.at+int64(len(r.buf)) {
		return r.buf[pos-r.at : pos-r.at+int64(n)], nil
	}
	if n <= scanWindow {
		b, err := r.fill(pos)
		if err != nil {
			return nil, err
		}
		if len(b) >= n {
			return b[:n], nil
		}
	}
	b := make([]byte, n)
	if err := readFullAt(r.f, b, pos); err != nil {
		return nil, fmt.Errorf("read segment %s at %d: %w", r.path, pos, err)
	}
	return b, nil
}

// entry checks the entry at pos against the file's size and the format's
// ceiling (never max-record-bytes): its size in bytes, or why no valid
// entry starts there (reason), or an I/O error.
func (r *tailReader) entry(pos int64) (size int64, reason string, err error) {
	if r.size-pos < HeaderSize {
		return 0, fmt.Sprintf("truncated header (%d bytes available)", r.size-pos), nil
	}
	b, err := r.window(pos)
	if err != nil {
		return 0, "", err
	}
	plen, crc, derr := DecodeHeader(b, r.size-pos, MaxEntryPayload)
	if derr != nil {
		return 0, derr.Error(), nil
	}
	payload, err := r.payload(pos+HeaderSize, plen)
	if err != nil {
		return 0, "", err
	}
	if got := Checksum(payload); got != crc {
		return 0, fmt.Sprintf("crc mismatch: stored %08x, computed %08x", crc, got), nil
	}
	return EntrySize(plen), "", nil
}

// findEntry scans the segment from byte from up to (not including) byte
// limit for the first position where a CRC-valid entry starts, and
// returns it with the entry's size (which may reach past limit). Runs of
// zeros are skipped a window at a time, not byte by byte: a
// valid entry's 4-byte length is never zero, so no entry starts at a
// position whose next four bytes are all zero.
func (r *tailReader) findEntry(from, limit int64) (pos, size int64, found bool, err error) {
	for c := from; c < limit && c+HeaderSize+contract.MinPayloadBytes <= r.size; {
		b, err := r.window(c)
		if err != nil {
			return 0, 0, false, err
		}
		if b[0] == 0 && b[1] == 0 && b[2] == 0 && b[3] == 0 {
			z := nonZero(b)
			if z < 0 {
				// All zero to the window's end: a length may start in
				// its last three bytes.
				c = max(c+1, c+int64(len(b))-3)
				continue
			}
			c = max(c+1, c+int64(z)-3)
			continue
		}
		size, reason, err := r.entry(c)
		if err != nil {
			return 0, 0, false, err
		}
		if reason == "" {
			return c, size, true, nil
		}
		c++
	}
	return 0, 0, false, nil
}

// zeroTailStart returns where the run of zero bytes that ends the file
// starts, at or after from (r.size when the last byte is not zero). It
// reads from the end backwards a window at a time and compares whole
// pages against zeros, so a preallocated tail of megabytes costs a few
// large reads and memory compares, not a byte-by-byte scan.
func (r *tailReader) zeroTailStart(from int64) (int64, error) {
	for end := r.size; end > from; {
		start := max(from, end-scanWindow)
		b, err := r.fill(start)
		if err != nil {
			return 0, err
		}
		if i := lastNonZero(b[:end-start]); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return from, nil
}

// lastNonZero returns the index of the last non-zero byte of b, or -1.
func lastNonZero(b []byte) int {
	const page = 4096
	end := len(b)
	for end > 0 {
		start := max(0, end-page)
		if !bytes.Equal(b[start:end], zeros[:end-start]) {
			for i := end - 1; i >= start; i-- {
				if b[i] != 0 {
					return i
				}
			}
		}
		end = start
	}
	return -1
}

// nonZero returns the index of the first non-zero byte of b, or -1.
func nonZero(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if b[i]|b[i+1]|b[i+2]|b[i+3]|b[i+4]|b[i+5]|b[i+6]|b[i+7] != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// readFullAt fills p from byte off of f; an io.EOF that comes with a full
// read is not an error.
func readFullAt(f io.ReaderAt, p []byte, off int64) error {
	n, err := f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return err
}
