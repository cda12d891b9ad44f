package storage

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// RepairReport is what repair (the per-topic startup check run by Open)
// found in one topic and what it did (or, when checking only, would do) to
// bring it to the last consistent state: what the offset index vouches
// for, plus the valid entries of the last segment it does not list yet. Counts are in
// entries, sizes in bytes; the JSON field names are part of `mmmq verify
// --json` output.
type RepairReport struct {
	Topic          string `json:"topic"`
	Segments       int    `json:"segments"`
	Entries        int64  `json:"entries"`        // the high watermark after repair
	CutIndexBytes  int64  `json:"cutIndexBytes"`  // torn or invalid trailing index bytes removed
	CutEntries     int64  `json:"cutEntries"`     // trailing index entries removed (never acknowledged)
	TruncatedBytes int64  `json:"truncatedBytes"` // torn segment bytes beyond the last valid entry removed
	// ReindexedEntries counts the last segment's entries that were valid
	// in the segment but missing from its offset index (a lazily synced
	// index, or a crash between the two fsyncs) and were indexed again.
	ReindexedEntries int64 `json:"reindexedEntries"`
	// CutValidEntries counts CRC-valid entries of the last segment that
	// lay after its first invalid position, within DamageWindow of it (a
	// torn group commit whose later pages reached the disk and an earlier
	// one did not), and were cut with it. Their group's fsync had not
	// completed, so they were not acknowledged — unless acknowledged bytes
	// were damaged within DamageWindow of the end of the data, which
	// recovery cannot tell apart (the residual risk). Their bytes are part
	// of TruncatedBytes.
	CutValidEntries int64 `json:"cutValidEntries"`
	// ZeroTailBytes counts the zero bytes cut from the ends of the last
	// segment's .mmm and .idx: the tail a broker that preallocates
	// (mmmq.broker.storage.preallocate) leaves when it does not close
	// cleanly, or zeros a crash left after the data. They are not part
	// of TruncatedBytes, CutIndexBytes or CutEntries: no entry was there.
	ZeroTailBytes int64    `json:"zeroTailBytes,omitempty"`
	Removed       []string `json:"removed,omitempty"`
	// InterruptedRetention names the lone file of a first segment that a
	// crash left half deleted by retention, which repair removes
	// (finishing the deletion); empty when there is none.
	InterruptedRetention string   `json:"interruptedRetention,omitempty"`
	Actions              []string `json:"actions,omitempty"` // one line per change, for logs and `mmmq verify`
	zeroActs             int      // of Actions, those cutting a zero tail
}

// zeroTail reports whether cutting zero tails is all repair would do.
func (r RepairReport) zeroTail() bool {
	return r.ZeroTailBytes > 0 && len(r.Actions) == r.zeroActs
}

// Clean reports whether repair found nothing to change.
func (r RepairReport) Clean() bool { return len(r.Actions) == 0 }

// repairDir runs repair of the topic in dir in three steps, the shape of
// etcd's wal repair: scan (repair_scan.go) lists the directory, opens the
// files and reads the offset indexes; plan (repair_plan.go) decides, per
// segment and without writing anything, what to keep or refuses the topic
// with a *contract.CorruptionError; apply (repair_apply.go) truncates, creates and
// removes files and fsyncs them, and runs only when apply is true and no
// segment was refused, so a refused topic keeps every file untouched.
//
// Scan and plan alternate segment by segment, in offset order, so the first
// problem in the chain is the one reported; the files of one segment at a
// time are open. The segments come back with their files closed (Open opens
// the last one's, Verify and Dump each one's as they read it). With
// apply=false nothing is modified: the segments are the ones apply would
// keep (the last may lack its .idx, for a rotation to complete) and the
// report says what would be done. A missing dir returns no segments and no
// error.
func repairDir(fsys vfs.FS, dir, topic string, o Options, apply bool) ([]*segment, RepairReport, error) {
	rep := RepairReport{Topic: topic}
	d, err := scanDir(fsys, dir)
	if vfs.IsNotExist(err) {
		return nil, rep, nil
	}
	if err != nil {
		return nil, rep, fmt.Errorf("list topic dir %s: %w", dir, err)
	}
	log := o.Logger.With(zap.String("topic", topic))
	d.logUnknown(log)
	pl := &planner{topic: topic, rep: &rep}
	plans, err := pl.planSegments(fsys, dir, d)
	if err != nil {
		return nil, rep, err
	}
	pl.planTmps(d.tmps)
	var segs []*segment
	if apply {
		if segs, err = applyPlans(fsys, dir, plans, d.tmps, &rep, !o.FilesystemSynced); err != nil {
			return nil, rep, err
		}
	} else {
		segs = keptSegments(plans)
	}
	rep.Segments = len(segs)
	if len(segs) > 0 {
		last := segs[len(segs)-1]
		rep.Entries = last.base + last.count
	}
	switch {
	case !apply || rep.Clean():
	case rep.zeroTail():
		// What a preallocating broker that did not close cleanly leaves:
		// nothing torn, nothing lost.
		log.Info("recovery cut the zero tail of the active segment (preallocated by a broker that did not close cleanly)",
			zap.Strings("actions", rep.Actions), zap.Int64("zero-tail-bytes", rep.ZeroTailBytes))
	default:
		log.Warn("recovery changed the topic: cut what a crash left torn, indexed again what the offset index lacked",
			zap.Strings("actions", rep.Actions), zap.Int64("cut-entries", rep.CutEntries),
			zap.Int64("truncated-bytes", rep.TruncatedBytes), zap.Int64("reindexed-entries", rep.ReindexedEntries),
			zap.Int64("cut-valid-entries", rep.CutValidEntries), zap.Int64("cut-index-bytes", rep.CutIndexBytes),
			zap.Int64("zero-tail-bytes", rep.ZeroTailBytes))
	}
	return segs, rep, nil
}
