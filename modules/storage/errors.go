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
)

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
