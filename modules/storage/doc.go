// Package storage is the mmmq storage engine: a per-topic, append-only,
// segmented log on local disk with an offset index, CRC32C per entry, group
// commit, durable checkpoints and an index-based repair of each topic when
// it is opened. It works without Fx; fx.go only wires it into the
// application. ("Repair" is this per-topic engine; the broker's startup
// pass over every topic, which calls it through Open, is modules/recovery.)
//
// # Layout
//
//	<root>/
//	  <topic>/
//	    0000000000000000000.mmm     segment: entries back to back
//	    0000000000000000000.idx     offset index: int64 BE position per entry
//	    0000000000000001024.mmm     next segment, named by its first offset
//	    0000000000000001024.idx
//	    checkpoints/<name>.checkpoint   int64 BE next offset, 8 bytes
//	    checkpoints/<name>.finished     offsets finished past it and a shared group's delivery
//	                                    counts (only while any are recorded)
//	    checkpoints/<name>.mode         a consumer group's mode: "shared\n" or "exclusive\n"
//
// # Entry (format.go)
//
//	+-----------+-----------+------------------------+
//	| length    | CRC32C    | message JSON           |
//	| int32 BE  | uint32 BE | length-4 bytes         |
//	+-----------+-----------+------------------------+
//	length = 4 + len(JSON); CRC over the JSON only.
//
// A length below 6 (4 + the 2-byte minimum JSON) or past the end of the file
// is rejected before anything is allocated, so eight zero bytes (length 0,
// CRC32C("") = 0) never decode as an entry. max-record-bytes limits appends;
// reads and repair accept any length the file actually holds, so lowering
// the setting never hides entries written under a higher one.
//
// # Lookup
//
//	offset 1030 → segment with the greatest start <= 1030 (binary search): 1024
//	            → relative offset 6 → .idx bytes 48..55 = position 412
//	            → .mmm at 412: header, payload, CRC check
//
// ReadBatch reads a run of index entries and the segment bytes they span in
// one read each, so a replay costs two syscalls per batch, not per entry.
// An entry below the high watermark that fails validation is read again
// through newly opened files (reader.go, rereadPauses: at once, then after
// 1, 5 and 25 ms) before it is reported as corruption: on FUSE the kernel
// page cache can serve, for a while, the preallocated zeros a completed
// write replaced, and opening the file drops that cache.
//
// # Write path (writer.go): group commit
//
//	Append ─┐
//	Append ─┼─▶ pending queue ─▶ writer goroutine (one per topic)
//	Append ─┘                     │ take everything queued
//	                              │ rotation check before each entry
//	                              │ at most MaxGroupBytes per group (one larger entry alone)
//	                              ├─ write entries to .mmm ........ (hook AfterSegmentWrite)
//	                              ├─ fsync .mmm .................... (hook AfterSegmentSync)
//	                              │   (fdatasync when the group lies in preallocated zeros)
//	                              ├─ write positions to .idx ....... (hook AfterIndexWrite)  → answer WRITTEN
//	                              ├─ fsync .idx .................... (hook AfterIndexSync; commit mode only)
//	                              ├─ publish high watermark (atomic store, wake Notify waiters)
//	                              └─ answer DURABLE ................ (hook AfterAnswer)
//
// ACCEPTED is answered as soon as the entry is queued. Concurrent appends share
// one group commit; the data of an index entry is always fsynced before the
// index entry is even written, so an index entry on disk never points at
// data that a power loss can take away. Repair relies on that order (an
// index whose plausible entries reach past the segment's end, or a later
// entry pointing at a valid entry past the end of the segment walk,
// refuses the topic; see the table below), so the two fsyncs of a
// commit-mode group are never issued at once.
//
// # Index sync (Options.IndexSync, mmmq.broker.storage.index-sync)
//
// commit (the default, the original Java mmmq's order) fsyncs the index in
// every group commit, as drawn above: two fsyncs per group commit. lazy
// skips that fsync: one fsync per group commit, the segment's. A lazy
// log fsyncs its active index
//
//	before a rotation seals the segment .... (hook BeforeSealIndexSync): a
//	                                          sealed segment's index is
//	                                          always complete on disk
//	when the log closes
//	IndexSyncInterval (default 1s) after the index was first left
//	  unsynced, by a timer when the topic is idle and between group
//	  commits when it is busy
//
// and a failure of any of those fsyncs fails the log like any other. Both
// modes write the same files; what a power loss can leave differs only in
// the last segment, whose index may lack entries the segment holds (lazy:
// up to an interval of them; commit: the one group commit between its two
// fsyncs). Repair indexes them again (below), so it needs no record of the
// mode that wrote a topic, and a topic may switch modes across restarts. Readers load the high watermark, then
// the immutable segment list snapshot, pin the segment's files (below) and
// read with ReadAt: no lock.
//
// A failed write or fsync fails the log: the waiters of that batch and every
// later append get an error wrapping ErrFailed and the I/O error, naming
// its cause (ENOSPC, EIO, …; HTTP 503 TOPIC_FAILED). The log never retries
// an fsync and then acknowledges (PostgreSQL "fsyncgate"). Log.Reopen
// brings it back without a restart: it cuts the active segment's .idx and
// .mmm back to the high watermark and the byte size the last successful
// fsync covered (never trusting what the failed batch left in the page
// cache), fsyncs them, runs repair, which must find exactly that high
// watermark, and accepts appends again. (The index is cut back to the
// entries its last good fsync covered; in lazy mode repair indexes the
// rest again from the segment.) The writer already makes the same cut,
// best effort, as soon as the log fails, so that a plain restart does not
// index again bytes whose fsync failed. A restart runs repair too.
//
// # Preallocation (prealloc.go, Options.Preallocate)
//
// mmmq.broker.storage.preallocate (bytes ahead of the writer; the broker's
// default 4 MiB, Options' zero value off) keeps written, fsynced zeros
// ahead of the data in the active segment's two files, so that a group
// commit overwrites zeros and fdatasync has no size or block allocation
// to flush (PostgreSQL writes each new WAL file full of zeros; etcd
// preallocates its WAL files; fallocate alone would leave unwritten
// extents to convert at the first write):
//
//	active .mmm: | entries ............ | zeros (fsynced) ....... |
//	active .idx: | positions | zeros (fsynced) |
//	                         ^ data end         ^ file end
//
//	sealed, cleanly closed, repaired: | entries | (file end = data end)
//
// The rule:
//
//   - Only the active files of a running or killed broker carry a zero
//     tail. A rotation cuts the full segment's .mmm and .idx to their
//     last entry and fsyncs both before the next segment is created, so a
//     crash in a rotation never leaves a zero tail on a sealed segment;
//     recovery does not accept one there (an index ending in zero entries
//     is refused as before). A clean close and an idle topic
//     (PreallocateIdle, 10s) cut and fsync the same way. Sealed, cleanly
//     closed and repaired files end exactly at their last entry, as the
//     original Java mmmq writes and reads them.
//   - Zeros are written in chunks (up to Preallocate ahead of the data,
//     never past SegmentMaxBytes; the index twice what the segment's
//     average entry needs, 4 KiB to Preallocate/8) by a goroutine of
//     their own, on descriptors of their own (an fsync error is then
//     reported to the writer's descriptor too: Linux reports a writeback
//     error once per open file), and fsynced once. While a chunk is
//     written the writer's read-write pair is pinned in the segment cache:
//     never closed or evicted under it. A failed chunk fails the log.
//   - The writer uses fdatasync for a file only when its whole group lies
//     below what a completed fsync made part of the file (no size change);
//     otherwise fsync, as always with preallocation off. It waits for a
//     chunk only when its group would reach the chunk (it caught up).
//   - A topic is preallocated only while busy (a group commit within 1s
//     of the previous), only while the broker-wide PreallocBudget
//     (mmmq.broker.storage.preallocate-max-bytes, 256 MiB) has room, and
//     only when the disk guard keeps min-free-bytes free after the chunk:
//     the guard sees preallocated bytes as used (statfs does), and still
//     counts every append as new bytes, whether it lands in zeros or not.
//   - Sizes are the data's: rotation, retention, Stats.Bytes (GET /topics)
//     and the metrics never count zeros.
//   - Retention-deleted segments are never recycled: entries carry no
//     offset, so an old entry in a reused file would pass its CRC.
//
// Recovery cuts the last segment's zero tail (RepairReport.ZeroTailBytes;
// `mmmq verify` says ZERO_TAIL when that is all it would do): the zeros
// that end the .mmm are found from the file's end backwards, a window at a
// time with page-sized memory compares, and the damage scan after the
// first invalid byte E stops where they start (no entry starts in zeros:
// its length would be 0); trailing zero index entries are cut as the
// derived-index rule already does with zero entries. The crash-damage rule
// below is unchanged: the writer still fsyncs (or fdatasyncs) at most
// MaxGroupBytes of entries per group, and zeros hold no entry, so a
// CRC-valid entry at E + DamageWindow or beyond is still fsynced data.
//
// # Disk guard (space.go)
//
// Options.SpaceGuard refuses appends before anything is queued while the
// data filesystem has less than mmmq.broker.storage.min-free-bytes free
// (*LowSpaceError, ErrNoSpace: HTTP 507): free space is sampled with one
// statfs at most once a second and once per min-free/2 bytes admitted, so
// publishes alone never take the last min-free/2 bytes.
//
// # Rotation
//
// Before each entry, if the active segment holds >= SegmentMaxBytes, the
// buffered group is made durable (in lazy mode its index fsynced too), a
// preallocated zero tail is cut from both files and they are fsynced, then
// <next>.mmm and <next>.idx are created and the topic directory is fsynced,
// next = start + entry count of the previous segment.
//
// # Open files (segcache.go)
//
// Every segment's .mmm and .idx, the active one's included, are opened on
// demand and kept in a SegmentCache of at most Options.MaxOpenSegments
// pairs (default: a quarter of the open-file limit), evicted by CLOCK (approximate LRU); logs may share
// one cache (Options.SegmentCache), and the broker's topics do
// (mmmq.broker.storage.max-open-segments, modules/topicqueue's
// LocalBackend). So descriptors are bounded by the cache, not by the
// number of topics or segments: an idle topic holds none, and its next
// append reopens its active segment read-write. Checkpoints hold none
// between commits either (checkpoint.go).
//
//	append    → the writer pins the active segment's pair for one group
//	            commit, opening it read-write on a miss (or when a reader
//	            cached a read-only pair of it, which it replaces)
//	read offset o → segment s (snapshot) → pin s's pair:
//	    hit:  refcount compare-and-swap, no lock
//	    miss: open .mmm and .idx read-only (outside the cache lock),
//	          insert under the cache lock, evicting an unpinned pair
//	→ ReadAt … → unpin (the last reference of an evicted pair closes it)
//
// Eviction never closes a file under an in-flight read or write (the pin
// holds it) nor one with unsynced writes: the writer releases its pin only
// after the group was written and fsynced (a failure there fails the log),
// a preallocation chunk holds a pin of its own until its zeros are
// fsynced, and readers open files read-only. A reopen validates nothing (repair did, at Open); a
// file missing by then is an I/O error wrapping fs.ErrNotExist, not an
// empty read. Repair, Verify and Dump hold one segment's files at a time.
//
// # Repair on open (repair*.go): index-based, no full scan
//
// Open repairs the topic in three steps. Scan (repair_scan.go) lists the
// directory, opens each segment's files and reads its offset index. Plan
// (repair_plan.go) decides what to keep, per segment in offset order,
// reading only the few entries a decision needs and writing nothing; the
// first corruption refuses the topic. Apply (repair_apply.go) then cuts,
// creates and removes files and fsyncs them. Verify and Dump stop after
// plan.
//
// The offset index of a sealed segment is the single source of truth, and
// the last segment's is trusted as far as it is valid. Per segment, in
// order (the plan step that decides it on the right):
//
//	segment start != previous     → CORRUPT (gap or overlap        planSegment
//	  start + previous count        in the chain)
//	.idx length % 8 != 0          → cut the torn entry             planIndexLength
//	                                (last segment; else CORRUPT)
//	index positions implausible   → sealed: CORRUPT; last segment: planIndexPositions
//	  (first not 0, or not          the rest of its index is
//	   increasing by a              judged against the walk below
//	   plausible entry size)
//	index entry at/after .mmm end → CORRUPT: the segment is        planTornEntries
//	                                shorter than its index
//	last entry torn (bad header,  → cut it and walk back           planTornEntries
//	  runs past end, CRC wrong)     (last segment; else CORRUPT)
//	entry before the last one     → CORRUPT ("index entry points   checkJoin
//	  does not end where the        into the middle of an entry")
//	  last one starts
//	last segment: CRC-valid       → index them again: append       planTail, applySegment
//	  entries after the last kept   their positions to .idx,
//	  one, each starting where      fsync (lazy index tail, or a
//	  the previous ends (the walk)  crash between the fsyncs)
//	last segment: later index     → agreeing: kept; zero or        planLaterIndex
//	  entries                       garbage: cut, rebuilt from
//	                                the walk; one pointing at a
//	                                valid entry the walk does not
//	                                put there: CORRUPT
//	then, at E (the first byte    → a CRC-valid entry at or past   planDamage
//	  where no valid entry          E + DamageWindow: CORRUPT
//	  starts), invalid bytes        (fsynced data damaged);
//	                                closer ones, holes, zeros:
//	                                a torn group commit, cut at
//	                                E, valid entries counted
//	last segment: trailing zero   → cut (ZeroTailBytes; a          planIndexLength,
//	  index entries (after entry    preallocated tail, or zeros    zeroTailStart,
//	  0), trailing zero bytes of    a crash left), found from the  planPair
//	  .mmm after the kept entries   end, never scanned byte by byte
//	.mmm longer than the end of   → truncate and fsync (a torn     planPair, applySegment
//	  the last kept entry           tail, never acknowledged)
//
// Apply fsyncs the kept last segment's .mmm, before it writes any index
// entry, and its .idx, whatever the plan: a killed process leaves its last
// writes in the page cache, where repair reads them as if they were on
// disk, so what the restart serves (an entry indexed again, an index it
// takes as synced) must be made durable before it is served. (A broker
// opening many topics syncs the whole filesystem once at startup instead,
// syncfs(2) through vfs.FSSyncer, and sets Options.FilesystemSynced: two
// fsyncs per topic cost 0.2–0.5 ms each on a virtual disk even with
// nothing dirty; 2,000 topics start in 0.24–0.29 s either way. syncfs is
// trusted only on filesystems known to honour it: on FUSE it returns 0
// and syncs nothing, so there, and on any type not known, every topic's
// repair fsyncs its own files.) An entry
// indexed again may never have been acknowledged (its group commit
// crashed before the answer): like a lost reply, it is delivered at least
// once. One rule serves both index-sync
// modes: an acknowledged entry's bytes were fsynced before its answer in
// either, and recovery finds it either through the index or through the
// walk after it.
//
// # Crash damage or corruption (repair_tail.go)
//
// A power loss can leave any subset of the pages written since a file's
// last completed fsync, in any order: a hole followed by data that did
// reach the disk is an ordinary crash outcome there. Damage in bytes that
// had been fsynced is corruption. Recovery tells them apart by a bound
// the writer keeps: a group commit writes at most MaxGroupBytes (1 MiB) to
// a segment before its fsync (one larger entry alone), so the unsynced
// bytes a crash can damage start at or before E, the first position of
// the last segment where no valid entry starts, and end within one group
// of it. A CRC-valid entry at E + DamageWindow or beyond lies in fsynced
// data: refused. Anything closer is a torn group commit: cut at E, with
// its CRC-valid entries counted (RepairReport.CutValidEntries; the metric
// mmmq_recovery_cut_valid_entries_total). The bound is a constant of the
// format, not a setting, so a restart under other settings judges a crash
// by the rule that wrote it; it holds in both index-sync modes (both fsync
// the segment in every group commit) and across a mode switch.
//
// The last segment's offset index is derived data: an index entry is
// written only after the segment bytes it points at were fsynced, so
// after its plausible prefix its entries are judged against the walk —
// kept when they agree, rebuilt when zero or garbage (a lost index page
// before a persisted one), and refused only when one points at a valid
// entry the walk does not put there. Sealed segments keep the strict rule:
// their index was fsynced before the next segment existed.
//
// The residual risk, the trade PostgreSQL makes at the end of its WAL:
// damage to acknowledged bytes that lies within DamageWindow of the end of
// the data cannot be told from a torn group commit and is cut with
// whatever follows it — logged and counted. The walk after the index is
// as long as the index lags: in lazy mode the writer fsyncs the index once
// its unsynced entries cover LazyIndexSyncBytes (4 MiB), so a crash leaves
// a walk of about that plus one group; zeros after E are skipped a window
// at a time, never byte by byte.
//
// A chain may start at any offset: retention deletes whole segments from
// the head, and the log start offset (StartOffset) is the base of the first
// segment that remains. Files a crash can leave: a lone empty .mmm at the
// tail gets its .idx created (an interrupted rotation completes); a lone
// empty .idx at the tail is removed; a first segment (not the last) with
// only one of its two files is an interrupted retention deletion, finished
// by removing the other file (the chain then starts at the next segment);
// a lone non-empty file at the tail, or a missing file anywhere else, is
// CORRUPT. Leftover *.tmp files are removed; other unknown files are logged
// and left alone.
//
// On corruption Open returns a *contract.CorruptionError naming the topic, file, byte
// position and offset, and no file is modified: every decision is planned
// before anything is applied. Verify (verify.go) additionally reads every
// entry and CRC for `mmmq verify`.
//
// Entries in the middle of the log are not read at startup; a CRC mismatch
// there is found at read time as a *contract.CorruptionError for that one offset,
// which the dispatcher logs and skips.
//
// # Incarnation id (incarnation.go)
//
// <topic>/incarnation holds 32 hex digits and a newline: a random id made
// when the topic directory is created, written tmp + fsync + rename + dir
// fsync before the first segment exists, so no message is acknowledged
// without it. A topic without the file (data older than incarnation ids)
// gets one when it opens; a garbled file refuses the topic (CORRUPT, files
// untouched). A topic deleted and created again starts at offset 0 under a
// new id.
//
// # Unfinished creation (unfinished.go)
//
// Before a new topic's incarnation file and first segment exist, a crash
// or a failed write can leave only its directory, empty or holding
// incarnation.tmp; OpenExisting removes exactly that at startup. A topic
// directory that holds neither the incarnation file nor a segment but
// anything else was not left by a creation: Open refuses it (a
// *contract.CorruptionError with no byte position or offset) and writes nothing.
//
// # Topic deletion (delete.go)
//
// DeleteTopicDir renames <root>/<topic> to <root>/.deleting-<16 hex>, a
// name that is never a topic, fsyncs the root, then removes the renamed
// directory and fsyncs the root again. A crash before the root fsync may
// leave the whole topic under its name; after it, a .deleting- directory
// that FinishDeletions removes at the next start, before any topic opens.
// Either way the topic is whole or absent, never partly there.
//
// # Retention (retention.go)
//
// ApplyRetention deletes whole sealed segments from the head, oldest first,
// never the active one: by size (.mmm + .idx bytes over a limit) or by age
// (the newest entry's stored timestamp older than a limit), never past a
// keepFrom offset. Per segment: publish the segment list without it (the
// start offset moves; a read below it is contract.ErrOffsetExpired, 410
// OFFSET_EXPIRED), evict its pair from the cache (a reader pinning it reads
// on from the unlinked files; one that reopens it after the unlink gets
// contract.ErrOffsetExpired, not an I/O error), remove the .idx (hook
// BetweenSegmentUnlinks), remove the .mmm, fsync the directory. So at any
// crash only the first remaining segment can be half deleted, which repair
// finishes.
//
// # Checkpoints (checkpoint.go)
//
// 8 bytes, int64 BE "next offset", overwritten in place and fsynced on every
// commit. Missing → 0; wrong size or negative → 0 with an error log (at-least-
// once: redeliver, never skip); beyond the log end → clamped with a warning.
//
// # Finished offsets (finished.go, finished_format.go)
//
// A checkpoint is the contiguous prefix of finished messages; a dispatcher
// with ordering "key" also finishes later messages of other keys while one
// key is parked (contract.FinishedRecorder). Those are kept beside the
// checkpoint in <name>.finished, which exists only while some are
// recorded. The 8-byte checkpoint file is unchanged. Records are appended:
//
//	+-----------+-----------+------------------------------------------+
//	| length    | CRC32C    | body                                     |
//	| uint32 BE | uint32 BE | length bytes, at most 4096               |
//	+-----------+-----------+------------------------------------------+
//	body = 0x01 (kind: finished ranges) | uvarint count (>= 1)
//	       | count × (uvarint lo, uvarint length (>= 1))
//	lo of the first range absolute, of each later one minus the previous
//	range's end; CRC over the body.
//
//	body = 0x02 (kind: delivery counts) | uvarint count (>= 1)
//	       | count × (uvarint offset, uvarint n (1 .. 2³²-1))
//	the message at offset was handed out n times; the first offset
//	absolute, each later one minus the previous offset minus 1 (strictly
//	ascending). Any other kind is invalid.
//
// The finished set is the union of every kind-1 record. The delivery
// count of an offset (a shared consumer group's, contract.DeliveryRecorder:
// how many times a message past the checkpoint that is not finished was
// handed out) is the one of the last kind-2 record in the file that holds
// it, and a finished offset has none, whatever the order of the records.
//
// RecordFinished and RecordDeliveries append one record per
// MaxFinishedRecordBody of ranges or counts and fsync after each, so only
// the last append can be unsynced at a power loss (the first record of a
// new file also fsyncs the checkpoints directory). A later count of an
// offset replaces the earlier one; RecordFinished forgets the counts of the
// offsets it finishes. Commit(next) forgets the ranges and counts below
// next in memory only; the file's stale ones are ignored when it is read.
// A Commit that leaves neither a range nor a count removes the file
// (remove, directory fsync) once it is past FinishedCompactBytes; under it
// the file stays, all stale, so that a reader that keeps up does not
// create and remove it for every message; a file past FinishedCompactBytes (1 MiB)
// whose live ranges and counts encode to under a quarter of it is
// rewritten with them (tmp, fsync, rename, directory fsync), and so is one
// whose last write failed (its state is then unknown), before the next
// append. A Commit that moves the offset back rewrites it first, so that
// stale ranges and counts never come back above the new offset.
// ClearFinished (an operator's seek) removes it durably: every range and
// every count is forgotten.
//
// Recovery on open follows the crash rule of the segments (below the last
// completed fsync nothing may change): at the first invalid record, byte E,
//
//	the file ends within E + FinishedDamageWindow   → a torn last append: cut at
//	  (4104 bytes: one record with its header)        E, fsync, warning
//	more bytes follow                               → fsynced data damaged: error
//	                                                  log naming file and byte,
//	                                                  the file renamed to
//	                                                  <name>.finished.corrupt, a
//	                                                  fresh one written from the
//	                                                  valid records before E
//
// Either way only marks are lost, so messages are delivered again, never
// skipped; a count can lose only what the cut append or the records from
// the damage on held, and a count acknowledged before the last completed
// fsync is never lowered. Ranges and counts below the checkpoint's offset
// are ignored; ranges and counts at or past the log's end are dropped and
// the file rewritten without them (new messages will take those offsets).
// Checkpoint.FinishedRecovery says what was done. `mmmq verify` checks
// every record of every .finished file and reports what the next open
// would do.
//
// # Group mode (groupmode.go)
//
//	checkpoints/<name>.mode   exactly "shared\n" (7 bytes) or "exclusive\n" (10 bytes)
//
// A consumer group's mode (contract.GroupModer), fixed by its first use.
// SetGroupMode writes <name>.mode.tmp, fsyncs it, renames it over
// <name>.mode and fsyncs the checkpoints directory (and the topic
// directory for a new file), so a power loss leaves the old mode or the
// new one; setting the stored mode again writes nothing. No file: the
// group is exclusive when <name>.checkpoint exists (stored before modes
// existed, or a dispatcher's), and never used when not. Any other content
// is an error naming the file, from GroupMode and SetGroupMode alike: a
// mode is never guessed, and `mmmq verify` reports the file.
package storage
