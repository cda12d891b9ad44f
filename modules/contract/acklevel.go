package contract

import (
	"fmt"
	"strings"
)

// AckLevel is how far an append must get before its caller is answered
// (the log-queue study's three acknowledgement lines). A caller is never
// told more than happened.
//
//	level     answered when                         survives kill -9   survives power loss
//	ACCEPTED  queued in memory, offset not final     maybe              maybe
//	WRITTEN   write(2) returned (page cache)         usually            maybe (promised); on the local
//	                                                                    engine in fact yes, see below
//	DURABLE   segment fsynced (and its index, with   yes                yes (if the device honours flush)
//	          index-sync commit, the default)
//
// The local storage engine answers WRITTEN later than the level promises:
// after the segment's fsync and the offset index's write(2), only before
// the index's fsync (commit mode). So a WRITTEN entry there survives a
// power loss like a DURABLE one (recovery rebuilds its index entry from
// the segment); it is answered no sooner than DURABLE under index-sync
// lazy, and saves one fsync's wait under commit. A backend may answer it
// earlier (JetStream answers it as DURABLE): rely only on the promise.
type AckLevel uint8

const (
	// Accepted: the entry is queued for the writer; no offset is promised.
	Accepted AckLevel = iota + 1
	// Written: segment and index write(2) returned; offset is assigned.
	Written
	// Durable: the segment was fsynced (and the offset index too under
	// index-sync commit, the default; under index-sync lazy the index
	// follows within its interval and recovery rebuilds what it lacks)
	// and the high watermark covers the entry. The default everywhere.
	Durable
)

// String returns ACCEPTED, WRITTEN or DURABLE.
func (l AckLevel) String() string {
	switch l {
	case Accepted:
		return "ACCEPTED"
	case Written:
		return "WRITTEN"
	case Durable:
		return "DURABLE"
	}
	return fmt.Sprintf("AckLevel(%d)", uint8(l))
}

// ParseAckLevel parses accepted|written|durable, case-insensitively.
// The empty string is Durable.
func ParseAckLevel(s string) (AckLevel, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "durable":
		return Durable, nil
	case "written":
		return Written, nil
	case "accepted":
		return Accepted, nil
	}
	return 0, fmt.Errorf("unknown ack level %q (want accepted, written or durable)", s)
}
