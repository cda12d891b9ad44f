package storage

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/mmmq/mmmq/modules/contract"
)

// Finished-offsets file layout (on-disk format, do not change):
//
//	checkpoints/<name>.finished: records back to back, appended
//
//	0         4         8                     8+length
//	+---------+---------+---------------------+
//	| length  |  CRC    | body                |
//	| uint32BE| uint32BE|  length bytes       |
//	+---------+---------+---------------------+
//
//	CRC  = CRC32C(body)  (Castagnoli, as the segment entries)
//	body = kind (1 byte) | ...
//
//	kind 1, finished ranges:
//	+------+---------------+----------------------+-------------------------+
//	| 0x01 | uvarint count | uvarint lo₁, len₁    | … count pairs in all    |
//	+------+---------------+----------------------+-------------------------+
//	range i holds the offsets [loᵢ, loᵢ+lenᵢ), lenᵢ >= 1;
//	lo₁ is absolute, loᵢ (i > 1) is stored as loᵢ - hiᵢ₋₁ (>= 0), so
//	the ranges of one record are ascending and do not overlap.
//
// Any other kind, a count of 0, a body longer than MaxFinishedRecordBody,
// bytes left over after the last range, or an offset past math.MaxInt64 is
// an invalid record. Records need not be ordered with respect to each
// other: the set the file holds is the union of every record's ranges.
// Ranges below the checkpoint's offset are stale (a Commit passed them)
// and ignored when the file is read.
const (
	// FinishedExt is the file extension of a checkpoint's finished
	// offsets: <topic>/checkpoints/<name>.finished, beside
	// <name>.checkpoint. The file exists only while offsets are recorded.
	FinishedExt = ".finished"
	// FinishedCorruptExt is appended to the name of a .finished file that
	// recovery found damaged in fsynced bytes and set aside for an
	// operator: <name>.finished.corrupt.
	FinishedCorruptExt = ".corrupt"
	// FinishedHeaderSize is the size of a record header: length + CRC.
	FinishedHeaderSize = 8
	// FinishedKindRanges is the body kind of a record of finished ranges.
	FinishedKindRanges = 1
	// MaxFinishedRecordBody is the most body bytes one record holds, and
	// so the most bytes one append writes before its fsync (on-disk format
	// rule, do not change without changing recovery): a RecordFinished
	// with more ranges than fit writes several records, each fsynced
	// before the next is written. Recovery relies on it: a power loss can
	// damage only the last append, so an invalid record at byte E of a
	// file longer than E + FinishedDamageWindow is damage to fsynced
	// bytes, not a torn append.
	MaxFinishedRecordBody = 4096
	// FinishedDamageWindow is how far the end of a .finished file may lie
	// past its first invalid record and still be a torn last append (cut):
	// one record, header included, 4,104 bytes.
	FinishedDamageWindow = FinishedHeaderSize + MaxFinishedRecordBody

	// finishedMinBody is the smallest valid body: kind, count 1, and one
	// range of two one-byte uvarints.
	finishedMinBody = 4
)

// uvarintLen is the number of bytes binary.AppendUvarint takes for v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendFinishedRecord appends one record holding as many of rs (ascending,
// disjoint) as fit in MaxFinishedRecordBody to dst, and returns the extended
// slice and how many ranges it took (at least one when rs is not empty).
func appendFinishedRecord(dst []byte, rs []contract.OffsetRange) ([]byte, int) {
	if len(rs) == 0 {
		return dst, 0
	}
	n, _ := fitFinishedRecord(rs)
	start := len(dst)
	dst = append(dst, make([]byte, FinishedHeaderSize)...)
	dst = append(dst, FinishedKindRanges)
	dst = binary.AppendUvarint(dst, uint64(n))
	prev := int64(0)
	for i, r := range rs[:n] {
		lo := r.Lo
		if i > 0 {
			lo -= prev
		}
		dst = binary.AppendUvarint(dst, uint64(lo))
		dst = binary.AppendUvarint(dst, uint64(r.Hi-r.Lo))
		prev = r.Hi
	}
	body := dst[start+FinishedHeaderSize:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[start+4:], Checksum(body))
	return dst, n
}

// fitFinishedRecord is how many of rs (at least one when rs is not empty)
// one record holds, and their ranges' encoded bytes: counted first, so
// that the count's own uvarint is accounted for in MaxFinishedRecordBody.
func fitFinishedRecord(rs []contract.OffsetRange) (n, size int) {
	prev := int64(0)
	for _, r := range rs {
		lo := r.Lo
		if n > 0 {
			lo -= prev
		}
		add := uvarintLen(uint64(lo)) + uvarintLen(uint64(r.Hi-r.Lo))
		if n > 0 && 1+uvarintLen(uint64(n+1))+size+add > MaxFinishedRecordBody {
			break
		}
		n, size, prev = n+1, size+add, r.Hi
	}
	return n, size
}

// encodeFinished returns rs (ascending, disjoint) as records, each at most
// MaxFinishedRecordBody body bytes: the records one by one, so that the
// caller can fsync after each.
func encodeFinished(rs []contract.OffsetRange) [][]byte {
	var out [][]byte
	for len(rs) > 0 {
		rec, n := appendFinishedRecord(nil, rs)
		out = append(out, rec)
		rs = rs[n:]
	}
	return out
}

// encodedFinishedSize is the size in bytes of encodeFinished(rs), all
// records together, computed without encoding.
func encodedFinishedSize(rs []contract.OffsetRange) int64 {
	var total int64
	for len(rs) > 0 {
		n, size := fitFinishedRecord(rs)
		total += int64(FinishedHeaderSize + 1 + uvarintLen(uint64(n)) + size)
		rs = rs[n:]
	}
	return total
}

// decodeFinishedRecord decodes the record at the start of b, where b holds
// every byte of the file from the record on (len(b) bounds the length
// field, so a garbage length never allocates more than the file holds). It
// returns the record's ranges (ascending, disjoint) and its size in bytes,
// header included, or an error saying why the bytes are not a valid record.
func decodeFinishedRecord(b []byte) (rs []contract.OffsetRange, size int, err error) {
	if len(b) < FinishedHeaderSize {
		return nil, 0, fmt.Errorf("truncated header (%d bytes available)", len(b))
	}
	length := int64(binary.BigEndian.Uint32(b[0:4]))
	switch {
	case length < finishedMinBody:
		return nil, 0, fmt.Errorf("length %d below minimum %d", length, finishedMinBody)
	case length > MaxFinishedRecordBody:
		return nil, 0, fmt.Errorf("length %d above maximum %d", length, MaxFinishedRecordBody)
	case FinishedHeaderSize+length > int64(len(b)):
		return nil, 0, fmt.Errorf("length %d runs past end of file (%d bytes available)", length, len(b)-FinishedHeaderSize)
	}
	body := b[FinishedHeaderSize : FinishedHeaderSize+length]
	if stored, got := binary.BigEndian.Uint32(b[4:8]), Checksum(body); stored != got {
		return nil, 0, fmt.Errorf("crc mismatch: stored %08x, computed %08x", stored, got)
	}
	if body[0] != FinishedKindRanges {
		return nil, 0, fmt.Errorf("unknown record kind %d", body[0])
	}
	p := body[1:]
	count, k := binary.Uvarint(p)
	if k <= 0 {
		return nil, 0, fmt.Errorf("bad range count")
	}
	p = p[k:]
	// Each range takes at least two bytes: a count beyond that is garbage,
	// refused before anything is allocated from it.
	if count == 0 || count > uint64(len(p)/2) {
		return nil, 0, fmt.Errorf("range count %d does not fit the %d bytes of ranges", count, len(p))
	}
	rs = make([]contract.OffsetRange, 0, count)
	prev := uint64(0)
	for i := uint64(0); i < count; i++ {
		lo, k := binary.Uvarint(p)
		if k <= 0 {
			return nil, 0, fmt.Errorf("range %d: bad lo", i)
		}
		p = p[k:]
		n, k := binary.Uvarint(p)
		if k <= 0 {
			return nil, 0, fmt.Errorf("range %d: bad length", i)
		}
		p = p[k:]
		if i > 0 {
			if lo > math.MaxInt64-prev {
				return nil, 0, fmt.Errorf("range %d: offset past the largest int64", i)
			}
			lo += prev
		}
		switch {
		case n == 0:
			return nil, 0, fmt.Errorf("range %d: empty", i)
		case lo > math.MaxInt64 || n > math.MaxInt64-lo:
			return nil, 0, fmt.Errorf("range %d: offset past the largest int64", i)
		}
		rs = append(rs, contract.OffsetRange{Lo: int64(lo), Hi: int64(lo + n)})
		prev = lo + n
	}
	if len(p) != 0 {
		return nil, 0, fmt.Errorf("%d bytes after the last range", len(p))
	}
	return rs, FinishedHeaderSize + int(length), nil
}

// finishedScan is what a walk of a .finished file's records found.
type finishedScan struct {
	ranges  []contract.OffsetRange // union of the valid records before end, merged
	records int                    // valid records before end
	end     int64                  // E: where the first invalid record starts; the size when none is
	size    int64                  // the file's size
	reason  string                 // why the record at end is invalid ("" when end == size)
}

// torn reports whether an invalid record at s.end can be a torn last
// append: the file ends within FinishedDamageWindow of it.
func (s *finishedScan) torn() bool { return s.size-s.end <= FinishedDamageWindow }

// scanFinished walks the records of a .finished file's contents b.
func scanFinished(b []byte) finishedScan {
	s := finishedScan{size: int64(len(b))}
	var pos int
	for pos < len(b) {
		rs, n, err := decodeFinishedRecord(b[pos:])
		if err != nil {
			s.reason = err.Error()
			break
		}
		s.ranges = mergeRanges(s.ranges, rs)
		s.records++
		pos += n
	}
	s.end = int64(pos)
	return s
}
