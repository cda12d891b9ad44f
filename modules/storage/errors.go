package storage

import (
	"errors"
	"fmt"
	"io"
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
	// log accepts no more writes until it is reopened (Log.Reopen;
	// PostgreSQL "fsyncgate": never retry an fsync and then acknowledge).
	// Errors wrap it together with the original I/O error and name its
	// cause (ENOSPC, EIO, …): HTTP 503 TOPIC_FAILED, whatever the cause —
	// a topic failed by a full disk needs an operator as much as one
	// failed by EIO, because the bytes of the failed batch are in doubt.
	ErrFailed = contract.NewError(contract.CodeTopicFailed, "storage: log failed")
	// ErrNoSpace is an append refused for lack of space before anything of
	// it was written (HTTP 507 NO_SPACE, with Retry-After): the disk guard
	// (*LowSpaceError) refused it. A write that meets a full disk fails the
	// log instead (ErrFailed, cause ENOSPC).
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

// failedError is what every waiter gets once the log has failed: it names
// the topic, the cause's errno and the remedy.
type failedError struct {
	topic string
	cause error
}

func (e *failedError) Error() string {
	return fmt.Sprintf("storage: topic %s failed (%s): %v; it refuses writes until it is reopened (POST /topics/%s/reopen)",
		e.topic, Cause(e.cause), e.cause, e.topic)
}

func (e *failedError) Unwrap() []error { return []error{ErrFailed, e.cause} }

func newFailed(topic string, cause error) error { return &failedError{topic: topic, cause: cause} }

// errnoNames are the names Cause gives the errors a write path meets.
var errnoNames = map[syscall.Errno]string{
	syscall.ENOSPC: "ENOSPC", syscall.EDQUOT: "EDQUOT", syscall.EIO: "EIO",
	syscall.EROFS: "EROFS", syscall.EFBIG: "EFBIG", syscall.EBADF: "EBADF",
	syscall.EINVAL: "EINVAL", syscall.ENOMEM: "ENOMEM", syscall.EACCES: "EACCES",
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.ENXIO: "ENXIO",
	syscall.ENODEV: "ENODEV", syscall.ESTALE: "ESTALE", syscall.EMFILE: "EMFILE",
	syscall.ENFILE: "ENFILE", syscall.EINTR: "EINTR", syscall.EAGAIN: "EAGAIN",
}

// Cause names what failed a log, for its error text and GET /topics: the
// errno's symbol (ENOSPC, EIO, …; "errno N" for one without a name here)
// when err wraps a syscall.Errno, "short write" for a write that returned
// less than it was given, else "I/O error".
func Cause(err error) string {
	var errno syscall.Errno
	switch {
	case errors.As(err, &errno):
		if n, ok := errnoNames[errno]; ok {
			return n
		}
		return fmt.Sprintf("errno %d", int(errno))
	case errors.Is(err, io.ErrShortWrite):
		return "short write"
	}
	return "I/O error"
}

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
