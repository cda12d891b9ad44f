package contract

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"syscall"
)

// Error codes: the stable, machine-readable word of every error answer, the
// same on every transport — the "code" member of an HTTP error body and the
// <CODE> of a line-protocol "ERR <CODE> <text>". GROUP_BUSY, NOT_DELIVERED
// and TOO_LARGE are the log-queue study's words; the rest are mmmq's.
const (
	CodeBadRequest     = "BAD_REQUEST"        // 400: invalid input; nothing was stored
	CodeTooLarge       = "TOO_LARGE"          // 413: body, record or line over its limit
	CodeTimeout        = "TIMEOUT"            // 408 reading a request body, 503 waiting for storage
	CodeNotFound       = "NOT_FOUND"          // 404: unknown topic or route
	CodeMethod         = "METHOD_NOT_ALLOWED" // 405, with an Allow header
	CodeGroupBusy      = "GROUP_BUSY"         // 409: another consumer holds the group
	CodeNotDelivered   = "NOT_DELIVERED"      // 409: ack beyond what the session was given
	CodeSessionExpired = "SESSION_EXPIRED"    // 409: the session no longer holds the group
	CodeGroupMode      = "GROUP_MODE"         // 409: a fetch or ack for the other consumer-group mode (exclusive vs shared), naming both
	CodeNameTaken      = "NAME_TAKEN"         // 409: a group named like a dispatcher, or a dispatcher name in use
	CodeReadOnly       = "READ_ONLY"          // 409: a dispatcher declared in Go code or the configuration file; the admin API changes only its own
	CodeNoDeadLetters  = "NO_DEAD_LETTERS"    // 409: redrive of a dispatcher whose dead letters are off
	CodeUnauthorized   = "UNAUTHORIZED"       // 401, with WWW-Authenticate: Bearer: no or unknown credentials
	CodeForbidden      = "FORBIDDEN"          // 403: the principal may not do this action on this topic or group
	CodeRateLimited    = "RATE_LIMITED"       // 429, with Retry-After: a per-principal limit was reached
	CodeTopicBusy      = "TOPIC_BUSY"         // 409, with Retry-After: the topic is being created, reopened or deleted; retry shortly
	CodeTopicNotFailed = "TOPIC_NOT_FAILED"   // 409: reopen of a topic that has not failed
	CodeConflict       = "CONFLICT"           // 409: an admin change raced one made through another broker node; read again and retry
	CodeNoSpace        = "NO_SPACE"           // 507, with Retry-After: free space under min-free-bytes (or the disk full); nothing was stored
	CodeTopicFailed    = "TOPIC_FAILED"       // 503: a write or fsync of the topic failed (cause named); it needs POST /topics/{t}/reopen
	CodeOffsetExpired  = "OFFSET_EXPIRED"     // 410: the offset is below the log start offset (deleted by retention)
	CodeTooManyTopics  = "TOO_MANY_TOPICS"    // 503: mmmq.broker.storage.max-topics reached
	CodeTooManyGroups  = "TOO_MANY_GROUPS"    // 503: the consumer-group cap reached
	CodeOverloaded     = "OVERLOADED"         // 503, with Retry-After: the in-flight memory budget is used up; nothing was done
	CodeUnavailable    = "UNAVAILABLE"        // 503: storage failed, shutting down, queue full
	CodeLoop           = "LOOP"               // 508: a publish pushed by one of this broker's own dispatchers (mmmq-instance-id); nothing was stored
	// Scheduled messages (modules/schedule):
	CodeNotImplemented   = "NOT_IMPLEMENTED"    // 501: a scheduled publish where the broker cannot schedule (no scheduler, a backend other than local); nothing was stored
	CodeTooManyScheduled = "TOO_MANY_SCHEDULED" // 507: mmmq.broker.schedule.max-pending-per-topic reached; nothing was stored
	CodeScheduledPending = "SCHEDULED_PENDING"  // 409: DELETE /topics/{t} while scheduled messages of t are pending
)

// NoSpaceRetryAfter is the Retry-After value (seconds) of a NO_SPACE HTTP
// answer: the disk guard notices freed space within a second, and space is
// freed by retention or an operator, so retrying sooner than a few seconds
// only repeats the refusal.
const NoSpaceRetryAfter = "5"

// TopicBusyRetryAfter is the Retry-After value (seconds) of a TOPIC_BUSY
// HTTP answer: creating, reopening or deleting a topic takes a few fsyncs.
const TopicBusyRetryAfter = "1"

// Class is what an error becomes on the wire: an HTTP status and a code.
type Class struct {
	Status int    // HTTP status, 400..599
	Code   string // one of the Code constants
}

// classes is the one error → (HTTP status, code) table of the broker, used
// by the HTTP API, the consumer-group routes and the line protocol alike. An
// error is matched against the codes it carries (see [NewError] and
// [InputError]) and a few errors of the standard library; when it carries
// several codes (a failed log wraps both "log failed" and "no space"), the
// row listed first wins: a topic failed by a full disk is TOPIC_FAILED (it
// needs an operator), not NO_SPACE (retry later). What matches no row is
// 503 UNAVAILABLE.
var classes = []Class{
	{http.StatusUnauthorized, CodeUnauthorized},
	{http.StatusForbidden, CodeForbidden},
	{http.StatusTooManyRequests, CodeRateLimited},
	{http.StatusRequestEntityTooLarge, CodeTooLarge},
	{http.StatusBadRequest, CodeBadRequest},
	{http.StatusNotFound, CodeNotFound},
	{http.StatusGone, CodeOffsetExpired},
	{http.StatusConflict, CodeGroupBusy},
	{http.StatusConflict, CodeNotDelivered},
	{http.StatusConflict, CodeSessionExpired},
	{http.StatusConflict, CodeNameTaken},
	{http.StatusConflict, CodeGroupMode},
	{http.StatusConflict, CodeReadOnly},
	{http.StatusConflict, CodeNoDeadLetters},
	{http.StatusConflict, CodeTopicBusy},
	{http.StatusConflict, CodeTopicNotFailed},
	{http.StatusConflict, CodeConflict},
	{http.StatusLoopDetected, CodeLoop},
	{http.StatusServiceUnavailable, CodeTopicFailed},
	{http.StatusInsufficientStorage, CodeNoSpace},
	{http.StatusServiceUnavailable, CodeOverloaded},
	{http.StatusServiceUnavailable, CodeTooManyTopics},
	{http.StatusServiceUnavailable, CodeTooManyGroups},
	{http.StatusServiceUnavailable, CodeTimeout},
	{http.StatusServiceUnavailable, CodeUnavailable},
}

// Classify maps err to its HTTP status and code with the table above:
//
//   - an *InputError answers its own status (400, 408 or 413) and code;
//   - an *http.MaxBytesError (a body over server.max-body-bytes) is 413 TOO_LARGE;
//   - otherwise the codes carried by the errors in err's tree (errors made by
//     [NewError]) decide, the first row of the table winning;
//   - a bare ENOSPC or EDQUOT (a full disk while creating a topic's files) is
//     507 NO_SPACE, and context.DeadlineExceeded (storage did not answer in
//     time) is 503 TIMEOUT;
//   - anything else is 503 UNAVAILABLE: an I/O error outside a topic's
//     write path (a read), a closed log, a full append queue.
//
// A nil err is not an error; Classify(nil) is 503 UNAVAILABLE all the same,
// so callers check err first.
func Classify(err error) Class {
	var ie *InputError
	if errors.As(err, &ie) {
		return Class{ie.Status, ie.Code}
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return Class{http.StatusRequestEntityTooLarge, CodeTooLarge}
	}
	best := len(classes)
	walk(err, func(e error) {
		c, ok := e.(*Error)
		if !ok {
			return
		}
		for i := 0; i < best; i++ {
			if classes[i].Code == c.Code {
				best = i
				return
			}
		}
	})
	switch {
	case best < len(classes):
		return classes[best]
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return Class{http.StatusInsufficientStorage, CodeNoSpace}
	case errors.Is(err, context.DeadlineExceeded):
		return Class{http.StatusServiceUnavailable, CodeTimeout}
	}
	return Class{http.StatusServiceUnavailable, CodeUnavailable}
}

// walk calls fn for err and every error it wraps, depth first.
func walk(err error, fn func(error)) {
	for err != nil {
		fn(err)
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, fn)
			}
			return
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return
		}
	}
}

// Error is a sentinel error that carries its code. Packages declare their
// sentinels with [NewError] so that [Classify] knows them without importing
// them (this package imports no other mmmq package):
//
//	ErrNoSpace = contract.NewError(contract.CodeNoSpace, "storage: no space left on device")
//
// Compare with errors.Is as with any sentinel.
type Error struct {
	Code string // one of the Code constants
	Text string // the error text, returned by Error
}

// NewError returns a new sentinel error with code and text.
func NewError(code, text string) error { return &Error{Code: code, Text: text} }

func (e *Error) Error() string { return e.Text }

// ErrOffsetExpired is a read below a topic's log start offset: retention
// deleted the segment that held it (Kafka's OffsetOutOfRange for the low
// end). It is 410 OFFSET_EXPIRED; backends return it wrapped in an
// *OffsetExpiredError that says where the log starts now.
var ErrOffsetExpired = NewError(CodeOffsetExpired, "offset expired: deleted by retention")

// OffsetExpiredError is a read of Offset below StartOffset, the first
// offset the topic still stores. It wraps ErrOffsetExpired; HTTP answers
// carry StartOffset as "startOffset" in the error body, so a client can
// continue from there.
type OffsetExpiredError struct {
	Topic       string // topic name
	Offset      int64  // the offset asked for
	StartOffset int64  // the log start offset when the read was refused
}

func (e *OffsetExpiredError) Error() string {
	return fmt.Sprintf("offset %d of topic %q expired: retention deleted it; the log starts at offset %d", e.Offset, e.Topic, e.StartOffset)
}

// Unwrap returns ErrOffsetExpired.
func (e *OffsetExpiredError) Unwrap() error { return ErrOffsetExpired }

// InputError is a client error found while reading a request: the message
// is for the client, and nothing was stored. Status is 400 BAD_REQUEST, 408
// TIMEOUT (the body did not arrive in time) or 413 TOO_LARGE.
type InputError struct {
	Status int    // HTTP status
	Code   string // the code matching Status
	Msg    string // what was wrong, for the client
}

func (e *InputError) Error() string { return e.Msg }

// BadRequest returns an *InputError with status 400 BAD_REQUEST and a
// message formatted as fmt.Sprintf does.
func BadRequest(format string, args ...any) error {
	return &InputError{Status: http.StatusBadRequest, Code: CodeBadRequest, Msg: fmt.Sprintf(format, args...)}
}

// TooLarge returns an *InputError with status 413 TOO_LARGE.
func TooLarge(format string, args ...any) error {
	return &InputError{Status: http.StatusRequestEntityTooLarge, Code: CodeTooLarge, Msg: fmt.Sprintf(format, args...)}
}

// RequestTimeout returns an *InputError with status 408 TIMEOUT: the client
// did not send its body in time.
func RequestTimeout(format string, args ...any) error {
	return &InputError{Status: http.StatusRequestTimeout, Code: CodeTimeout, Msg: fmt.Sprintf(format, args...)}
}
