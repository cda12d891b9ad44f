package topicqueue

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
)

// Report sums up a startup recovery (OpenAll).
type Report struct {
	Topics      int                    // topics opened
	Changed     []storage.RepairReport // topics whose tail was cut or truncated
	Quarantined map[string]error       // topics refused and excluded
	Skipped     []string               // store entries that are not topics
	// FinishedDeletions are the directories of interrupted topic
	// deletions removed before the topics opened.
	FinishedDeletions []string
	Took              time.Duration
}

// OpenAll opens every topic of the backend (startup recovery: the
// original mmmq scans its data root and makes one TopicQueue per topic
// directory, each segment trimmed to its offset index). A topic refused as
// corrupt stops it with an error naming the topic, file, byte position and
// offset when policy is OnCorruptionFail (the default: the log-queue
// study refuses to start rather than skip records that may have been
// acknowledged), or is quarantined (Quarantined; publishing to it fails
// with ErrQuarantined) under OnCorruptionQuarantine. A directory
// under a topic name that holds neither a segment nor the incarnation id
// but other entries (storage.Open) is refused the same way, untouched; one
// holding only what an interrupted creation leaves is removed.
// Other errors (I/O) stop it. log receives one line per skipped entry or
// refused topic and a summary. On a backend shared by several broker nodes
// (a contract.TopicWatcher) it then follows the topics other nodes create and
// delete, until Close.
func (r *Registry) OpenAll(policy OnCorruption, log *zap.Logger) (Report, error) {
	start := time.Now()
	rep := Report{Quarantined: map[string]error{}}
	if d, ok := r.opts.Backend.(contract.TopicDeleter); ok {
		// A deletion a crash interrupted is finished before anything opens:
		// its topic was already renamed aside, so it is gone.
		removed, err := d.FinishDeletions()
		for _, name := range removed {
			log.Info("finished a topic deletion interrupted by a crash", zap.String("removed", name))
		}
		rep.FinishedDeletions = removed
		if err != nil {
			return rep, fmt.Errorf("recovery: %w", err)
		}
	}
	names, skipped, err := r.opts.Backend.Topics()
	if err != nil {
		return rep, err
	}
	for _, name := range skipped {
		rep.Skipped = append(rep.Skipped, name)
		if reservedDir(name) {
			log.Debug("passing over the broker's own directory", zap.String("name", name))
			continue
		}
		log.Warn("skipping directory that is not a topic", zap.String("name", name), zap.Error(contract.ValidateTopic(name)))
	}
	for _, name := range names {
		q, err := r.Open(name)
		var ce *contract.CorruptionError
		switch {
		case errors.As(err, &ce):
			log.Error("topic refused: corruption found by startup recovery; files left untouched", corruptionFields(ce, policy)...)
			if policy != OnCorruptionQuarantine {
				return rep, fmt.Errorf("recovery: %w (run `mmmq verify` for a full report; set mmmq.broker.storage.on-corruption: quarantine to serve the other topics)", ce)
			}
			r.Quarantine(name, ce)
			rep.Quarantined[name] = ce
			continue
		case errors.Is(err, storage.ErrUnfinishedTopic):
			log.Warn("removed a topic directory a failed or interrupted creation left (empty, or only incarnation.tmp: nothing was acknowledged in it)",
				zap.String("topic", name))
			continue
		case err != nil:
			return rep, fmt.Errorf("recovery: open topic %s: %w", name, err)
		}
		rep.Topics++
		if rl, ok := q.log.(RepairReporter); ok {
			if rr := rl.Repair(); !rr.Clean() {
				rep.Changed = append(rep.Changed, rr)
				r.mu.Lock()
				r.recovered.add(rr)
				r.mu.Unlock()
			}
		}
	}
	if err := r.watch(log); err != nil {
		return rep, err
	}
	rep.Took = time.Since(start)
	cuts := r.RecoveryCuts()
	log.Info("startup recovery finished", zap.Int("topics", rep.Topics), zap.Int("changed", len(rep.Changed)),
		zap.Int("quarantined", len(rep.Quarantined)), zap.Duration("took", rep.Took),
		zap.Int64("reindexed-entries", cuts.ReindexedEntries), zap.Int64("cut-index-entries", cuts.CutIndexEntries),
		zap.Int64("cut-valid-entries", cuts.CutValidEntries), zap.Int64("cut-segment-bytes", cuts.CutSegmentBytes),
		zap.Int64("cut-index-bytes", cuts.CutIndexBytes), zap.Int64("zero-tail-bytes", cuts.ZeroTailBytes))
	return rep, nil
}

// RecoveryCuts sums, over every topic startup recovery (OpenAll) changed,
// what it cut and indexed again: entries and bytes, for the log line that
// ends recovery and for metrics. Zero on a clean start or a backend whose
// logs report no repair (JetStream).
type RecoveryCuts struct {
	Topics           int64 // topics recovery changed
	ReindexedEntries int64 // entries indexed again from the last segment
	// CutIndexEntries are offset index entries removed: torn, zero or
	// garbage ones (rebuilt from the segment when their entries are
	// valid) and those of torn entries.
	CutIndexEntries int64
	// CutValidEntries are CRC-valid entries cut with a torn group commit
	// (after a hole, within one group commit of the end of the data).
	CutValidEntries int64
	CutSegmentBytes int64 // segment bytes truncated
	CutIndexBytes   int64 // offset index bytes removed
	// ZeroTailBytes are zero bytes cut from the ends of last segments'
	// files: preallocated tails (mmmq.broker.storage.preallocate) of a
	// broker that did not close cleanly, or zeros a crash left; no entry
	// was there. Not part of the two counts above.
	ZeroTailBytes int64
}

func (c *RecoveryCuts) add(rr storage.RepairReport) {
	c.Topics++
	c.ReindexedEntries += rr.ReindexedEntries
	c.CutIndexEntries += rr.CutEntries
	c.CutValidEntries += rr.CutValidEntries
	c.CutSegmentBytes += rr.TruncatedBytes
	c.CutIndexBytes += rr.CutIndexBytes
	c.ZeroTailBytes += rr.ZeroTailBytes
}

// RecoveryCuts returns what startup recovery cut and indexed again, summed
// over the topics it opened.
func (r *Registry) RecoveryCuts() RecoveryCuts {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.recovered
}

// corruptionFields are the log fields of a refused topic: pos and offset
// only when they apply (not -1).
func corruptionFields(ce *contract.CorruptionError, policy OnCorruption) []zap.Field {
	f := []zap.Field{zap.String("topic", ce.Topic), zap.String("file", ce.File)}
	if ce.Pos >= 0 {
		f = append(f, zap.Int64("pos", ce.Pos))
	}
	if ce.Offset >= 0 {
		f = append(f, zap.Int64("offset", ce.Offset))
	}
	return append(f, zap.String("reason", ce.Reason), zap.String("policy", string(policy)))
}

// reservedDir reports whether name is a directory the broker itself keeps
// beside the topics under the data root: the scheduler's
// (contract.ScheduledDir) or a topic deletion's (storage.DeletingPrefix).
// The start-up listing passes over them without a warning.
func reservedDir(name string) bool {
	return name == contract.ScheduledDir || strings.HasPrefix(name, storage.DeletingPrefix)
}
