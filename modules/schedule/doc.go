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
//
// An entry is pending while its file holds its scheduled record and neither
// a delivered nor a cancelled record. A scheduled record is fsynced (and,
// for a new file, the directory too) before the publish is acknowledged.
// A file all of whose entries are done is removed.
//
// # Recovery
//
// On Start every bucket file is scanned. The first record that is cut short,
// has a length of 0 or over the limit, or fails its CRC ends the file: it
// and everything after it is cut (truncate, fsync) and the cut is logged.
// Every acknowledged record was fsynced before its acknowledgement, so what
// a power loss tears there was never acknowledged (a scheduled record not
// yet answered, or a delivered/cancelled record whose entry is then moved or
// cancelled again). This does not tell a torn tail from corruption of
// synced bytes with valid records after it: such records are cut too (left
// to do: refuse instead, as the storage engine's repair does).
//
// # Moving
//
// The mover handles the earliest bucket whose start has passed: it loads
// that bucket's pending entries (id, topic, due time, place in the file;
// not the messages) sorted by due time, reads the messages of the due ones
// (at most MoveBatch at a time), appends each to its topic (durable), then
// appends their delivered records and fsyncs the bucket file once. A power
// loss between the topic append and that fsync moves those messages again
// after the restart: delivery into the topic is at least once, never early
// (an entry is moved only once the clock has reached its due time), and
// never lost once acknowledged. The stored message is the one built at
// publish time (same id, timestamp = publish time), so a consumer can drop
// the second copy by its id.
package schedule
