// Package dedup is the idempotent-publish window: for each topic, the
// message ids that producers supplied within the last Options.Window and
// the offset each one was stored at, so that a producer whose reply was
// lost (a timeout, a reset connection, a broker killed after the fsync and
// before the answer) can publish again with the same id and not store the
// message twice. It is the duplicate window of NATS JetStream (Nats-Msg-Id)
// and the deduplication id of SQS FIFO, on the id the original Java mmmq
// already carries in every message.
//
// # The rule
//
// A message with a producer id (the stored message says
// "idFromProducer":true) whose id was published to the same topic within
// the window is a duplicate: nothing is stored and the publish answers the
// first message's offset with "duplicate": true. Ids the broker generates
// are never deduplicated. The same id on two topics is two messages.
//
// A duplicate that arrives while its original is still being committed
// waits for the original's outcome: the original's offset when it was
// stored, or, when it failed, the duplicate is tried as a new message. An
// ACCEPTED publish does not wait: its duplicate answers ACCEPTED with
// "duplicate": true at once (ACCEPTED promises no offset and no outcome).
// Two messages with the same id in one call: the second is the duplicate.
//
// # Memory
//
// Ids are kept as 128-bit keyed hashes (hash/maphash with two random
// seeds per process), so an id costs the same whatever its length
// (EntryBytes, counted against Options.MaxBytes); two different ids of one
// topic collide with a probability of about 2^-128. The oldest ids go
// first when a topic holds Options.MaxIDs or all topics together
// Options.MaxBytes; an id forgotten before its window ended is counted in
// Stats.Evicted, so operators see a window too small for their rate.
//
// # Restarts
//
// The window is rebuilt from the tail of the topic's log: lazily, on the
// first publish with an id after the topic is opened (or reopened after a
// failure), not at startup. It reads backwards from the high watermark
// until it has MaxIDs producer ids or reaches entries stored before the
// window, skipping entries without a producer id, so its cost grows with
// what the topic stored within the window. A corrupt entry is skipped (it
// cannot be a duplicate of anything readable) and counted in a warning.
package dedup
