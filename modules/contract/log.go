package contract

import (
	"bytes"
	"context"
	"time"
)

// SearchTime returns the first offset of l, from its log start offset,
// whose stored message timestamp ("timestamp", Unix ms) is at or after t,
// or l.HighWatermark() when there is none: where a seek by time starts. A
// message without a timestamp counts as older than any t. Errors: those of
// l.Read.
//
// Timestamps grow with offsets except for scheduled messages (those with
// the HeaderScheduleID header): they keep their publish time and enter the
// topic when due, so they are older than the messages around them. The
// search is a binary search for the first offset o at which the largest
// timestamp of offsets up to o reaches t, which is the first offset whose
// own timestamp does. For a probe that is not a scheduled message its own
// timestamp decides: every earlier message, scheduled ones included (they
// were published before they were appended), is no newer. A scheduled
// probe that is older than t is decided by the messages before it, read
// back to the nearest one that is not scheduled (or to the search's lower
// end, below which none reaches t): O(log n) reads when the topic mixes
// the two, up to one read per message over a run of scheduled messages.
func SearchTime(l interface {
	StartOffset() int64
	HighWatermark() int64
	Read(offset int64) ([]byte, error)
}, t time.Time) (int64, error) {
	want := t.UnixMilli()
	reaches := func(p []byte) bool {
		ts, ok := MessageTimestamp(p)
		return ok && ts >= want
	}
	lo, hi := l.StartOffset(), l.HighWatermark()
	for lo < hi {
		mid := lo + (hi-lo)/2
		p, err := l.Read(mid)
		if err != nil {
			return 0, err
		}
		found := reaches(p)
		if !found && scheduledHint(p) {
			// Is any message before mid, back to the nearest one that is
			// not scheduled, at or after t?
			for o := mid - 1; o >= lo; o-- {
				q, err := l.Read(o)
				if err != nil {
					return 0, err
				}
				if reaches(q) {
					found = true
					break
				}
				if !scheduledHint(q) {
					break
				}
			}
		}
		if found {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}

// scheduledHint says whether p may be a message moved from the scheduled
// store (it names the HeaderScheduleID header). A false "may" only costs
// SearchTime reads.
func scheduledHint(p []byte) bool {
	return bytes.Contains(p, []byte(`"`+HeaderScheduleID+`"`))
}

// Log is one topic's log as the topic registry hands it out: the
// storage-backend seam. The local segmented log (*storage.Log) implements
// it; a replicated backend implements it too, and the dispatchers, consumer
// groups, HTTP API and line protocol use nothing else. Implementations are
// safe for concurrent use. Offsets start at 0 and grow by one per message
// without gaps.
type Log interface {
	// Append stores one message JSON and answers once level is reached: the
	// offset for Written and Durable, -1 for Accepted (no offset is
	// promised yet). A failed append is never acknowledged; the error is
	// classified by Classify (too large, empty, no space, unavailable).
	Append(ctx context.Context, payload []byte, level AckLevel) (int64, error)
	// AppendBatch stores payloads with consecutive offsets, committed
	// together, and returns the first offset (-1 for Accepted).
	AppendBatch(ctx context.Context, payloads [][]byte, level AckLevel) (int64, error)
	// Read returns the message JSON at offset. Errors: one wrapping
	// ErrOutOfRange at or beyond HighWatermark or for a negative offset,
	// one wrapping ErrOffsetExpired (an *OffsetExpiredError) below
	// StartOffset, a *CorruptionError for a bad entry.
	Read(offset int64) ([]byte, error)
	// ReadBatch returns up to max entries starting at from, all below the
	// high watermark, in offset order without gaps; empty when from >=
	// HighWatermark(). On a corrupt entry at offset o it returns the entries
	// before o and the corruption error for o.
	ReadBatch(from int64, max int) ([]Entry, error)
	// HighWatermark is one past the last readable offset; every offset
	// below it is durable. It never decreases.
	HighWatermark() int64
	// Notify returns a channel closed once HighWatermark() > offset, or
	// once the log is closed, and not before: a receiver that finds
	// HighWatermark() <= offset knows the log is closed (the dispatchers
	// and consumer-group fetches rely on this).
	Notify(offset int64) <-chan struct{}
	// StartOffset is the log start offset: the first offset still stored
	// (0 until retention deletes something).
	StartOffset() int64
	// OffsetAt returns the first offset whose message timestamp is at or
	// after t, or HighWatermark() when there is none: where a seek by time
	// starts.
	OffsetAt(t time.Time) (int64, error)
	// Stats is a point-in-time summary for GET /topics and metrics.
	Stats() Stats
	// OpenCheckpoint opens, or returns the already open, durable checkpoint
	// named name of this topic (a dispatcher's or a consumer group's
	// progress). The log owns it and closes it; callers do not.
	OpenCheckpoint(name string) (Checkpoint, error)
	// Close finishes what was queued, closes the checkpoints and releases
	// the log. Every later call fails with an error wrapping ErrClosed.
	Close() error
}

// Checkpoint is a durable "next offset to read" of one reader (dispatcher
// or consumer group) on one topic: the original mmmq's commit(name, offset).
type Checkpoint interface {
	// Name is the reader's name (dispatcher or group).
	Name() string
	// Path says where the checkpoint is stored (a file path for the local
	// backend), for logs.
	Path() string
	// Offset is the last committed next offset; 0 for a new checkpoint.
	Offset() int64
	// Commit durably stores next and returns after it is durable (an fsync
	// for the local backend). On error Offset keeps the previous value and
	// the caller must treat the stored value as unknown.
	Commit(next int64) error
}

// Entry is one message read back from a log: its offset and the stored
// message JSON. Payload must not be modified; it may share a read buffer
// with the other entries of the same batch.
type Entry struct {
	Offset  int64
	Payload []byte
}

// Stats is a point-in-time summary of a log, as GET /topics shows it.
type Stats struct {
	Topic       string `json:"name"`
	NextOffset  int64  `json:"nextOffset"`  // the high watermark
	StartOffset int64  `json:"startOffset"` // the log start offset: the first offset still stored
	Segments    int    `json:"segments"`
	Bytes       int64  `json:"bytes"`       // bytes of the entries in .mmm files (data, never preallocated zeros)
	Fsyncs      int64  `json:"fsyncs"`      // fsyncs of segment and index files since open
	IndexFsyncs int64  `json:"indexFsyncs"` // of which offset index fsyncs
	// Datasyncs: of Fsyncs, those made with fdatasync(2) (group commits
	// into preallocated zeros, mmmq.broker.storage.preallocate).
	Datasyncs int64 `json:"datasyncs,omitempty"`
	// PreallocatedBytes: zero bytes the active segment's files hold
	// ahead of the data now (preallocation; 0 when off).
	PreallocatedBytes int64  `json:"preallocatedBytes,omitempty"`
	Batches           int64  `json:"batches"` // group commits since open
	Failed            string `json:"failed,omitempty"`
	PendingBytes      int64  `json:"pendingBytes"`
	FirstSegment      int64  `json:"firstSegment"`
	ActiveSegment     int64  `json:"activeSegment"`
}
