package schedule

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/mmmq/mmmq/modules/contract"
)

// Record kinds. Wire format, do not change.
const (
	kindScheduled byte = 1
	kindDelivered byte = 2
	kindCancelled byte = 3
	// kindMoving is the intent written (and fsynced) before a mover step
	// appends its messages: the topic's high watermark before the append.
	kindMoving byte = 4
	// kindDropped cancels every scheduled record of one topic that comes
	// before it in the same file (DELETE /topics/{t}).
	kindDropped byte = 5
)

// HeaderScheduleID is the header the broker sets on a message it moves from
// the scheduled store into its topic: the message's schedule id
// (contract.HeaderScheduleID, where its rules are).
const HeaderScheduleID = contract.HeaderScheduleID

// dropExt ends the name of a topic-deletion marker: <topic>.drop.
const dropExt = ".drop"

// headerLen is the length and CRC in front of every record.
const headerLen = 8

// maxRecord bounds a record's length field (kind and body): a stored
// message of up to 64 MiB plus its fixed fields. A longer length is a torn
// or corrupt record.
const maxRecord = 64<<20 + 1 + 8 + 1 + 255 + 1 + 255

// fileExt ends every bucket file name.
const fileExt = ".sched"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// entry is a scheduled record as a scan finds it, without its message.
type entry struct {
	id    string
	topic string
	at    int64 // due time, Unix ms
	off   int64 // the record's first byte in its file
	n     int   // the record's length, header included
	hwm   int64 // a moving record's high watermark (the lowest); -1: none
}

// before orders entries by due time, then place in the file.
func (e entry) before(o entry) bool { return e.at < o.at || e.at == o.at && e.off < o.off }

// appendMoving appends a moving record for id (the topic's high watermark
// hwm before the append) to dst.
func appendMoving(dst []byte, hwm int64, id string) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(1+8+1+len(id)))
	dst = append(dst, 0, 0, 0, 0, kindMoving)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(hwm))
	dst = append(dst, byte(len(id)))
	dst = append(dst, id...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+headerLen:], castagnoli))
	return dst
}

// appendDropped appends a dropped record for topic to dst.
func appendDropped(dst []byte, topic string) []byte {
	return appendDone(dst, kindDropped, topic)
}

// appendScheduled appends a scheduled record to dst.
func appendScheduled(dst []byte, at int64, id, topic string, stored []byte) []byte {
	n := 1 + 8 + 1 + len(id) + 1 + len(topic) + len(stored)
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = append(dst, 0, 0, 0, 0, kindScheduled)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(at))
	dst = append(dst, byte(len(id)))
	dst = append(dst, id...)
	dst = append(dst, byte(len(topic)))
	dst = append(dst, topic...)
	dst = append(dst, stored...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+headerLen:], castagnoli))
	return dst
}

// appendDone appends a delivered or cancelled record for id (or, with
// kindDropped, a dropped record for a topic) to dst.
func appendDone(dst []byte, kind byte, id string) []byte {
	start := len(dst)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(2+len(id)))
	dst = append(dst, 0, 0, 0, 0, kind, byte(len(id)))
	dst = append(dst, id...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+headerLen:], castagnoli))
	return dst
}

var errBadRecord = errors.New("schedule: bad record")

// decodeBody decodes a record's kind and body (CRC already checked). For a
// scheduled record it returns the entry (off and n unset) and where the
// stored message starts in body.
func decodeBody(b []byte) (kind byte, e entry, msgAt int, err error) {
	kind, b = b[0], b[1:]
	switch kind {
	case kindScheduled:
		if len(b) < 8+1 {
			return 0, e, 0, errBadRecord
		}
		e.at = int64(binary.LittleEndian.Uint64(b))
		i := 8
		l := int(b[i])
		i++
		if len(b) < i+l+1 {
			return 0, e, 0, errBadRecord
		}
		e.id = string(b[i : i+l])
		i += l
		l = int(b[i])
		i++
		if len(b) < i+l {
			return 0, e, 0, errBadRecord
		}
		e.topic = string(b[i : i+l])
		return kind, e, 1 + i + l, nil
	case kindMoving:
		if len(b) < 8+1 || len(b) != 8+1+int(b[8]) {
			return 0, e, 0, errBadRecord
		}
		e.hwm = int64(binary.LittleEndian.Uint64(b))
		e.id = string(b[9:])
		return kind, e, 0, nil
	case kindDropped:
		if len(b) < 1 || len(b) != 1+int(b[0]) {
			return 0, e, 0, errBadRecord
		}
		e.topic = string(b[1:])
		return kind, e, 0, nil
	case kindDelivered, kindCancelled:
		if len(b) < 1 || len(b) != 1+int(b[0]) {
			return 0, e, 0, errBadRecord
		}
		e.id = string(b[1:])
		return kind, e, 0, nil
	}
	return 0, e, 0, errBadRecord
}

// bucketName is the file name of the bucket starting at start (Unix ms).
func bucketName(start int64) string { return fmt.Sprintf("%020d%s", start, fileExt) }

// parseBucketName is bucketName's inverse; ok false for any other name.
func parseBucketName(name string) (start int64, ok bool) {
	digits, found := strings.CutSuffix(name, fileExt)
	if !found || len(digits) != 20 {
		return 0, false
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	return n, err == nil && n >= 0
}

// scheduleID is the id of an entry of the bucket starting at bucket:
// "<bucket start ms>-<16 hex digits>", so that a cancel finds its file.
func scheduleID(bucket int64, r uint64) string { return fmt.Sprintf("%d-%016x", bucket, r) }

// parseScheduleID returns the bucket of a schedule id; ok false when id
// does not have scheduleID's shape.
func parseScheduleID(id string) (bucket int64, ok bool) {
	b, hex, found := strings.Cut(id, "-")
	if !found || len(hex) != 16 || len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	if _, err := strconv.ParseUint(hex, 16, 64); err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(b, 10, 64)
	return n, err == nil && n >= 0 && strconv.FormatInt(n, 10) == b
}
