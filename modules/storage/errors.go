package storage

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/mmmq/mmmq/modules/contract"
)

// Sentinel errors of the storage engine. Callers test them with errors.Is.
var (
	// ErrCorrupt marks an entry or file whose bytes fail validation
	// (bad length, CRC mismatch, index inconsistent with its segment).
	// It is always wrapped in a *CorruptionError that says where.
	ErrCorrupt = errors.New("storage: corrupt entry")
	// ErrOutOfRange is returned when reading a negative offset or one at or
	// beyond the high watermark.
	ErrOutOfRange = errors.New("storage: offset out of range")
	// ErrOffsetExpired is returned, wrapped in a *contract.OffsetExpiredError
	// carrying the log start offset, when reading an offset that retention
	// deleted (below StartOffset). It is 410 OFFSET_EXPIRED on the wire.
	ErrOffsetExpired = contract.ErrOffsetExpired
	// ErrClosed is returned by every operation on a closed log.
	ErrClosed = errors.New("storage: log closed")
	// ErrFailed is returned once a write or fsync of the log has failed: the
	// log accepts no more writes until it is reopened (PostgreSQL "fsyncgate":
	// never retry an fsync and then acknowledge). Errors wrap it together with
	// the original I/O error.
	ErrFailed = errors.New("storage: log failed")
	// ErrNoSpace is a write failure caused by a full disk (ENOSPC). It is
	// wrapped together with ErrFailed.
	ErrNoSpace = contract.NewError(contract.CodeNoSpace, "storage: no space left on device")
	// ErrRecordTooLarge is returned by Append when a payload exceeds
	// Options.MaxRecordBytes. Nothing is written.
	ErrRecordTooLarge = contract.NewError(contract.CodeTooLarge, "storage: record too large")
	// ErrEmptyRecord is returned by Append for a payload shorter than
	// MinPayloadBytes. Nothing is written.
	ErrEmptyRecord = contract.NewError(contract.CodeBadRequest, "storage: record too small")
	// ErrQueueFull is returned by Append when the number of entries waiting
	// for the writer exceeds Options.MaxPending.
	ErrQueueFull = errors.New("storage: append queue full")
)

// CorruptionError says where corrupt data was found. It wraps ErrCorrupt (or
// a more specific cause) so errors.Is(err, ErrCorrupt) holds.
type CorruptionError struct {
	Topic  string // topic name (the directory name)
	File   string // file path
	Pos    int64  // byte position in File
	Offset int64  // the message offset concerned, -1 when unknown
	Reason string // short reason, e.g. "crc mismatch"
	Err    error  // underlying error; nil means ErrCorrupt
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("storage: corruption in topic %q: %s at %s byte %d (offset %d)",
		e.Topic, e.Reason, e.File, e.Pos, e.Offset)
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

// failedError is what every waiter gets once the log has failed.
type failedError struct{ cause error }

func (e *failedError) Error() string { return "storage: log failed: " + e.cause.Error() }
func (e *failedError) Unwrap() []error {
	errs := []error{ErrFailed, e.cause}
	if errors.Is(e.cause, syscall.ENOSPC) {
		errs = append(errs, ErrNoSpace)
	}
	return errs
}

func newFailed(cause error) error { return &failedError{cause: cause} }

// fdHint explains an open failure caused by the open-file limit (EMFILE,
// ENFILE): segment files, active or sealed, are held by the segment cache,
// 2 per mmmq.broker.storage.max-open-segments at most (plus those pinned by
// reads in progress); checkpoints, connections and listeners need the rest.
func fdHint(err error) string {
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
		return " (open-file limit reached: segment files take up to 2 per mmmq.broker.storage.max-open-segments and every connection one more; raise the limit — ulimit -n, systemd LimitNOFILE — or lower max-open-segments)"
	}
	return ""
}
