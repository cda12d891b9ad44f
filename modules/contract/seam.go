package contract

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"
)

// The storage seam's vocabulary: the errors, limits and value types that
// every backend (the local segmented log, JetStream) returns and takes, and
// that everything above the seam — the dispatchers, consumer groups, HTTP
// API, line protocol, status page, dedup and retention — tests and uses.
// A backend returns these values (or wraps them) so that both backends are
// treated alike; the texts keep their "storage:" prefix because clients and
// tests match them. Callers test the sentinels with errors.Is.
var (
	// ErrClosed is returned by every operation on a closed log (Log.Close).
	ErrClosed = errors.New("storage: log closed")
	// ErrOutOfRange is returned when reading a negative offset or one at
	// or beyond the high watermark.
	ErrOutOfRange = errors.New("storage: offset out of range")
	// ErrRecordTooLarge is returned by Append when a payload exceeds the
	// backend's maximum record size (mmmq.broker.storage.max-record-bytes;
	// for JetStream also the servers' max_payload). Nothing is written.
	// 413 TOO_LARGE.
	ErrRecordTooLarge = NewError(CodeTooLarge, "storage: record too large")
	// ErrEmptyRecord is returned by Append for a payload shorter than
	// MinPayloadBytes. Nothing is written. 400 BAD_REQUEST.
	ErrEmptyRecord = NewError(CodeBadRequest, "storage: record too small")
	// ErrQueueFull is returned by Append when more appends wait for the
	// backend's writer than it queues (the local engine's
	// mmmq.broker.storage.max-pending). 503 UNAVAILABLE.
	ErrQueueFull = errors.New("storage: append queue full")
	// ErrCorrupt marks an entry or file whose bytes fail validation (bad
	// length, CRC mismatch, index inconsistent with its segment). It is
	// always wrapped in a *CorruptionError that says where.
	ErrCorrupt = errors.New("storage: corrupt entry")
)

// MinPayloadBytes is the smallest message JSON a backend accepts: the
// shortest JSON document that is an object or a string is 2 bytes ("{}",
// "\"\""). For the local format it also makes eight zero bytes (length 0,
// CRC32C("") = 0) undecodable.
const MinPayloadBytes = 2

// CorruptionError says where corrupt data was found. It wraps ErrCorrupt (or
// a more specific cause) so errors.Is(err, ErrCorrupt) holds. A read that
// returns one concerns that single offset: the dispatchers log it, skip the
// offset and go on (the original Java mmmq's rule).
type CorruptionError struct {
	Topic  string `json:"topic"`  // topic name (the directory name)
	File   string `json:"file"`   // file (or directory) path
	Pos    int64  `json:"pos"`    // byte position in File, -1 when none applies
	Offset int64  `json:"offset"` // the message offset concerned, -1 when none applies
	Reason string `json:"reason"` // short reason, e.g. "crc mismatch"
	Err    error  `json:"-"`      // underlying error; nil means ErrCorrupt (not in JSON: an error value has no fields to show)
}

// Error names the topic, the reason and where: the file, then the byte
// position and the offset when they apply (not -1).
func (e *CorruptionError) Error() string {
	return fmt.Sprintf("storage: corruption in topic %q: %s at %s", e.Topic, e.Reason, e.Where())
}

// Where is the place of the corruption: the file, " byte N" when a byte
// position applies and " (offset N)" when a message offset does.
func (e *CorruptionError) Where() string {
	s := e.File
	if e.Pos >= 0 {
		s += fmt.Sprintf(" byte %d", e.Pos)
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" (offset %d)", e.Offset)
	}
	return s
}

// Unwrap returns the cause; ErrCorrupt when none was recorded.
func (e *CorruptionError) Unwrap() error {
	if e.Err != nil {
		return e.Err
	}
	return ErrCorrupt
}

// Is makes errors.Is(err, ErrCorrupt) true for every CorruptionError.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

var checkpointNameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$`)

// ValidCheckpointName reports whether name may be used as a checkpoint (and
// so dispatcher or consumer group) name: 1–200 bytes of [A-Za-z0-9_.-], not
// starting with '.', so it is always a plain file name for the local
// backend and a valid key for JetStream's. Error: one naming name and the
// rule.
func ValidCheckpointName(name string) error {
	if !checkpointNameRE.MatchString(name) {
		return fmt.Errorf("invalid checkpoint name %q: want 1-200 characters of [A-Za-z0-9_.-], not starting with '.'", name)
	}
	return nil
}

// KeepAll is the keepFrom of a retention pass (Retainer.ApplyRetention)
// that holds nothing back for readers: only the policy decides.
const KeepAll = int64(math.MaxInt64)

// RetentionPolicy says which head segments (local backend) or oldest
// messages (JetStream: the stream's MaxAge and MaxBytes) retention deletes.
// The zero value deletes nothing.
type RetentionPolicy struct {
	// MaxAge: a sealed segment goes once the newest entry in it (its
	// stored "timestamp", Unix ms) is older than MaxAge. 0 keeps
	// everything by age (mmmq.broker.retention.max-age).
	MaxAge time.Duration
	// MaxBytes: while the topic's .mmm and .idx files together hold more
	// than MaxBytes, its oldest sealed segment goes. 0 is unlimited
	// (mmmq.broker.retention.max-bytes).
	MaxBytes int64
}

// Enabled reports whether the policy can delete anything.
func (p RetentionPolicy) Enabled() bool { return p.MaxAge > 0 || p.MaxBytes > 0 }

// RetentionResult is what one retention pass (Retainer.ApplyRetention) did.
type RetentionResult struct {
	Segments    int   // segments deleted
	Entries     int64 // offsets deleted (StartOffset moved by this much)
	Bytes       int64 // .mmm and .idx bytes deleted
	StartOffset int64 // the log start offset afterwards
	// HeldBytes are the .mmm and .idx bytes of the sealed segments the
	// policy found due but keepFrom kept (a reader has not read past
	// them); 0 when the readers held nothing back.
	HeldBytes int64
}

// RetentionHold is the reader that held a topic's retention back at the
// last pass (mmmq.broker.retention.keep-unconsumed): the policy found
// HeldBytes of sealed segments due, and this reader, the one furthest
// behind, had not read them. GET /topics shows it as "retentionHeldBy".
type RetentionHold struct {
	Kind      string `json:"kind"`      // "dispatcher" or "group"
	Name      string `json:"name"`      // the dispatcher's or the group's name
	Committed int64  `json:"committed"` // its committed offset: retention deletes nothing from it on
	HeldBytes int64  `json:"heldBytes"` // .mmm + .idx bytes the policy would have deleted
}

// RetentionHolds says which reader holds a topic's retention back
// (modules/retention's Retainer); false when none does.
type RetentionHolds interface {
	RetentionHold(topic string) (RetentionHold, bool)
}

// NewIncarnation returns a fresh random topic incarnation id: 32 lower-case
// hex digits (128 bits from crypto/rand).
func NewIncarnation() string { return randomID() }

// randomID is 128 bits from crypto/rand as 32 lower-case hex digits: a
// topic's incarnation id, a broker's instance id.
func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on supported platforms (Go 1.24+ panics instead)
	return hex.EncodeToString(b[:])
}
