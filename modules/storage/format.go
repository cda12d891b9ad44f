package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/mmmq/mmmq/modules/contract"
)

// Entry layout in a segment file (on-disk format, do not change):
//
//	0         4         8                      8+len-4
//	+---------+---------+----------------------+
//	| length  |  CRC    | message bytes (JSON) |
//	| int32BE | uint32BE|  length - 4 bytes    |
//	+---------+---------+----------------------+
//
//	length = 4 + len(JSON)          (the CRC plus the message bytes)
//	CRC    = CRC32C(JSON)           (Castagnoli polynomial, over the JSON only)
//
// Offset index layout (.idx; wire format, do not change): one int64
// big-endian byte position per entry, entry i of the segment at byte i×8.
const (
	// HeaderSize is the size of an entry header: length + CRC.
	HeaderSize = 8
	// IndexEntrySize is the size of one offset index entry.
	IndexEntrySize = 8
	// MaxEntryPayload is the format's own ceiling on a payload: what the
	// int32 length field can hold. Reads and repair decode against it
	// (bounded by the file's size, so a garbage length never allocates
	// more than the file holds) rather than against the configured
	// max-record-bytes, which only limits new appends: lowering that
	// setting must never make entries written under the old limit look
	// torn or corrupt.
	MaxEntryPayload = 1<<31 - 1 - 4

	// MaxGroupBytes is the most bytes one group commit writes to a
	// segment file before it fsyncs it, unless a single entry is larger
	// (then that entry is a group of its own). Recovery relies on it
	// (on-disk format rule, do not change without changing recovery): a
	// power loss can damage only the bytes written since the file's last
	// completed fsync, so after the first position E of the last segment
	// where no valid entry starts, a CRC-valid entry can survive a crash
	// only within one group of E; one at E + DamageWindow or beyond means
	// bytes that had been fsynced were damaged. It is a constant of the
	// format, not a setting, so that a restart under other settings
	// judges a crash by the rule that wrote it.
	MaxGroupBytes = 1 << 20

	// DamageAlign is the granularity the damage window is rounded up to:
	// a 4 KiB page, the largest unit in which a page cache writes a
	// file back.
	DamageAlign = 4096

	// LazyIndexSyncBytes bounds, in lazy index-sync mode, the segment
	// bytes whose offset index entries are written but not yet fsynced:
	// the writer fsyncs the index once they reach it, besides the
	// index-sync-interval timer. It bounds what recovery walks after a
	// crash (about LazyIndexSyncBytes + one group); recovery itself does
	// not depend on it, so it may change.
	LazyIndexSyncBytes = 4 << 20
)

// DamageWindow is how far past the first invalid position E of the last
// segment a CRC-valid entry may lie and still be crash damage (a torn
// group commit, cut): MaxGroupBytes rounded up to DamageAlign, 1 MiB. A
// group of several entries writes at most MaxGroupBytes; a group of one
// larger entry holds no other entry, so nothing valid can follow E within
// it. The size a damaged header claims is never used: it is untrusted (one
// flipped bit in a length field would otherwise widen the window over
// fsynced data).
const DamageWindow = (MaxGroupBytes + DamageAlign - 1) / DamageAlign * DamageAlign

// Defaults of Options, the one place they are written: the configuration's
// defaults (mmmq.broker.segment, config.Default and configs/mmmq.yaml) are
// checked against them by a test of package topicqueue.
const (
	// DefaultMaxRecordBytes is the default cap on one message JSON, in
	// bytes (mmmq.broker.segment.max-record-bytes, 1 MiB).
	DefaultMaxRecordBytes = 1 << 20
	// DefaultSegmentMaxBytes is the default rotation threshold, in bytes
	// (mmmq.broker.segment.max-bytes, 64 MiB).
	DefaultSegmentMaxBytes int64 = 64 << 20

	// The names the engine and its tests use.
	defaultMaxRecordBytes  = DefaultMaxRecordBytes
	defaultSegmentMaxBytes = DefaultSegmentMaxBytes
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Checksum returns CRC32C(payload), the value stored in an entry header.
func Checksum(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

// EntrySize is the number of bytes an entry with a payload of n bytes takes
// in a segment file.
func EntrySize(n int) int64 { return int64(HeaderSize + n) }

// AppendEntry appends the encoded entry for payload to dst and returns the
// extended slice.
func AppendEntry(dst, payload []byte) []byte {
	var hdr [HeaderSize]byte
	binary.BigEndian.PutUint32(hdr[0:4], uint32(4+len(payload)))
	binary.BigEndian.PutUint32(hdr[4:8], Checksum(payload))
	dst = append(dst, hdr[:]...)
	return append(dst, payload...)
}

// DecodeHeader validates an entry header before anything is allocated from
// it. avail is the number of bytes of the file from the start of the entry
// (header included); maxRecord is the largest payload accepted. It returns
// the payload length and the stored CRC, or an error saying why the header is
// not a plausible entry: a length below 4+contract.MinPayloadBytes, above
// 4+maxRecord, or beyond the end of the file.
func DecodeHeader(hdr []byte, avail int64, maxRecord int) (payloadLen int, crc uint32, err error) {
	if len(hdr) < HeaderSize || avail < HeaderSize {
		return 0, 0, fmt.Errorf("truncated header (%d bytes available)", avail)
	}
	length := int64(int32(binary.BigEndian.Uint32(hdr[0:4])))
	switch {
	case length < 4+contract.MinPayloadBytes:
		return 0, 0, fmt.Errorf("length %d below minimum %d", length, 4+contract.MinPayloadBytes)
	case length > 4+int64(maxRecord):
		return 0, 0, fmt.Errorf("length %d above maximum %d", length, 4+maxRecord)
	case 4+length > avail:
		return 0, 0, fmt.Errorf("length %d runs past end of file (%d bytes available)", length, avail-HeaderSize)
	}
	return int(length - 4), binary.BigEndian.Uint32(hdr[4:8]), nil
}

// DecodeEntry decodes the entry at the start of b, where b holds every
// available byte of the file from the entry on (so len(b) bounds the length
// field). It returns the payload (a sub-slice of b, not copied) and the
// entry's total size, or an error naming what is wrong.
func DecodeEntry(b []byte, maxRecord int) (payload []byte, size int, err error) {
	n, crc, err := DecodeHeader(b, int64(len(b)), maxRecord)
	if err != nil {
		return nil, 0, err
	}
	payload = b[HeaderSize : HeaderSize+n]
	if got := Checksum(payload); got != crc {
		return nil, 0, fmt.Errorf("crc mismatch: stored %08x, computed %08x", crc, got)
	}
	return payload, HeaderSize + n, nil
}
