package storage

import (
	"errors"
	"fmt"
	"io"
	"slices"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// The finished offsets of a checkpoint (contract.FinishedRecorder): the
// offsets past the committed one that a dispatcher with ordering "key"
// finished while an earlier message (of a parked key) is not.
//
//	RecordFinished(rs)  validate (Lo < Hi, Lo >= Offset) → append records to
//	                    <name>.finished (MaxFinishedRecordBody each) → fsync
//	                    after each (the first creates the file and fsyncs the
//	                    checkpoints directory) → claim them in memory
//	Commit(next)        the 8-byte checkpoint as before, then forget the
//	                    ranges below next (memory only: the file's stale
//	                    ranges are ignored when read); none left and the file
//	                    over FinishedCompactBytes → remove it durably (under
//	                    it the file stays: a reader that keeps up does not
//	                    create and remove it per message); file over
//	                    FinishedCompactBytes and live
//	                    ranges under a quarter of it → rewrite it (tmp, fsync,
//	                    rename, directory fsync). A Commit that moves the
//	                    offset back first rewrites the file to the live
//	                    ranges, so that stale ones never come back to life.
//	ClearFinished       remove the file durably, forget everything
//	OpenCheckpoint      read the file (see loadFinished for recovery)
//
// After any failed write the file's state on disk is not known (fsyncgate):
// the next RecordFinished rewrites it whole instead of appending to it.
const (
	// FinishedCompactBytes is the size past which a .finished file is
	// rewritten when its live ranges encode to less than a quarter of it.
	// Not a format rule: it may change.
	FinishedCompactBytes = 1 << 20
)

// FinishedRecovery is what OpenCheckpoint did to the checkpoint's
// .finished file (see (*Checkpoint).FinishedRecovery).
type FinishedRecovery struct {
	// CutBytes is the bytes of a torn last append cut from the file's end
	// (crash damage: logged as a warning), at CutAt.
	CutBytes int64
	// CutAt is the byte position the file was cut at (valid when CutBytes > 0).
	CutAt int64
	// CorruptAt is the byte position of an invalid record followed by more
	// than FinishedDamageWindow bytes (damage to fsynced data: logged as an
	// error; the file was set aside as <name>.finished.corrupt and a fresh
	// one written from the valid records before it), or -1.
	CorruptAt int64
	// Reason says why the record at CutAt or CorruptAt is invalid.
	Reason string
	// DroppedPastEnd: ranges or delivery counts at or past the log's end
	// were dropped (and the file rewritten without them), so that new
	// messages are neither skipped nor counted as delivered.
	DroppedPastEnd bool
}

var _ contract.FinishedRecorder = (*Checkpoint)(nil)

// finishedPath is <topic>/checkpoints/<name>.finished.
func (c *Checkpoint) finishedPath() string {
	return c.path[:len(c.path)-len(CheckpointExt)] + FinishedExt
}

// FinishedRecovery returns what OpenCheckpoint did to the .finished file:
// nothing (FinishedRecovery{CorruptAt: -1}), a torn append cut (CutBytes >
// 0), a damaged file set aside (CorruptAt >= 0), ranges or delivery counts
// past the log's end dropped (DroppedPastEnd). Everything it did was also logged.
func (c *Checkpoint) FinishedRecovery() FinishedRecovery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.finRec
}

// Finished returns the recorded offsets at or past Offset(), as ascending,
// disjoint, non-adjacent ranges (a copy).
func (c *Checkpoint) Finished() []contract.OffsetRange {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.fin)
}

// RecordFinished durably adds rs: each range must have Lo < Hi and Lo >=
// Offset() (else an error and nothing is written). It appends records to
// <name>.finished, at most MaxFinishedRecordBody body bytes each, fsyncing
// the file after each one (the first record of a new file also fsyncs the
// checkpoints directory), and returns once all are durable. On error the
// ranges are not claimed by Finished (some may be stored: they are then
// found again after a restart, which only skips offsets that were
// finished). After Close it returns an error wrapping contract.ErrClosed.
func (c *Checkpoint) RecordFinished(rs []contract.OffsetRange) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("record finished %s: %w", c.name, contract.ErrClosed)
	}
	for _, r := range rs {
		if r.Lo >= r.Hi || r.Lo < c.offset {
			return fmt.Errorf("record finished %s: range [%d, %d) is empty or below the checkpoint's offset %d", c.name, r.Lo, r.Hi, c.offset)
		}
	}
	add := normalizeRanges(rs)
	union := mergeRanges(c.fin, add)
	if slices.Equal(union, c.fin) {
		return nil // nothing new
	}
	// Finished offsets have no delivery count: the kind-1 record makes
	// them finished in the file too, where a finished offset's count is
	// not live.
	dlv := c.dlv
	if len(dlv) > 0 {
		dlv = dropFinishedDeliveries(dlv, add)
	}
	if c.finBroken {
		if err := c.rewriteFinished(union, dlv); err != nil {
			return err
		}
		c.fin, c.dlv = union, dlv
		return nil
	}
	if err := c.appendFinished(encodeFinished(add), c.hooks != nil && c.hooks.SkipFinishedSync); err != nil {
		c.finBroken = true
		return err
	}
	c.fin, c.dlv = union, dlv
	c.maybeCompact()
	return nil
}

// appendFinished writes recs at the end of the file, fsyncing after each
// (unless skipSync, a test's negative control).
func (c *Checkpoint) appendFinished(recs [][]byte, skipSync bool) error {
	p := c.finishedPath()
	var f vfs.File
	var err error
	created := !c.finExists
	if created {
		if err := c.fs.MkdirAll(c.dir); err != nil {
			return fmt.Errorf("create checkpoint dir %s: %w", c.dir, err)
		}
		f, err = c.fs.Create(p)
	} else {
		f, err = c.fs.OpenRW(p)
	}
	if err != nil {
		return fmt.Errorf("open finished offsets %s: %w%s", p, err, fdHint(err))
	}
	defer f.Close()
	size := c.finSize
	if created {
		size = 0
	}
	for i, rec := range recs {
		if _, err := f.WriteAt(rec, size); err != nil {
			return fmt.Errorf("write finished offsets %s: %w", p, err)
		}
		if !skipSync {
			if err := f.Sync(); err != nil {
				return fmt.Errorf("sync finished offsets %s: %w", p, err)
			}
		}
		size += int64(len(rec))
		if created && i == 0 {
			if err := c.fs.SyncDir(c.dir); err != nil {
				return fmt.Errorf("sync checkpoint dir %s: %w", c.dir, err)
			}
			if err := c.fs.SyncDir(c.topicDir()); err != nil {
				return fmt.Errorf("sync topic dir %s: %w", c.topicDir(), err)
			}
			c.finExists = true
		}
		c.finSize = size
	}
	return nil
}

// rewriteFinished replaces the file with one holding exactly the ranges rs
// and the delivery counts ds (tmp, fsync, rename, directory fsync), or
// removes it durably when both are empty. On error the file's state is
// unknown (finBroken).
func (c *Checkpoint) rewriteFinished(rs []contract.OffsetRange, ds []contract.DeliveryCount) error {
	if len(rs) == 0 && len(ds) == 0 {
		return c.removeFinished()
	}
	data := encodeLive(rs, ds)
	if err := c.fs.MkdirAll(c.dir); err != nil {
		c.finBroken = true
		return fmt.Errorf("create checkpoint dir %s: %w", c.dir, err)
	}
	if err := vfs.ReplaceFile(c.fs, c.finishedPath(), data, vfs.ReplaceOptions{}); err != nil {
		c.finBroken = true
		return fmt.Errorf("rewrite finished offsets: %w", err)
	}
	if !c.finExists {
		// A new name in the checkpoints directory, which may be new too.
		if err := c.fs.SyncDir(c.topicDir()); err != nil {
			c.finBroken = true
			return fmt.Errorf("sync topic dir %s: %w", c.topicDir(), err)
		}
	}
	c.finExists, c.finSize, c.finBroken = true, int64(len(data)), false
	c.finCheckSize, c.finCheckRanges = 2*c.finSize, (len(rs)+len(ds))/2
	return nil
}

// removeFinished removes the file (and a leftover tmp) durably. A missing
// file is no error.
func (c *Checkpoint) removeFinished() error {
	p := c.finishedPath()
	removed := false
	for _, name := range []string{p, p + vfs.TmpExt} {
		err := c.fs.Remove(name)
		switch {
		case err == nil:
			removed = true
		case !vfs.IsNotExist(err):
			c.finBroken = true
			return fmt.Errorf("remove finished offsets %s: %w", name, err)
		}
	}
	if removed || c.finExists || c.finBroken {
		if err := c.fs.SyncDir(c.dir); err != nil && !vfs.IsNotExist(err) {
			c.finBroken = true
			return fmt.Errorf("sync checkpoint dir %s: %w", c.dir, err)
		}
	}
	c.finExists, c.finSize, c.finBroken = false, 0, false
	return nil
}

// ClearFinished durably forgets every recorded offset and every delivery
// count: it removes <name>.finished (a missing file is no error) and
// fsyncs the checkpoints directory. On error Finished and Deliveries keep
// theirs and the file's state is unknown (the next RecordFinished or
// RecordDeliveries rewrites it). After Close it returns an error wrapping
// contract.ErrClosed.
func (c *Checkpoint) ClearFinished() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("clear finished %s: %w", c.name, contract.ErrClosed)
	}
	if err := c.removeFinished(); err != nil {
		return err
	}
	c.fin, c.dlv = nil, nil
	return nil
}

// afterCommit forgets the ranges and delivery counts below c.offset, just
// committed, and removes the file when neither is left and it is past
// c.compactBytes (or its state is not known), or compacts it.
// The commit is already durable, so a failure here is logged, not
// returned: the file then holds stale ranges and counts, which are ignored
// when read, and the next RecordFinished or RecordDeliveries rewrites it.
func (c *Checkpoint) afterCommit() {
	c.fin = trimRanges(c.fin, c.offset)
	c.dlv = trimDeliveries(c.dlv, c.offset)
	if len(c.fin) == 0 && len(c.dlv) == 0 {
		// Nothing live: every record in the file is stale (below the
		// offset: ignored when read, dropped by a rewrite). The file is
		// kept until it passes c.compactBytes, so that a reader that
		// keeps up does not create and remove it, with a directory fsync
		// each, for every message it finishes past a gap.
		if c.finBroken || c.finExists && c.finSize > c.compactBytes {
			if err := c.removeFinished(); err != nil {
				c.log.Warn("remove finished offsets after commit", zap.String("file", c.finishedPath()), zap.Error(err))
			}
		}
		return
	}
	c.maybeCompact()
}

// maybeCompact rewrites the file when it is past c.compactBytes and its
// live ranges and delivery counts encode to less than a quarter of it. It
// looks at most once per doubling of the file or halving of the live
// entries (ranges plus counts) since the last look.
func (c *Checkpoint) maybeCompact() {
	entries := len(c.fin) + len(c.dlv)
	if !c.finExists || c.finSize <= c.compactBytes || (c.finSize < c.finCheckSize && entries > c.finCheckRanges) {
		return
	}
	c.finCheckSize, c.finCheckRanges = 2*c.finSize, entries/2
	if live := encodedFinishedSize(c.fin) + encodedDeliveriesSize(c.dlv); live*4 >= c.finSize {
		return
	}
	old := c.finSize
	if err := c.rewriteFinished(c.fin, c.dlv); err != nil {
		c.log.Warn("compact finished offsets", zap.String("file", c.finishedPath()), zap.Error(err))
		return
	}
	c.log.Info("compacted finished offsets", zap.String("file", c.finishedPath()),
		zap.Int64("old-bytes", old), zap.Int64("new-bytes", c.finSize), zap.Int("ranges", len(c.fin)), zap.Int("delivery-counts", len(c.dlv)))
}

// loadFinished reads <name>.finished at open, after the offset is decided,
// and recovers it by the package's power-loss rule: only the bytes of the
// last append (after the last completed fsync) can be damaged, in any
// subset of sectors, and an append is at most FinishedDamageWindow bytes.
// At the first invalid record, at byte E:
//
//	file ends within E + FinishedDamageWindow → a torn last append: cut at E,
//	                                            fsync, warn
//	more bytes after it                       → fsynced data damaged: error
//	                                            log, file renamed to
//	                                            <name>.finished.corrupt, a
//	                                            fresh file written from the
//	                                            valid records before E
//
// (losing marks only means redelivery, never a skip; losing a delivery
// count can only lose what the torn append or the damage held). Ranges and
// delivery counts below the offset are ignored, and so are the counts of
// finished offsets; ranges and counts at or past logEnd are dropped and
// the file rewritten without them, since those offsets will be new
// messages.
func (c *Checkpoint) loadFinished(logEnd int64) error {
	c.finRec = FinishedRecovery{CorruptAt: -1}
	p := c.finishedPath()
	// A leftover of an interrupted rewrite: garbage (the rename never
	// happened, or the file it would have replaced is complete).
	if err := c.fs.Remove(p + vfs.TmpExt); err != nil && !vfs.IsNotExist(err) {
		return fmt.Errorf("remove %s: %w", p+vfs.TmpExt, err)
	}
	f, err := c.fs.Open(p)
	if vfs.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open finished offsets %s: %w%s", p, err, fdHint(err))
	}
	data, err := readWhole(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("read finished offsets %s: %w", p, err)
	}
	c.finExists, c.finSize = true, int64(len(data))
	s := scanFinished(data)
	live := trimRanges(s.ranges, c.offset)
	dlv := dropFinishedDeliveries(trimDeliveries(s.counts, c.offset), live)
	var rewrite bool
	if past := trimRangesAbove(live, logEnd); len(past) != len(live) || !slices.Equal(past, live) {
		c.log.Warn("finished offsets at or past the end of the log dropped (they would skip new messages)",
			zap.String("file", p), zap.Int64("log-end", logEnd))
		live, rewrite = past, true
		c.finRec.DroppedPastEnd = true
	}
	if past := trimDeliveriesAbove(dlv, logEnd); len(past) != len(dlv) {
		c.log.Warn("delivery counts at or past the end of the log dropped (they would count new messages)",
			zap.String("file", p), zap.Int64("log-end", logEnd))
		dlv, rewrite = past, true
		c.finRec.DroppedPastEnd = true
	}
	switch {
	case s.end == s.size:
	case s.torn():
		c.log.Warn("finished offsets: cut a torn last append (crash damage; those offsets may be delivered again)",
			zap.String("file", p), zap.Int64("pos", s.end), zap.Int64("cut-bytes", s.size-s.end), zap.String("reason", s.reason))
		c.finRec.CutAt, c.finRec.CutBytes, c.finRec.Reason = s.end, s.size-s.end, s.reason
		if !rewrite {
			if err := c.truncateFinished(s.end); err != nil {
				return err
			}
		}
	default:
		aside := c.freeAsideName(p + FinishedCorruptExt)
		c.log.Error("finished offsets file is corrupt (damage before its last append); set aside, keeping the valid records before the damage (the offsets after it will be delivered again)",
			zap.String("file", p), zap.Int64("pos", s.end), zap.Int64("size", s.size), zap.String("reason", s.reason),
			zap.String("set-aside", aside))
		c.finRec.CorruptAt, c.finRec.Reason = s.end, s.reason
		if err := c.fs.Rename(p, aside); err != nil {
			return fmt.Errorf("set aside corrupt finished offsets %s: %w", p, err)
		}
		if err := c.fs.SyncDir(c.dir); err != nil {
			return fmt.Errorf("sync checkpoint dir %s: %w", c.dir, err)
		}
		c.finExists, c.finSize = false, 0
		rewrite = true
	}
	if rewrite {
		if err := c.rewriteFinished(live, dlv); err != nil {
			return err
		}
	}
	c.fin, c.dlv = live, dlv
	c.finCheckSize, c.finCheckRanges = 0, len(live)+len(dlv)
	return nil
}

// truncateFinished cuts the file at size and fsyncs it.
func (c *Checkpoint) truncateFinished(size int64) error {
	p := c.finishedPath()
	f, err := c.fs.OpenRW(p)
	if err != nil {
		return fmt.Errorf("open finished offsets %s: %w%s", p, err, fdHint(err))
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("truncate finished offsets %s: %w", p, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync finished offsets %s: %w", p, err)
	}
	c.finSize = size
	return nil
}

// readWhole reads the whole of f.
func readWhole(f vfs.File) ([]byte, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); err != nil && !(errors.Is(err, io.EOF) && int64(n) == size) {
		return nil, err
	}
	return b, nil
}

// normalizeRanges returns rs (any order, overlapping or not, each Lo < Hi)
// sorted and merged: ascending, disjoint, non-adjacent.
func normalizeRanges(rs []contract.OffsetRange) []contract.OffsetRange {
	s := slices.Clone(rs)
	slices.SortFunc(s, func(a, b contract.OffsetRange) int {
		switch {
		case a.Lo < b.Lo:
			return -1
		case a.Lo > b.Lo:
			return 1
		}
		return 0
	})
	out := s[:0]
	for _, r := range s {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			continue
		}
		out = append(out, r)
	}
	return out
}

// mergeRanges returns the union of a and b (each ascending and disjoint)
// as a new ascending, disjoint, non-adjacent slice.
func mergeRanges(a, b []contract.OffsetRange) []contract.OffsetRange {
	out := make([]contract.OffsetRange, 0, len(a)+len(b))
	add := func(r contract.OffsetRange) {
		if n := len(out); n > 0 && r.Lo <= out[n-1].Hi {
			out[n-1].Hi = max(out[n-1].Hi, r.Hi)
			return
		}
		out = append(out, r)
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		if j == len(b) || (i < len(a) && a[i].Lo <= b[j].Lo) {
			add(a[i])
			i++
		} else {
			add(b[j])
			j++
		}
	}
	return out
}

// trimRanges drops the offsets below next from rs (ascending, disjoint),
// trimming a range that straddles it. It reuses rs's array.
func trimRanges(rs []contract.OffsetRange, next int64) []contract.OffsetRange {
	i := 0
	for i < len(rs) && rs[i].Hi <= next {
		i++
	}
	rs = rs[i:]
	if len(rs) > 0 && rs[0].Lo < next {
		rs[0].Lo = next
	}
	if len(rs) == 0 {
		return nil
	}
	return rs
}

// trimRangesAbove returns rs (ascending, disjoint) without the offsets at
// or past end, as a new slice.
func trimRangesAbove(rs []contract.OffsetRange, end int64) []contract.OffsetRange {
	var out []contract.OffsetRange
	for _, r := range rs {
		if r.Lo >= end {
			break
		}
		r.Hi = min(r.Hi, end)
		out = append(out, r)
	}
	return out
}

// freeAsideName is name, or name.1, name.2, ... the first that does not
// exist: a second damaged file never replaces the evidence of the first.
func (c *Checkpoint) freeAsideName(name string) string {
	for i := 0; ; i++ {
		n := name
		if i > 0 {
			n = fmt.Sprintf("%s.%d", name, i)
		}
		f, err := c.fs.Open(n)
		if vfs.IsNotExist(err) {
			return n
		}
		if err == nil {
			f.Close()
		}
		if i >= 1000 {
			return n // give up looking: replace the last one
		}
	}
}
