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
//   - a message NACKed on every attempt is in the dispatcher's dead-letter
//     topic at least once, with its mmmq-dl-* headers, before the
//     checkpoint passes it (TestCrashPoints/after-dead-letter-before-checkpoint);
//   - a producer that publishes an unanswered message again with the same
//     id (TestCrashRandomKillRetrySameID) finds it stored exactly once:
//     the retry is answered as a duplicate at the stored offset, or stored
//     when the first publish never reached the log.
//
// The package has only tests; `make test` runs a short version (5 rounds),
// `make crash` a long one (MMMQ_LONG=1, 100 rounds, or -crash.rounds N).
package crashtest
