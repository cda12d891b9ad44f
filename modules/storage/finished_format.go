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
//	kind 2, delivery counts (a shared consumer group's):
//	+------+---------------+----------------------+-------------------------+
//	| 0x02 | uvarint count | uvarint off₁, n₁     | … count pairs in all    |
//	+------+---------------+----------------------+-------------------------+
//	the message at offset offᵢ was handed out nᵢ times, 1 <= nᵢ <= 2³²-1;
//	off₁ is absolute, offᵢ (i > 1) is stored as offᵢ - offᵢ₋₁ - 1 (>= 0)
//	(kind 1's rule, an offset taken as the range [off, off+1)), so the
//	offsets of one record are strictly ascending.
//
// Any other kind, a count of 0, a body longer than MaxFinishedRecordBody,
// bytes left over after the last pair, a delivery count of 0 or past
// 2³²-1, or an offset past math.MaxInt64 is an invalid record. Records
// need not be ordered with respect to each other, with one exception: the
// finished set the file holds is the union of every kind-1 record's
// ranges; the delivery count of an offset is the one of the last kind-2
// record (in file order) that holds it, and it is not live when the
// offset is finished. Ranges and counts below the checkpoint's offset are
// stale (a Commit passed them) and ignored when the file is read.
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
	// FinishedKindDeliveries is the body kind of a record of delivery
	// counts (offset, times handed out).
	FinishedKindDeliveries = 2
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
	// range or one delivery count of two one-byte uvarints.
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
	return frameRecord(dst, start), n
}

// frameRecord fills in the header (length, CRC) of the record that starts
// at dst[start] and runs to the end of dst, and returns dst.
func frameRecord(dst []byte, start int) []byte {
	body := dst[start+FinishedHeaderSize:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(dst[start+4:], Checksum(body))
	return dst
}

// appendDeliveriesRecord appends one kind-2 record holding as many of ds
// (strictly ascending by offset, counts >= 1) as fit in
// MaxFinishedRecordBody to dst, and returns the extended slice and how
// many counts it took (at least one when ds is not empty).
func appendDeliveriesRecord(dst []byte, ds []contract.DeliveryCount) ([]byte, int) {
	if len(ds) == 0 {
		return dst, 0
	}
	n, _ := fitDeliveriesRecord(ds)
	start := len(dst)
	dst = append(dst, make([]byte, FinishedHeaderSize)...)
	dst = append(dst, FinishedKindDeliveries)
	dst = binary.AppendUvarint(dst, uint64(n))
	for i, d := range ds[:n] {
		off := d.Offset
		if i > 0 {
			off -= ds[i-1].Offset + 1
		}
		dst = binary.AppendUvarint(dst, uint64(off))
		dst = binary.AppendUvarint(dst, uint64(d.Count))
	}
	return frameRecord(dst, start), n
}

// fitDeliveriesRecord is how many of ds (at least one when ds is not
// empty) one record holds, and their pairs' encoded bytes.
func fitDeliveriesRecord(ds []contract.DeliveryCount) (n, size int) {
	for i, d := range ds {
		off := d.Offset
		if i > 0 {
			off -= ds[i-1].Offset + 1
		}
		add := uvarintLen(uint64(off)) + uvarintLen(uint64(d.Count))
		if n > 0 && 1+uvarintLen(uint64(n+1))+size+add > MaxFinishedRecordBody {
			break
		}
		n, size = n+1, size+add
	}
	return n, size
}

// encodeDeliveries returns ds (strictly ascending by offset) as kind-2
// records, each at most MaxFinishedRecordBody body bytes, one by one.
func encodeDeliveries(ds []contract.DeliveryCount) [][]byte {
	var out [][]byte
	for len(ds) > 0 {
		rec, n := appendDeliveriesRecord(nil, ds)
		out = append(out, rec)
		ds = ds[n:]
	}
	return out
}

// encodedDeliveriesSize is the size in bytes of encodeDeliveries(ds), all
// records together, computed without encoding.
func encodedDeliveriesSize(ds []contract.DeliveryCount) int64 {
	var total int64
	for len(ds) > 0 {
		n, size := fitDeliveriesRecord(ds)
		total += int64(FinishedHeaderSize + 1 + uvarintLen(uint64(n)) + size)
		ds = ds[n:]
	}
	return total
}

// encodeLive is the whole content of a .finished file holding exactly rs
// and ds: the kind-1 records, then the kind-2 ones.
func encodeLive(rs []contract.OffsetRange, ds []contract.DeliveryCount) []byte {
	var data []byte
	for _, rec := range encodeFinished(rs) {
		data = append(data, rec...)
	}
	for _, rec := range encodeDeliveries(ds) {
		data = append(data, rec...)
	}
	return data
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

// finishedRecord is one decoded record of a .finished file: its ranges
// (kind 1) or its delivery counts (kind 2).
type finishedRecord struct {
	ranges []contract.OffsetRange   // ascending, disjoint
	counts []contract.DeliveryCount // strictly ascending by offset, counts >= 1
}

// decodeFinishedRecord decodes the record at the start of b, where b holds
// every byte of the file from the record on (len(b) bounds the length
// field, so a garbage length never allocates more than the file holds). It
// returns the record's ranges or counts and its size in bytes, header
// included, or an error saying why the bytes are not a valid record.
func decodeFinishedRecord(b []byte) (rec finishedRecord, size int, err error) {
	if len(b) < FinishedHeaderSize {
		return rec, 0, fmt.Errorf("truncated header (%d bytes available)", len(b))
	}
	length := int64(binary.BigEndian.Uint32(b[0:4]))
	switch {
	case length < finishedMinBody:
		return rec, 0, fmt.Errorf("length %d below minimum %d", length, finishedMinBody)
	case length > MaxFinishedRecordBody:
		return rec, 0, fmt.Errorf("length %d above maximum %d", length, MaxFinishedRecordBody)
	case FinishedHeaderSize+length > int64(len(b)):
		return rec, 0, fmt.Errorf("length %d runs past end of file (%d bytes available)", length, len(b)-FinishedHeaderSize)
	}
	body := b[FinishedHeaderSize : FinishedHeaderSize+length]
	if stored, got := binary.BigEndian.Uint32(b[4:8]), Checksum(body); stored != got {
		return rec, 0, fmt.Errorf("crc mismatch: stored %08x, computed %08x", stored, got)
	}
	switch body[0] {
	case FinishedKindRanges:
		rec.ranges, err = decodeRanges(body[1:])
	case FinishedKindDeliveries:
		rec.counts, err = decodeDeliveries(body[1:])
	default:
		return rec, 0, fmt.Errorf("unknown record kind %d", body[0])
	}
	if err != nil {
		return finishedRecord{}, 0, err
	}
	return rec, FinishedHeaderSize + int(length), nil
}

// decodeRanges decodes the body of a kind-1 record after its kind byte.
func decodeRanges(p []byte) ([]contract.OffsetRange, error) {
	count, k := binary.Uvarint(p)
	if k <= 0 {
		return nil, fmt.Errorf("bad range count")
	}
	p = p[k:]
	// Each range takes at least two bytes: a count beyond that is garbage,
	// refused before anything is allocated from it.
	if count == 0 || count > uint64(len(p)/2) {
		return nil, fmt.Errorf("range count %d does not fit the %d bytes of ranges", count, len(p))
	}
	rs := make([]contract.OffsetRange, 0, count)
	prev := uint64(0)
	for i := uint64(0); i < count; i++ {
		lo, k := binary.Uvarint(p)
		if k <= 0 {
			return nil, fmt.Errorf("range %d: bad lo", i)
		}
		p = p[k:]
		n, k := binary.Uvarint(p)
		if k <= 0 {
			return nil, fmt.Errorf("range %d: bad length", i)
		}
		p = p[k:]
		if i > 0 {
			if lo > math.MaxInt64-prev {
				return nil, fmt.Errorf("range %d: offset past the largest int64", i)
			}
			lo += prev
		}
		switch {
		case n == 0:
			return nil, fmt.Errorf("range %d: empty", i)
		case lo > math.MaxInt64 || n > math.MaxInt64-lo:
			return nil, fmt.Errorf("range %d: offset past the largest int64", i)
		}
		rs = append(rs, contract.OffsetRange{Lo: int64(lo), Hi: int64(lo + n)})
		prev = lo + n
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the last range", len(p))
	}
	return rs, nil
}

// decodeDeliveries decodes the body of a kind-2 record after its kind
// byte.
func decodeDeliveries(p []byte) ([]contract.DeliveryCount, error) {
	count, k := binary.Uvarint(p)
	if k <= 0 {
		return nil, fmt.Errorf("bad delivery count pairs")
	}
	p = p[k:]
	// Each pair takes at least two bytes (as a range does).
	if count == 0 || count > uint64(len(p)/2) {
		return nil, fmt.Errorf("delivery pair count %d does not fit the %d bytes of pairs", count, len(p))
	}
	ds := make([]contract.DeliveryCount, 0, count)
	next := uint64(0) // the lowest offset the next pair may hold
	for i := uint64(0); i < count; i++ {
		off, k := binary.Uvarint(p)
		if k <= 0 {
			return nil, fmt.Errorf("delivery %d: bad offset", i)
		}
		p = p[k:]
		n, k := binary.Uvarint(p)
		if k <= 0 {
			return nil, fmt.Errorf("delivery %d: bad count", i)
		}
		p = p[k:]
		if next > math.MaxInt64 || off > math.MaxInt64-next {
			return nil, fmt.Errorf("delivery %d: offset past the largest int64", i)
		}
		off += next
		switch {
		case n == 0:
			return nil, fmt.Errorf("delivery %d: count 0", i)
		case n > math.MaxUint32:
			return nil, fmt.Errorf("delivery %d: count %d past the largest uint32", i, n)
		}
		ds = append(ds, contract.DeliveryCount{Offset: int64(off), Count: uint32(n)})
		next = off + 1
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%d bytes after the last delivery count", len(p))
	}
	return ds, nil
}

// finishedScan is what a walk of a .finished file's records found.
type finishedScan struct {
	ranges  []contract.OffsetRange   // union of the valid kind-1 records before end, merged
	counts  []contract.DeliveryCount // the last count of each offset in the valid kind-2 records before end, ascending
	records int                      // valid records before end
	end     int64                    // E: where the first invalid record starts; the size when none is
	size    int64                    // the file's size
	reason  string                   // why the record at end is invalid ("" when end == size)
}

// torn reports whether an invalid record at s.end can be a torn last
// append: the file ends within FinishedDamageWindow of it.
func (s *finishedScan) torn() bool { return s.size-s.end <= FinishedDamageWindow }

// scanFinished walks the records of a .finished file's contents b.
func scanFinished(b []byte) finishedScan {
	s := finishedScan{size: int64(len(b))}
	var pos int
	counts := map[int64]uint32{}
	for pos < len(b) {
		rec, n, err := decodeFinishedRecord(b[pos:])
		if err != nil {
			s.reason = err.Error()
			break
		}
		if rec.ranges != nil {
			s.ranges = mergeRanges(s.ranges, rec.ranges)
		}
		for _, d := range rec.counts {
			counts[d.Offset] = d.Count // a later record replaces an earlier one
		}
		s.records++
		pos += n
	}
	s.end = int64(pos)
	if len(counts) > 0 {
		s.counts = make([]contract.DeliveryCount, 0, len(counts))
		for off, n := range counts {
			s.counts = append(s.counts, contract.DeliveryCount{Offset: off, Count: n})
		}
		sortDeliveries(s.counts)
	}
	return s
}
