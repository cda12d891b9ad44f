package contract

import (
	"context"
	"time"
)

// Optional capabilities of the storage seam. A backend implements Log and
// Checkpoint (log.go) and topicqueue.Backend; everything else it may offer
// is one of the named interfaces below, which the code above the seam finds
// by type assertion. Each backend asserts at compile time what it
// implements (var _ contract.X = (*T)(nil) in modules/storage,
// modules/topicqueue and plugins/jetstream), and the conformance suite
// (topicqueuetest.RunLogConformance) tests the behaviour of those it has.
//
// Required means every backend of this tree implements it and the broker
// treats a backend without it as degraded; optional means the broker works
// without it, as the last column says.
//
//	capability          on          local  jetstream  without it
//	------------------  ----------  -----  ---------  ---------------------------------------------------------
//	Incarnationer       Log         yes    yes        required: topics have incarnation "" — GET /topics and
//	                                                  pushes carry none, a topic deleted and created again
//	                                                  cannot be told from the old one, and a TopicEvent's
//	                                                  staleness check is skipped
//	CheckpointLister    Log         yes    yes        required: GET /topics/{t}/groups lists only the groups
//	                                                  opened since the log was opened (a warning is logged
//	                                                  once per process)
//	CheckpointRemover   Log         yes    yes        required: deleting a dispatcher or group leaves its
//	                                                  checkpoint stored, and one created again under the
//	                                                  same name resumes from it
//	Reopener            Log         yes    no         POST /topics/{t}/reopen answers ErrReopenUnsupported
//	                                                  (a JetStream stream has no local write to fail)
//	FailureReporter     Log         yes    no         an idempotent publish answered with the offset of a
//	                                                  not-yet-durable duplicate waits for the high watermark
//	                                                  instead of failing at once with the log's failure
//	Retainer            Log         yes    no         the retention loop skips the log; JetStream applies
//	                                                  RetentionPolicy as its streams' MaxAge and MaxBytes
//	WorkLeaser          Log         no     yes        no lease is taken: one broker per store is assumed
//	                                                  (the local root directory is locked)
//	CheckpointExister   Checkpoint  yes    no         a new "latest" dispatcher cannot tell a new checkpoint
//	                                                  from one at 0: it starts at its stored offset (0, a
//	                                                  full replay) instead of the high watermark (a warning
//	                                                  is logged once per process)
//	CheckpointReloader  Checkpoint  no     yes        a standing-by node shows its own last commit as the
//	                                                  dispatcher's progress (local: there is no other node)
//	EpochCheckpoint     Checkpoint  no     yes        required with WorkLeaser: a worker holding a lease
//	                                                  refuses to deliver on a checkpoint it cannot bind
//	CheckpointSeeker    Checkpoint  no     yes        a seek is a Commit (the local checkpoint moves either
//	                                                  way)
//	FinishedRecorder    Checkpoint  yes    no         messages finished past the committed offset (behind a
//	                                                  parked ordering key) are kept in memory only: a restart
//	                                                  or a lease change delivers them again
//	DeliveryRecorder    Checkpoint  yes    no         required for a shared consumer group: mode=shared is
//	                                                  refused (409 GROUP_MODE) naming the backend
//	GroupModer          Checkpoint  yes    no         required for a shared consumer group (as above); every
//	                                                  group is exclusive
//	TopicDeleter        Backend     yes    yes        required: DELETE /topics/{t} answers
//	                                                  topicqueue.ErrDeleteUnsupported, and startup
//	                                                  finishes no interrupted deletion
//	TopicWatcher        Backend     no     yes        topics created or deleted through another node are
//	                                                  not seen (local: there is no other node)
//	HealthChecker       Backend     no     yes        /readyz does not ask the store (local: the disk is
//	                                                  the process's own)
//
// Four capabilities of the local engine only live with it, because their
// values are the engine's own types: topicqueue.RepairReporter (the startup
// repair report of a *storage.Log, logged and shown by GET /topics),
// topicqueue.SegmentCacher (the shared segment-file cache, for metrics),
// topicqueue.PreallocBudgeter (the broker-wide preallocation budget, for
// metrics) and admin.SpecStoreProvider (a backend that stores the
// API-created dispatchers itself; JetStream does, in a key-value bucket,
// else they go to <root>/dispatchers.json).

// Incarnationer is a Log whose topic has an incarnation id: a random id made
// when the topic was created (32 lower-case hex digits, NewIncarnation),
// different after a deletion and re-creation.
type Incarnationer interface {
	Incarnation() string
}

// CheckpointLister is a Log that can enumerate the checkpoints it stores,
// so that an operator sees consumer groups whose checkpoint outlived a
// broker restart.
type CheckpointLister interface {
	// Checkpoints returns the names of the checkpoints stored for this
	// topic (dispatchers' and consumer groups' alike), sorted. A stored
	// checkpoint that was never committed is not listed, unless its
	// consumer group's mode is stored (GroupModer). Errors: one
	// wrapping ErrClosed after Close, or an I/O error.
	Checkpoints() ([]string, error)
}

// CheckpointRemover is a Log that can delete a stored checkpoint (a deleted
// dispatcher's or consumer group's): an open Checkpoint of that name is
// forgotten, and a later OpenCheckpoint starts at 0. Removing a checkpoint
// that does not exist is no error. Errors: one wrapping ErrClosed after
// Close, or the store's.
type CheckpointRemover interface {
	RemoveCheckpoint(name string) error
}

// Reopener is a Log that can be brought back into service after a write or
// fsync failed it, without a restart: it runs the topic's startup recovery
// again and returns the high watermark it has again, the one it had when it
// failed.
type Reopener interface {
	Reopen() (int64, error)
}

// FailureReporter is a Log that can say it has failed: Err returns the
// error that failed it (its writes are refused until it is reopened), nil
// while it is healthy.
type FailureReporter interface {
	Err() error
}

// Retainer is a Log that retention shrinks from the head: ApplyRetention
// deletes what policy p says is due at time now, never past keepFrom (the
// lowest offset a reader still needs; KeepAll for none), and says what it
// deleted. Errors: one wrapping ErrClosed after Close, or an I/O error.
type Retainer interface {
	ApplyRetention(p RetentionPolicy, now time.Time, keepFrom int64) (RetentionResult, error)
}

// WorkLeaser is a Log whose topic several broker nodes may deliver:
// AcquireWork tries once to take the lease of reader (a dispatcher name) on
// this topic for this node (see lease.go). It returns an error wrapping
// ErrLeaseHeld when another live node holds it, or another error when the
// store cannot be reached.
type WorkLeaser interface {
	AcquireWork(ctx context.Context, reader string) (WorkLease, error)
}

// CheckpointExister is a Checkpoint that can tell a checkpoint never
// committed (Exists false, Offset 0) from one committed at 0.
type CheckpointExister interface {
	Exists() bool
}

// CheckpointReloader is a Checkpoint another node may commit: Reload
// re-reads the stored offset, so that Offset returns it. Errors: the
// store's.
type CheckpointReloader interface {
	Reload() error
}

// EpochCheckpoint is a Checkpoint that can be bound to a lease epoch: from
// then on its Commit is rejected with an error wrapping ErrStaleCommit when
// a writer under a newer epoch (or any other writer) has committed since
// the binding. BindEpoch reloads the stored offset, so that Offset returns
// what the previous holder committed. Errors: the store's.
type EpochCheckpoint interface {
	Checkpoint
	BindEpoch(epoch uint64) error
}

// CheckpointSeeker is a Checkpoint whose Commit refuses to move backwards
// (a shared backend's): SeekTo stores next whatever the stored offset, the
// one way an operator's seek moves it back.
type CheckpointSeeker interface {
	SeekTo(next int64) error
}

// DeliveryRecorder is a FinishedRecorder that also stores, for messages
// past the committed offset that are not finished, how many times each was
// handed out: a shared consumer group's count toward
// mmmq.broker.groups.max-deliveries, so that a restart (or a power loss)
// never resets a poison message's count and never finishes a message
// twice.
//
// Commit(next) forgets the counts below next; RecordFinished forgets the
// counts of the offsets it finishes; ClearFinished forgets every count.
type DeliveryRecorder interface {
	FinishedRecorder
	// Deliveries returns the recorded counts of offsets at or past
	// Offset() that are not finished, ascending by offset, at most one per
	// offset (the latest recorded).
	Deliveries() []DeliveryCount
	// RecordDeliveries stores ds (offsets at or past Offset(), counts >= 1;
	// a later count of an offset replaces an earlier one) and returns once
	// they are durable (an fsync for the local backend). On error the
	// caller must not hand the messages out.
	RecordDeliveries(ds []DeliveryCount) error
}

// DeliveryCount is how many times the message at Offset was handed out.
type DeliveryCount struct {
	Offset int64
	Count  uint32
}

// Consumer group modes (GroupModer).
const (
	// GroupExclusive: one session at a time holds the group and
	// acknowledges cumulatively ("through offset n").
	GroupExclusive = "exclusive"
	// GroupShared: any number of sessions fetch at once (competing
	// consumers); each message is leased to one session and acknowledged
	// on its own.
	GroupShared = "shared"
)

// GroupModer is a Checkpoint that stores its consumer group's mode,
// GroupExclusive or GroupShared, fixed by the group's first use.
type GroupModer interface {
	// GroupMode returns the stored mode; "" for a group never used. A
	// checkpoint stored without a mode (written before modes existed, or
	// by a dispatcher) is GroupExclusive.
	GroupMode() (string, error)
	// SetGroupMode stores mode durably (file and directory fsynced for the
	// local backend) and returns once it is. Setting the mode already
	// stored does nothing; another mode is the caller's to refuse first.
	SetGroupMode(mode string) error
}

// OffsetRange is the offsets Lo (inclusive) to Hi (exclusive), Lo < Hi.
type OffsetRange struct{ Lo, Hi int64 }

// FinishedRecorder is a Checkpoint that also stores which messages past its
// committed offset are finished (ACKed, dead-lettered or skipped) while an
// earlier one is not: a dispatcher with ordering "key" finishes other keys'
// messages while one key is parked, and its checkpoint, the contiguous
// prefix of finished messages, cannot pass the parked one. After a restart
// the worker skips what is recorded here instead of delivering it again.
//
// Commit(next) forgets the recorded offsets below next.
type FinishedRecorder interface {
	// Finished returns the recorded offsets at or past Offset(), as
	// ascending, disjoint, non-adjacent ranges.
	Finished() []OffsetRange
	// RecordFinished adds rs (each at or past Offset()) and returns once
	// they are durable (an fsync for the local backend). On error the
	// caller must treat them as not recorded.
	RecordFinished(rs []OffsetRange) error
	// ClearFinished durably forgets every recorded offset: an operator's
	// seek, so that a replay delivers them again. SeekCheckpoint calls it
	// before it moves the offset.
	ClearFinished() error
}

// TopicDeleter is a topicqueue.Backend that can delete topics.
type TopicDeleter interface {
	// Delete removes topic name, whose log is closed, so that a crash at
	// any point leaves the whole topic or nothing. Error: the topic may
	// still be stored when stored is true.
	Delete(name string) (stored bool, err error)
	// FinishDeletions completes deletions a crash interrupted; startup
	// recovery (topicqueue.Registry.OpenAll) runs it before any topic
	// opens. It returns what it removed, for the log.
	FinishDeletions() (removed []string, err error)
}

// TopicWatcher is a topicqueue.Backend shared by several broker nodes:
// topics created through another node appear on this one, so that its
// dispatchers deliver them too (they subscribe to the registry's topics),
// and topics deleted through another node are forgotten here, so that a
// later publish creates them anew.
type TopicWatcher interface {
	// WatchTopics calls fn with an event for every topic that exists when
	// it starts, for every topic created later and for every topic deleted
	// later, by any node, until stop is called; after stop returns fn is
	// not called any more. fn may be called more than once for the same
	// change, for topics already open and for deletions of topics this node
	// does not have. A topic deleted and created again between two looks
	// is reported deleted, then created. It calls fn from one goroutine of
	// its own, one event at a time, and fn may block (it opens or closes the
	// topic). Errors: the store's, when the watch cannot start.
	WatchTopics(fn func(TopicEvent)) (stop func(), err error)
}

// TopicEvent is one change a TopicWatcher reports.
type TopicEvent struct {
	// Name is the topic's name.
	Name string
	// Deleted: the topic was deleted (through another node, or through
	// this one and seen again by the watch); else it exists.
	Deleted bool
	// Incarnation, when not "", is the incarnation id of the topic the
	// event is about (Incarnationer): a deletion of another incarnation
	// than the one open here is stale and ignored.
	Incarnation string
}

// HealthChecker is a topicqueue.Backend whose store is remote: Healthy
// returns nil while the store answers, else why not. /readyz reports the
// broker not ready while it fails, so that a load balancer sends clients to
// another node.
type HealthChecker interface {
	Healthy() error
}
