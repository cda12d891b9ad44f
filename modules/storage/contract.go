package storage

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Entry is one message read back from the log (contract.Entry).
type Entry = contract.Entry

// Stats is a point-in-time summary of a log (contract.Stats).
type Stats = contract.Stats

// *Log is the local backend of the storage seam, with the optional
// capabilities it has (the table in modules/contract/capabilities.go): it
// is not a WorkLeaser (one broker per data directory) and its checkpoints
// need no reload, epoch or seek.
var (
	_ contract.Log               = (*Log)(nil)
	_ contract.Incarnationer     = (*Log)(nil)
	_ contract.CheckpointLister  = (*Log)(nil)
	_ contract.CheckpointRemover = (*Log)(nil)
	_ contract.Reopener          = (*Log)(nil)
	_ contract.FailureReporter   = (*Log)(nil)
	_ contract.Retainer          = (*Log)(nil)
	_ contract.Checkpoint        = (*Checkpoint)(nil)
	_ contract.CheckpointExister = (*Checkpoint)(nil)
)

// StartOffset is the log start offset: the base offset of the first
// segment (0 until retention deletes whole segments from the head).
func (l *Log) StartOffset() int64 { return (*l.segs.Load())[0].base }

// OffsetAt returns the first offset whose stored timestamp (Unix ms, the
// message's "timestamp" member) is at or after t, or HighWatermark() when
// there is none. It binary-searches the offsets, reading O(log n) entries;
// timestamps are taken when a publish is decoded, so concurrent producers
// may store them a few milliseconds out of order, and the answer is then
// within those few milliseconds of the exact one. A message without a
// timestamp (written by another client) counts as older than any t. A
// corrupt entry on the search path returns its *contract.CorruptionError.
func (l *Log) OffsetAt(t time.Time) (int64, error) {
	return contract.SearchTime(l, t)
}

// Checkpoints returns the names of the checkpoint files of this topic
// (<topic>/checkpoints/<name>.checkpoint), sorted; entries that are not a
// checkpoint file with a valid name (contract.ValidCheckpointName) are left out.
// A checkpoint opened but never committed has no file and is not listed.
// Errors: contract.ErrClosed after Close, or the directory listing's I/O error.
func (l *Log) Checkpoints() ([]string, error) {
	if l.closed.Load() {
		return nil, contract.ErrClosed
	}
	dir := filepath.Join(l.dir, CheckpointDir)
	ents, err := l.fs.List(dir)
	if vfs.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list checkpoints %s: %w", dir, err)
	}
	var names []string
	seen := map[string]bool{}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name, CheckpointExt)
		if !ok {
			// A consumer group whose mode is stored is listed before
			// its first commit: a shared group may have acks recorded
			// past offset 0 and nothing committed yet.
			name, ok = strings.CutSuffix(e.Name, ModeExt)
		}
		if e.IsDir || !ok || contract.ValidCheckpointName(name) != nil || seen[name] {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// OpenCheckpoint is Checkpoint behind the contract.Checkpoint interface.
func (l *Log) OpenCheckpoint(name string) (contract.Checkpoint, error) {
	cp, err := l.Checkpoint(name)
	if err != nil {
		return nil, err
	}
	return cp, nil
}

// Incarnation is the topic's incarnation id (see IncarnationFile): 32 hex
// digits, made when the topic was created; a topic deleted and created
// again has a new one.
func (l *Log) Incarnation() string { return l.incarnation }
