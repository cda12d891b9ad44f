package storage

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
)

// Reindex: part of the plan step for the last segment. Whatever index-sync
// wrote the topic, the bytes after the last valid index entry of the last
// segment may hold entries the index does not list: in lazy mode the index
// is fsynced later than the segment, and in commit mode a crash may come
// between the segment's fsync and the index's. Recovery walks them and
// indexes again every CRC-valid entry that starts where the previous one
// ends. At the first position that holds no valid entry it byte-scans the
// rest of the file: nothing valid after it is a torn tail (cut, never
// acknowledged); a valid entry after it is corruption (the topic is
// refused) — the log-queue study's recovery-scan rule.

// planReindex extends p, the last segment with n index entries kept ending
// at p.end, by the CRC-valid entries that follow contiguously (their
// positions go to p.tail) and sets p.end to the end of the last of them.
// It returns the number of entries kept, index and tail together.
func (pl *planner) planReindex(p *segPlan, n int64) (int64, error) {
	at := p.end
	for at < p.mmmSize {
		payload, err := p.entryAt(at)
		if err == nil {
			p.tail = append(p.tail, at)
			at += EntrySize(len(payload))
			continue
		}
		var be *badEntry
		if !errors.As(err, &be) {
			return 0, fmt.Errorf("read segment %s at %d: %w", p.mmmPath, at, err)
		}
		valid, found, err := p.findValidEntry(at + 1)
		if err != nil {
			return 0, err
		}
		if found {
			return 0, pl.corrupt(p.mmmPath, at, p.base+n+int64(len(p.tail)),
				"entry at byte %d is invalid (%s) but a valid entry follows at byte %d", at, be.reason, valid)
		}
		break
	}
	p.end = at
	if t := int64(len(p.tail)); t > 0 {
		pl.rep.ReindexedEntries += t
		pl.act("index again %d entries of %s from offset %d (valid in the segment after the last index entry)",
			t, filepath.Base(p.mmmPath), p.base+n)
	}
	return n + int64(len(p.tail)), nil
}

// scanWindow is how much of the segment findValidEntry reads at a time.
const scanWindow = 1 << 20

// findValidEntry byte-scans the segment from byte from to its end for the
// first position where a CRC-valid entry starts, and returns it. It reads
// the file in windows of scanWindow bytes (and an entry that runs past its
// window on its own), so memory stays bounded whatever the file's size.
func (s *segScan) findValidEntry(from int64) (pos int64, found bool, err error) {
	var buf []byte
	bufAt := int64(-1)
	for c := from; c+HeaderSize+MinPayloadBytes <= s.mmmSize; c++ {
		if bufAt < 0 || c+HeaderSize > bufAt+int64(len(buf)) {
			n := min(int64(scanWindow), s.mmmSize-c)
			if int64(cap(buf)) < n {
				buf = make([]byte, n)
			}
			buf = buf[:n]
			if err := readFullAt(s.mmm, buf, c); err != nil {
				return 0, false, fmt.Errorf("scan segment %s at %d: %w", s.mmmPath, c, err)
			}
			bufAt = c
		}
		rel := c - bufAt
		plen, crc, err := DecodeHeader(buf[rel:], s.mmmSize-c, MaxEntryPayload)
		if err != nil {
			continue
		}
		var payload []byte
		if end := rel + HeaderSize + int64(plen); end <= int64(len(buf)) {
			payload = buf[rel+HeaderSize : end]
		} else {
			payload = make([]byte, plen)
			if err := readFullAt(s.mmm, payload, c+HeaderSize); err != nil {
				return 0, false, fmt.Errorf("scan segment %s at %d: %w", s.mmmPath, c, err)
			}
		}
		if Checksum(payload) == crc {
			return c, true, nil
		}
	}
	return 0, false, nil
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
