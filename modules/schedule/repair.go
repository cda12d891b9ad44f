package schedule

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Crash damage or corruption. A power loss can damage only the bytes
// written to a file since its last completed fsync; the writer bounds them:
// one batch of the group commit writes at most maxGroupBytes to a file
// before its fsync (a larger record alone; cancels and dropped records,
// a few dozen bytes each, may go over by a little). So the bytes a crash
// can damage start at E, the end of the valid records, and end within
// damageWindow of it (or within the first invalid record, when its length
// field says it is longer). A record that passes its CRC at or beyond that
// lies in fsynced data: the damage is corruption, refused, the file left
// untouched. Anything closer is a torn tail, cut. The residual risk is the
// storage engine's: damage to synced bytes within the window of the end
// is cut like a torn tail.

// maxGroupBytes bounds what one batch writes to one file before its fsync.
// Wire rule, do not change: recovery judges a crash by it.
const maxGroupBytes = 1 << 20

// damageWindow is how far after E a crash can have left damage.
const damageWindow = 2 * maxGroupBytes

// ErrCorrupt is the sentinel of CorruptionError.
var ErrCorrupt = errors.New("schedule: corrupt bucket file")

// CorruptionError is a bucket file whose synced records are damaged: a
// valid record follows the damage beyond what a crash can have torn. Open
// returns it and changes nothing on disk.
type CorruptionError struct {
	File    string `json:"file"`    // the bucket file
	Pos     int64  `json:"pos"`     // E: where the valid records end (the damaged record)
	ValidAt int64  `json:"validAt"` // a valid record after the damage
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("schedule: corrupt bucket file %s: damaged record at byte %d with a valid record at byte %d after it (fsynced data damaged, not a torn tail); the file is left as it is: move it out of the directory to start without its pending messages",
		e.File, e.Pos, e.ValidAt)
}

// Unwrap is ErrCorrupt.
func (e *CorruptionError) Unwrap() error { return ErrCorrupt }

// validAfterDamage looks for a record passing its CRC at or beyond the
// reach of a crash from end (the end of the valid records of f, of size
// bytes): its position, or -1.
func validAfterDamage(f vfs.File, end, size int64) (int64, error) {
	r := chunkReader{f: f, size: size}
	reach, err := crashReach(&r, end, size)
	if err != nil {
		return -1, err
	}
	for p := reach; p+headerLen < size; p++ {
		_, _, _, ok, err := recordAt(&r, p, size)
		if err != nil {
			return -1, err
		}
		if ok {
			return p, nil
		}
	}
	return -1, nil
}

// crashReach is where the bytes a crash can have damaged end, for a file
// of size bytes whose valid records end at end: damageWindow after it, or
// the end of the first invalid record when its length field says it is
// longer.
func crashReach(r *chunkReader, end, size int64) (int64, error) {
	reach := end + damageWindow
	if end+headerLen <= size {
		hdr, err := r.at(end, headerLen)
		if err != nil {
			return 0, err
		}
		if n := int64(binary.LittleEndian.Uint32(hdr[:4])); n <= maxRecord {
			reach = max(reach, end+headerLen+n)
		}
	}
	return reach, nil
}

// Tail is what cutting a bucket file at E, the end of its valid records,
// removes: a torn tail, which startup cuts. The first record at E is
// damaged; the bytes after it are read again the way validAfterDamage
// reads them (a record starting at any byte), so that records passing
// their CRC after the damage are counted: startup drops them with the
// cut. A crash tears only what was written since the last fsync, never
// acknowledged, so after crash damage these were not acknowledged either;
// after damage that is not a crash's (a flipped bit, a bad sector within
// the window of the end) they are acknowledged messages lost.
type Tail struct {
	At    int64 `json:"at"`    // E: where the cut starts
	Bytes int64 `json:"bytes"` // bytes cut: the file's size - E
	// Records counts what the cut removes: Valid plus Damaged.
	Records int `json:"records"`
	// Valid counts the records in the cut bytes that pass their CRC.
	Valid int `json:"validRecords"`
	// Pending counts the scheduled records among them that no later
	// delivered, cancelled or dropped record in the cut bytes ends:
	// scheduled messages still pending that the cut drops.
	Pending int `json:"pendingMessages"`
	// Damaged counts the stretches of bytes holding no valid record (one
	// at E at least; each counts as one record).
	Damaged int `json:"damagedStretches"`
}

// inspectTail reads what a cut of f (size bytes) at end would remove,
// without changing anything. Only bytes within a crash's reach of end
// can hold valid records when the file is a torn tail (validAfterDamage
// found none beyond it): the bytes from there on are one damaged stretch
// at most. Memory: the read buffer and the ids of the scheduled records
// found within the reach.
func inspectTail(f vfs.File, end, size int64) (Tail, error) {
	t := Tail{At: end, Bytes: size - end}
	if end >= size {
		return t, nil
	}
	r := chunkReader{f: f, size: size}
	reach, err := crashReach(&r, end, size)
	if err != nil {
		return t, err
	}
	pending := map[string]string{} // schedule id → topic
	damaged := false               // inside a damaged stretch
	for p := end; p < size; {
		if p >= reach {
			if !damaged {
				t.Damaged++
			}
			break
		}
		n, kind, e, ok, err := recordAt(&r, p, size)
		if err != nil {
			return t, err
		}
		if !ok {
			if !damaged {
				t.Damaged++
				damaged = true
			}
			p++
			continue
		}
		damaged = false
		t.Valid++
		switch kind {
		case kindScheduled:
			pending[e.id] = e.topic
		case kindDelivered, kindCancelled:
			delete(pending, e.id)
		case kindDropped:
			maps.DeleteFunc(pending, func(_, topic string) bool { return topic == e.topic })
		}
		p += n
	}
	t.Pending = len(pending)
	t.Records = t.Valid + t.Damaged
	return t, nil
}

// logCut logs the cut of a torn tail startup is about to make in f (the
// bucket file name, size bytes) at end: where, how many bytes and
// records, how many of them pass their CRC and how many pending
// scheduled messages they hold. At ERROR when records that pass their
// CRC are cut (acknowledged messages dropped, unless a crash tore them),
// at WARN otherwise.
func (s *Scheduler) logCut(f vfs.File, name string, end, size int64) {
	fields := []zap.Field{zap.String("file", name), zap.Int64("at", end), zap.Int64("bytes", size-end)}
	t, err := inspectTail(f, end, size)
	switch {
	case err != nil:
		s.log.Error("scheduled messages: cut a torn tail; could not count the records in it, some may have been acknowledged",
			append(fields, zap.Error(err))...)
		return
	case t.Valid > 0:
		s.log.Error("scheduled messages: cut a torn tail holding records that pass their CRC after damage within the last group commit's reach: "+
			"they are dropped (acknowledged ones unless a crash tore the damage)",
			append(fields, zap.Int("records", t.Records), zap.Int("valid-records", t.Valid), zap.Int("pending-messages", t.Pending))...)
		return
	}
	s.log.Warn("scheduled messages: cut a torn tail",
		append(fields, zap.Int("records", t.Records), zap.Int("valid-records", t.Valid), zap.Int("pending-messages", t.Pending))...)
}
