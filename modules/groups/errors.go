package groups

import (
	"fmt"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Sentinel errors of the coordinator. Test them with errors.Is; the returned
// errors wrap them with the topic, group and offsets concerned. Each carries
// its error code, so contract.Classify gives the HTTP status and the line
// protocol's ERR code.
var (
	// ErrGroupBusy: another live session holds the group (the log-queue
	// study: one active connection per group at a time; a second one gets
	// ERR GROUP_BUSY).
	// HTTP 409 GROUP_BUSY, TCP ERR GROUP_BUSY. Retry after the holder
	// releases it or its lease expires.
	ErrGroupBusy = contract.NewError(contract.CodeGroupBusy, "groups: group busy")
	// ErrNotDelivered: an ack names an offset at or beyond what the session
	// was delivered (the log-queue study's out-of-range ack, ERR NOT_DELIVERED). Nothing is
	// committed. HTTP 409 NOT_DELIVERED, TCP ERR NOT_DELIVERED.
	ErrNotDelivered = contract.NewError(contract.CodeNotDelivered, "groups: offset not delivered")
	// ErrSessionExpired: the session does not hold the group (its lease
	// expired, it was released, or it never existed, e.g. after a broker
	// restart). A stale consumer can never commit. Start a new session;
	// delivery restarts at the committed offset. HTTP 409 SESSION_EXPIRED,
	// TCP ERR SESSION_EXPIRED.
	ErrSessionExpired = contract.NewError(contract.CodeSessionExpired, "groups: session expired")
	// ErrNameTaken: the group name is a dispatcher name. Both store their
	// progress in <topic>/checkpoints/<name>.checkpoint, so one name space
	// is shared. HTTP 409 NAME_TAKEN, TCP ERR NAME_TAKEN.
	ErrNameTaken = contract.NewError(contract.CodeNameTaken, "groups: name used by a dispatcher")
	// ErrUnknownTopic: the topic does not exist (or is quarantined). Groups
	// never create topics. HTTP 404 NOT_FOUND, TCP ERR NOT_FOUND.
	ErrUnknownTopic = contract.NewError(contract.CodeNotFound, "groups: unknown topic")
	// ErrInvalidName: the topic name (contract.ValidateTopic: '.'-separated
	// segments of [A-Za-z0-9_-], at most 249 bytes) or the group name
	// (contract.ValidCheckpointName: 1-200 of [A-Za-z0-9_.-], not starting
	// with '.') is invalid. HTTP 400 BAD_REQUEST, TCP ERR BAD_REQUEST.
	ErrInvalidName = contract.NewError(contract.CodeBadRequest, "groups: invalid name")
	// ErrInvalidOffset: a fetch's from= is below the committed offset
	// (those messages are acknowledged and will not be redelivered).
	// HTTP 400 BAD_REQUEST.
	ErrInvalidOffset = contract.NewError(contract.CodeBadRequest, "groups: offset already committed")
	// ErrBeyondHighWatermark: a seek of a group's committed offset names
	// an offset above the topic's high watermark (nothing is stored
	// there yet). HTTP 400 BAD_REQUEST.
	ErrBeyondHighWatermark = contract.NewError(contract.CodeBadRequest, "groups: offset beyond the high watermark")
	// ErrGroupMode: a request for the other consumer-group mode: a fetch
	// with mode=exclusive of a shared group or mode=shared of an exclusive
	// one (a group's mode is fixed by its first use), a cumulative ack of
	// a shared group, a per-message ack or nack of an exclusive one, or
	// mode=shared on a storage backend that cannot keep a shared group's
	// per-message state. HTTP 409 GROUP_MODE, TCP ERR GROUP_MODE.
	ErrGroupMode = contract.NewError(contract.CodeGroupMode, "groups: wrong group mode")
	// ErrTooManyGroups: Options.MaxGroups (topic, group) pairs are already
	// tracked. HTTP 503 TOO_MANY_GROUPS, TCP ERR TOO_MANY_GROUPS.
	ErrTooManyGroups = contract.NewError(contract.CodeTooManyGroups, "groups: group limit reached")
)

// BusyError is the ErrGroupBusy returned by Acquire: it says how long the
// holder's lease has left (renewed by its every fetch and ack), which the
// HTTP API sends as Retry-After.
type BusyError struct {
	Topic, Group string
	LeaseLeft    time.Duration
	// Elsewhere says which broker node holds the group when it is held
	// through another node (a storage backend shared by several nodes);
	// "" when held through this one.
	Elsewhere string
	// Full says why a shared group takes no more sessions; "" otherwise.
	Full string
}

func (e *BusyError) Error() string {
	if e.Full != "" {
		return fmt.Sprintf("%v: shared group %s of topic %s has %s; retry when one ends", ErrGroupBusy, e.Group, e.Topic, e.Full)
	}
	if e.Elsewhere != "" {
		return fmt.Sprintf("%v: group %s of topic %s has an active consumer on another broker node (%s)",
			ErrGroupBusy, e.Group, e.Topic, e.Elsewhere)
	}
	return fmt.Sprintf("%v: group %s of topic %s has an active consumer (its lease ends within %s unless renewed)",
		ErrGroupBusy, e.Group, e.Topic, e.LeaseLeft.Round(time.Millisecond))
}

// Unwrap makes errors.Is(err, ErrGroupBusy) true.
func (e *BusyError) Unwrap() error { return ErrGroupBusy }
