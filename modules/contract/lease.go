package contract

import (
	"errors"
)

// Work leases: on a store shared by several broker nodes (a replicated
// backend such as NATS JetStream), every node runs the same dispatchers over
// the same topics, yet one (dispatcher, topic) must be delivered by one node
// at a time, in offset order. A lease grants that right: the node holding
// it delivers, the others stand by and take over when it is not renewed in
// time (the node died or was paused), continuing from the committed
// checkpoint. Every takeover gets a greater epoch; the checkpoint remembers
// the epoch of its last commit and rejects a commit made under an older one,
// so a node that was paused past its lease and wakes up cannot move the
// checkpoint. What it can still do is send a push before it notices: pushes
// carry the epoch (the mmmq-lease-epoch header), so a consumer can drop a
// sender older than the newest epoch it has seen. That is the whole promise.

// ErrLeaseHeld is returned by WorkLeaser.AcquireWork when another live node
// holds the lease; the error wrapping it names the holder.
var ErrLeaseHeld = errors.New("lease held by another node")

// ErrStaleCommit is returned by the Commit of a checkpoint bound to an epoch
// (EpochCheckpoint) when a newer writer has committed since: this writer's
// lease was taken over. The checkpoint keeps its value; the writer must stop
// and acquire the lease again.
var ErrStaleCommit = errors.New("checkpoint committed by a newer lease holder")

// WorkLease is a held lease of one (reader, topic). The backend renews it in
// the background while it is held.
type WorkLease interface {
	// Epoch grows with every takeover of this (reader, topic) and is never
	// reused, even after the lease expired; it is sent with every push.
	Epoch() uint64
	// Holder is the name of the node holding it (this node).
	Holder() string
	// Lost is closed once the lease could not be renewed in time or was
	// taken over; the holder must stop delivering at once.
	Lost() <-chan struct{}
	// Release gives the lease up (stops renewing, and deletes it when it is
	// still ours, so another node takes over without waiting for it to
	// expire). Safe to call more than once and after Lost.
	Release() error
}

// SeekCheckpoint moves cp to next for an operator's seek: SeekTo when cp
// is a CheckpointSeeker, else Commit (the local checkpoint moves either
// way). A FinishedRecorder forgets its finished offsets first, so that a
// crash between the two redelivers rather than skips. Errors: the
// checkpoint's.
func SeekCheckpoint(cp Checkpoint, next int64) error {
	if f, ok := cp.(FinishedRecorder); ok {
		if err := f.ClearFinished(); err != nil {
			return err
		}
	}
	if s, ok := cp.(CheckpointSeeker); ok {
		return s.SeekTo(next)
	}
	return cp.Commit(next)
}
