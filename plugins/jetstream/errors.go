package jetstream

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mmmq/mmmq/modules/contract"
)

// Errors of this backend, beyond the seam's own: for a closed log, a read
// out of range, a record too large (over the maximum record size or the NATS
// servers' max_payload) or too small, this backend returns (a wrap of)
// contract.ErrClosed, contract.ErrOutOfRange, contract.ErrRecordTooLarge and contract.ErrEmptyRecord,
// like the local log, so that everything above the storage seam — the
// dispatchers test contract.ErrClosed, the HTTP API classifies with
// contract.Classify — treats both backends alike.
var (
	// ErrBatchTooLarge: an AppendBatch of more messages than one JetStream
	// atomic batch may hold (MaxBatch, or the servers' lower
	// jetstream.limits.max_batch_size); nothing was stored. 413 TOO_LARGE.
	ErrBatchTooLarge = contract.NewError(contract.CodeTooLarge, "jetstream: batch too large")
	// ErrUnavailable: the JetStream cluster did not store or answer (no
	// responders while a stream leader is elected, a timeout, a lost
	// connection, an API error); the append may or may not have been
	// stored. 503 UNAVAILABLE.
	ErrUnavailable = contract.NewError(contract.CodeUnavailable, "jetstream: unavailable")
	// ErrTimeout: the cluster did not answer within
	// mmmq.jetstream.request-timeout (or the caller's deadline); the
	// append may or may not have been stored. 503 TIMEOUT.
	ErrTimeout = contract.NewError(contract.CodeTimeout, "jetstream: no answer in time")
	// ErrNoSpace: the cluster refused the append for lack of storage
	// (server or account limits); nothing was stored. 507 NO_SPACE.
	ErrNoSpace = contract.NewError(contract.CodeNoSpace, "jetstream: no storage left in the cluster")
	// ErrBusy: the stream has as many atomic batches in flight as the
	// servers allow (50 per stream by default); nothing of this batch was
	// stored. 503 OVERLOADED, with Retry-After.
	ErrBusy = contract.NewError(contract.CodeOverloaded, "jetstream: too many batches in flight")
	// ErrNoTopic: Open without create found no stream for the topic.
	// 404 NOT_FOUND.
	ErrNoTopic = contract.NewError(contract.CodeNotFound, "jetstream: no such topic")
	// ErrQueueFull: too many ACCEPTED appends of one log await their
	// acknowledgement (maxPendingAsync). 503 UNAVAILABLE.
	ErrQueueFull = fmt.Errorf("jetstream: %w", contract.ErrQueueFull)

	// errFeedBehind: a topic's message feed (its ordered consumer) had
	// not reached the stream's last sequence of a listing one listing
	// interval ago; the cause a listing gives resync (Log.listed), never
	// returned.
	errFeedBehind = errors.New("jetstream: the topic's message feed is behind the stream listing")
)

// JetStream API error codes this package tells apart (the server's
// ErrorIdentifier numbers, stable across releases).
const (
	codeMessageTooLarge      = 10054 // JSStreamMessageExceedsMaximumErr
	codeBatchTooLarge        = 10199 // JSAtomicPublishTooLargeBatchErrF
	codeInsufficientResource = 10023 // JSInsufficientResourcesErr
	codeAccountResources     = 10002 // JSAccountResourcesExceededErr
	codeStorageResources     = 10047 // JSStorageResourcesExceededErr
	codeBatchesInflight      = 10210 // JSAtomicPublishTooManyInflight
	codeReplicasUnsupported  = 10074 // JSStreamReplicasNotSupportedErr
	codeNoPeers              = 10005 // JSClusterNoPeersErrF ("no suitable peers for placement")
	// codeDuplicateInProcess (JSStreamDuplicateMessageConflict, 409,
	// "duplicate message id is in process"): a message with the same
	// Nats-Msg-Id is being replicated and has no sequence yet, typically
	// the same producer id published through another broker at the same
	// moment. Its outcome is not known yet: Log waits and sends again
	// (retryDuplicate) rather than answering with this error.
	codeDuplicateInProcess = 10158
)

// errDuplicateInProcess is what codeDuplicateInProcess becomes once
// waiting for the other copy ran out (Log.retryDuplicate): its outcome is
// unknown, as after a timeout. In words of ours, not NATS's.
var errDuplicateInProcess = fmt.Errorf("%w: a message with the same id published through another broker at the same moment is still being stored; its outcome did not come in time", ErrTimeout)

// inProcess reports whether err is a refusal for codeDuplicateInProcess,
// as the client reports it or as classify made it.
func inProcess(err error) bool {
	return apiErrorCode(err) == codeDuplicateInProcess || errors.Is(err, errDuplicateInProcess)
}

// duplicateWait is the first wait before a message refused with
// codeDuplicateInProcess is sent again; it doubles up to
// duplicateWaitMax, until the append's request timeout.
const (
	duplicateWait    = 5 * time.Millisecond
	duplicateWaitMax = 200 * time.Millisecond
)

// apiErrorCode is the JetStream API error code err carries (an answer's
// "error" member or the client's JetStreamError), 0 for none.
func apiErrorCode(err error) int {
	var ae *apiError
	var je jetstream.JetStreamError
	switch {
	case errors.As(err, &ae):
		return ae.ErrCode
	case errors.As(err, &je) && je.APIError() != nil:
		return int(je.APIError().ErrorCode)
	}
	return 0
}

// replicasHint explains a stream or bucket creation refused for its
// replica count: empty for other errors.
func replicasHint(err error, replicas int) string {
	switch apiErrorCode(err) {
	case codeReplicasUnsupported, codeInsufficientResource, codeNoPeers:
		return fmt.Sprintf(" (mmmq.jetstream.replicas is %d: the cluster needs at least that many JetStream servers up, with room; 1 for a single server)", replicas)
	}
	return ""
}

// apiError is the "error" member of a JetStream API answer.
type apiError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (code %d, error %d)", e.Description, e.Code, e.ErrCode)
}

// classify wraps an error of the NATS client or the JetStream API with the
// sentinel that says what it means to a caller (see the var block above).
func classify(err error) error {
	code := apiErrorCode(err)
	switch {
	case code == codeMessageTooLarge, errors.Is(err, nats.ErrMaxPayload):
		return fmt.Errorf("%w: %w", contract.ErrRecordTooLarge, err)
	case code == codeBatchTooLarge:
		return fmt.Errorf("%w: %w", ErrBatchTooLarge, err)
	case code == codeBatchesInflight:
		return fmt.Errorf("%w: %w", ErrBusy, err)
	case code == codeDuplicateInProcess:
		return errDuplicateInProcess
	case code == codeInsufficientResource, code == codeAccountResources, code == codeStorageResources:
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		return fmt.Errorf("%w: not connected to the NATS servers (reconnecting); nothing was sent", ErrUnavailable)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
