// Package schedule keeps scheduled messages (published with "deliverAt" or
// "delay") on disk until they are due, then appends each to its topic at a
// new offset, an ordinary durable append.
//
// # Where pending messages live
//
// Outside the topic namespace, in the directory Dir (the broker uses
// <data root>/.scheduled: contract.ValidateTopic refuses a leading '.', and
// the storage engine leaves such a name alone). The directory holds one
// bucket file per BucketWidth (default 1m) of due times, named after the
// bucket's start in Unix milliseconds, 20 digits, zero-padded:
//
//	.scheduled/00000001796352000000.sched   due times [start, start+width)
//
// # Bucket file format (wire format, do not change)
//
// A bucket file is a sequence of records, appended only:
//
//	+------------+------------+--------+--------------------+
//	| length u32 | crc32c u32 | kind u8| body (length-1 B)  |
//	+------------+------------+--------+--------------------+
//	  little-endian; length counts kind and body; the CRC (Castagnoli)
//	  covers kind and body.
//
//	kind 1 scheduled:  deliverAt i64 LE (Unix ms) | idLen u8 | id | topicLen u8 | topic | stored message JSON
//	kind 2 delivered:  idLen u8 | id     (appended and fsynced after the topic append)
//	kind 3 cancelled:  idLen u8 | id
//	kind 4 moving:     hwm i64 LE | idLen u8 | id   (fsynced before the topic append;
//	                   hwm: the topic's high watermark just before it)
//	kind 5 dropped:    topicLen u8 | topic   (every scheduled record of topic
//	                   before it in this file is cancelled: a topic deletion)
//
// Kinds 4 and 5 were added later; a file written before holds kinds 1 to 3
// only and is read the same way. An entry is pending while its file holds
// its scheduled record and no later delivered or cancelled record of its
// id nor dropped record of its topic (a done record always follows its
// scheduled record). A scheduled record is fsynced (and, for a new file,
// the directory too) before the publish is acknowledged; concurrent
// writes share one fsync (group commit). A file all of whose entries are
// done is removed.
//
// A topic deletion also writes, before any dropped record, an empty marker
// file named after the topic (fsynced, and the directory), removed once
// the topic is deleted:
//
//	.scheduled/<topic>.drop
//
// # Recovery
//
// On Start every bucket file is scanned (a window of entries at a time, see
// scanWindow: memory bounded by the budget, not by the file). The first record that is cut short,
// has a length of 0 or over the limit, or fails its CRC ends the valid
// records: unless corruption (below), it and everything after it is cut
// (truncate, fsync) and the cut is logged.
// Every acknowledged record was fsynced before its acknowledgement, so what
// a power loss tears there was never acknowledged (a scheduled record not
// yet answered, or a delivered/cancelled record whose entry is then moved or
// cancelled again). Crash damage is told from corruption as the storage
// engine does (repair.go): one group commit writes at most maxGroupBytes
// (1 MiB) to a file before its fsync, so a crash can damage only bytes
// within damageWindow (2 MiB, or the first invalid record's own length
// when longer) of the end E of the valid records. A record that passes its
// CRC at E + damageWindow or beyond lies in fsynced data: Open refuses
// with a *CorruptionError (file, E, the valid record's place) and changes
// nothing. Closer damage is a torn tail and is cut; the log line says how
// many records the cut removes, how many of them pass their CRC and how
// many pending messages they hold (inspectTail), at ERROR when any pass.
// Verify reads a store the same way and changes nothing (mmmq verify). A marker
// file <topic>.drop found finishes that deletion: dropped records in every
// file holding messages of topic, the topic deleted (Target's
// TopicDeleter), the marker removed.
//
// # Moving
//
// The mover handles the earliest bucket whose start has passed: it loads a
// window of that bucket's pending entries (id, topic, due time, place in
// the file; not the messages) sorted by due time, reads the messages of
// the due ones (at most MoveBatch, and half the memory budget, at a time),
// writes their moving records (one fsync), appends them to their topics
// (durable; a topic's run in one publish) with the header
// HeaderScheduleID, then writes their delivered records (one fsync). An
// entry with a moving record and no delivered one is looked for in its
// topic from the lowest recorded high watermark (Ledger.Find) before it
// is appended again: the move into the topic is exactly once, never early
// (an entry is moved only once the clock has reached its due time), and
// never lost once acknowledged. At least once only where the topic cannot
// show it: retention deleted the topic's messages from the recorded high
// watermark on, or a Target without Ledger.
package schedule
