// Package crashtest holds the black-box crash tests of the real mmmq binary
// (crash evidence): it builds app/mmmq with -tags crashpoints once, runs it
// as a child process, drives producers and an in-test consumer over HTTP on
// 127.0.0.1, kills it with SIGKILL (at random moments or at a named
// injection point, see app/mmmq/crashpoints.go) and checks, after every
// restart, what the broker promised:
//
//   - every DURABLE (and WRITTEN: a process crash keeps the page cache)
//     acknowledged message is at its offset, byte-identical;
//   - offsets are contiguous from 0 and never change once visible;
//   - every message delivered to the consumer is in the log at that offset;
//   - per (dispatcher, topic) delivery is in order without gaps, and after a
//     crash it resumes exactly at the checkpoint left on disk;
//   - a dispatcher with a delivery window (max-in-flight above 1, batches;
//     TestCrashRandomKillWindow) never sends below its checkpoint, and its
//     checkpoint never passes an offset the consumer had not ACKed;
//   - a dispatcher with ordering key (TestCrashKeyOrdering: max-in-flight
//     8, 20 keys, a few flaky keys answered 503 at random) never pushes an
//     offset of a key before every earlier offset of that key was ACKed,
//     never has two pushes of one key outstanding, retries a 503'd key
//     after its backoff while the other keys go on, keeps its checkpoint
//     on the ACKed prefix, and pushes nothing its .finished file held at
//     startup; TestLazyFSPowerLossKeyOrdering runs the same with power
//     losses on LazyFS, where every .finished record written before the
//     power loss but the last survives it;
//   - a shared consumer group (TestCrashSharedGroup: 1–8 sessions of
//     competing consumers that ack one offset per request, nack, and
//     abandon sessions to a 500 ms lease; max-deliveries 6) never hands
//     out a message of a key before every earlier message of that key was
//     finished (acknowledged or dead-lettered), never counts an offset in
//     two ack answers nor hands out one already finished, never lowers a
//     message's delivery count across restarts, never answers a committed
//     offset past a message not finished, and at the end has finished
//     every acknowledged publish; TestLazyFSPowerLossSharedGroup runs the
//     same with power losses on LazyFS;
//   - a message NACKed on every attempt is in the dispatcher's dead-letter
//     topic at least once, with its mmmq-dl-* headers, before the
//     checkpoint passes it (TestCrashPoints/after-dead-letter-before-checkpoint);
//   - a producer that publishes an unanswered message again with the same
//     id (TestCrashRandomKillRetrySameID) finds it stored exactly once:
//     the retry is answered as a duplicate at the stored offset, or stored
//     when the first publish never reached the log;
//   - scheduled messages (TestCrashScheduled, and on LazyFS with power
//     losses TestLazyFSPowerLossScheduled: producers schedule single and
//     batch publishes due 200 ms–4 s later, cancel some, and retry the
//     unanswered ones with their id after each restart): counted by id in
//     the topic read back, no acknowledged schedule is lost, none is
//     pushed before its due time, none is in the topic twice, and no
//     acknowledged cancel is delivered. The "twice" check holds because
//     the mover's moving records are fsynced before its topic appends and
//     recovery looks in the topic for the mmmq-schedule-id header before
//     appending again (without that it found 8 ids twice in 30 kill -9
//     rounds and 145 in 16 LazyFS rounds).
//
// Endpoint health (health_test.go), without kills of the consumer side's
// making: dispatchers from the configuration file and from the admin API
// with a circuit breaker, against consumers down for 10 s (answering 503,
// or refusing connections: counted at a proxy, or straight, the broker's
// probes counter checked), get at most one probe per cool-off and are
// pushed to again within one cool-off of the consumer's return
// (TestBinaryBreakerOneProbePerCooloff); with pause-after they
// pause themselves, not before pause-after counted from the restart that
// came in between, stay paused through kill -9, and resumed through the
// admin API and `mmmq dispatchers resume` deliver everything once, in
// order (TestBinaryAutoPauseAcrossRestartsThenResume).
//
// Recovery of the last segment (TestCrashPoints): an entry complete in
// the segment after the last index entry (the kill came after the segment
// write or its fsync, before the index write) is indexed again and
// visible, although its publisher got no reply, like a lost reply; a
// retry with its id is answered as the duplicate. A torn entry there (the
// test cuts the file's last bytes) is truncated and its offset reused. An
// invalid entry followed by a valid one (the test damages the entry and
// appends a valid one) makes the broker refuse to start. An ACCEPTED
// answer promises nothing: an answered entry still queued in memory when
// the process died is gone, and its possible offsets go to other messages.
//
// Both index-sync modes are covered: the random rounds run once with
// index-sync commit and once with lazy (rounds alternating an interval of
// an hour and of 5 ms), checking from the fsync counters of /metrics that
// the broker ran in the mode; TestCrashPoints has lazy rows for the kill
// after an answer with the index unsynced and before a rotation's index
// fsync, each also restarted on a copy whose index is cut back to its last
// fsync (what a power loss may leave), where recovery must index again.
//
// The cluster harness (cluster_test.go) runs the binary with the NATS
// JetStream backend: 3 nats-server processes (replicas 3, every write
// fsynced) and 2 mmmq processes, producers publishing DURABLE through both,
// one dispatcher; each round kills -9 (or freezes with SIGSTOP) a NATS node
// and then an mmmq node, and the checks are the same kind: every
// acknowledged message in the log exactly once at its offset, everything
// delivered in order per lease epoch, no two pushes of one epoch at once,
// failover within a bound, a group held through one node busy on the
// other; a one-replica negative control must be reported unavailable.
//
// TestLazyFSPowerLoss (lazyfs_test.go) runs the binary with its data
// directory on LazyFS, a FUSE filesystem that loses (or tears) every
// write not fsynced when its daemon is killed: real power losses, kill -9
// then a power loss, torn segment writes and torn lazy index writes, in
// both index-sync modes, with an ACCEPTED negative control that must lose
// something. It runs only with MMMQ_LAZYFS set to the lazyfs binary
// (../shared/tools/build-lazyfs.sh builds it; .ci/run exports it).
// TestLazyFSPreallocReadAfterPublish (prealloc_read_test.go) is the one
// test here that drives the storage engine directly instead of the
// binary: readers right behind the writer of small preallocated segments
// on LazyFS, where the kernel's FUSE page cache can serve preallocated
// zeros for bytes already written and fsynced; every read must return
// the acknowledged message, and a power loss must lose none.
//
// The package has only tests; `make test` runs a short version (3 rounds
// per mode, 10 key-ordering rounds, 8 shared-group rounds, 4 scheduled
// rounds, 2 cluster rounds), `make crash` a long one (MMMQ_LONG=1, 100
// rounds per mode, 100 key-ordering rounds, 100 shared-group rounds, 30
// scheduled rounds and 20 cluster rounds, or -crash.rounds N).
package crashtest
