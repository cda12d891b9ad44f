package storage

import (
	"bytes"
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// finTopic is the topic directory of the finished-offsets tests.
const finTopic = "t"

// finFS returns a MemFS holding the topic directory durably.
func finFS(t testing.TB) *vfs.MemFS {
	t.Helper()
	fsys := vfs.NewMem()
	if err := fsys.MkdirAll(finTopic); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir("/"); err != nil {
		t.Fatal(err)
	}
	return fsys
}

// finPath is the .finished file of checkpoint "d".
var finPath = path.Join(finTopic, CheckpointDir, "d"+FinishedExt)

func openFin(t testing.TB, fsys vfs.FS, logEnd int64) *Checkpoint {
	t.Helper()
	var log *zap.Logger
	if tt, ok := t.(*testing.T); ok {
		log = zaptest.NewLogger(tt)
	}
	c, err := OpenCheckpoint(fsys, finTopic, "d", logEnd, log)
	if err != nil {
		t.Fatalf("open checkpoint: %v", err)
	}
	return c
}

// dc is delivery counts from (offset, count) pairs.
func dc(pairs ...int64) []contract.DeliveryCount {
	var out []contract.DeliveryCount
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, contract.DeliveryCount{Offset: pairs[i], Count: uint32(pairs[i+1])})
	}
	return out
}

func rs(pairs ...int64) []contract.OffsetRange {
	var out []contract.OffsetRange
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, contract.OffsetRange{Lo: pairs[i], Hi: pairs[i+1]})
	}
	return out
}

func mustRecord(t testing.TB, c *Checkpoint, r []contract.OffsetRange) {
	t.Helper()
	if err := c.RecordFinished(r); err != nil {
		t.Fatalf("RecordFinished(%v): %v", r, err)
	}
}

func mustCommit(t testing.TB, c *Checkpoint, next int64) {
	t.Helper()
	if err := c.Commit(next); err != nil {
		t.Fatalf("Commit(%d): %v", next, err)
	}
}

func wantFinished(t testing.TB, c *Checkpoint, want []contract.OffsetRange, what string) {
	t.Helper()
	if got := c.Finished(); !slices.Equal(got, want) {
		t.Fatalf("%s: Finished() = %v, want %v", what, got, want)
	}
}

func fileExists(fsys *vfs.MemFS, p string) bool {
	_, err := fsys.ReadFile(p)
	return err == nil
}

// failFinishedOp makes every op of kind op on a .finished file of fsys
// fail, until the hook is cleared.
func failFinishedOp(fsys *vfs.MemFS, op vfs.Op) {
	fsys.SetHook(func(o vfs.Op, name string) error {
		if o == op && strings.HasSuffix(name, FinishedExt) {
			return errors.New("injected")
		}
		return nil
	})
}

// wantAppendedRecords checks .finished after one call appended more than
// one record holds: it scans valid to its end, holds at least three
// records, every record after the first was fsynced on its own since
// syncsBefore, and it is size bytes, as the encoded-size function sizer
// says.
func wantAppendedRecords(t *testing.T, fsys *vfs.MemFS, syncsBefore, size int64, sizer string) {
	t.Helper()
	data, err := fsys.ReadFile(finPath)
	if err != nil {
		t.Fatal(err)
	}
	s := scanFinished(data)
	if s.end != s.size || s.records < 3 {
		t.Fatalf("scan: %d records, end %d of %d (%s); want several valid records", s.records, s.end, s.size, s.reason)
	}
	if syncs := fsys.SyncCount() - syncsBefore; syncs != int64(s.records-1) {
		t.Fatalf("%d fsyncs for %d appended records, want one per record", syncs, s.records-1)
	}
	if int64(len(data)) != size {
		t.Fatalf("file %d bytes, %s says %d", len(data), sizer, size)
	}
}

// TestFinishedRoundTrip: recorded ranges are merged (adjacent and
// overlapping ones), survive a reopen and a power loss once
// RecordFinished returned, are trimmed by Commit (a straddling range cut,
// stale ranges in the file ignored on reopen); once a Commit leaves none
// the file stays while it is under the compaction size (nothing live comes
// back on a reopen) and is removed durably once past it.
func TestFinishedRoundTrip(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	wantFinished(t, c, nil, "new checkpoint")
	if fileExists(fsys, finPath) {
		t.Fatal(".finished exists before anything was recorded")
	}
	mustCommit(t, c, 3)
	mustRecord(t, c, rs(10, 12, 5, 7))
	wantFinished(t, c, rs(5, 7, 10, 12), "two ranges given out of order")
	mustRecord(t, c, rs(7, 10))
	wantFinished(t, c, rs(5, 12), "an adjacent range joins both")
	mustRecord(t, c, rs(3, 6, 11, 14, 20, 21))
	wantFinished(t, c, rs(3, 14, 20, 21), "overlapping ranges")
	mustRecord(t, c, rs(4, 5))
	wantFinished(t, c, rs(3, 14, 20, 21), "a range already recorded")

	crashed := fsys.Crash(vfs.CrashOptions{})
	c2 := openFin(t, crashed, 1000)
	if c2.Offset() != 3 {
		t.Fatalf("offset after power loss = %d, want 3", c2.Offset())
	}
	wantFinished(t, c2, rs(3, 14, 20, 21), "after a power loss")
	if r := c2.FinishedRecovery(); r != (FinishedRecovery{CorruptAt: -1}) {
		t.Fatalf("FinishedRecovery = %+v, want nothing done", r)
	}

	mustCommit(t, c, 8)
	wantFinished(t, c, rs(8, 14, 20, 21), "Commit(8) trims the straddling range")
	c3 := openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000)
	wantFinished(t, c3, rs(8, 14, 20, 21), "reopened after Commit(8): stale ranges ignored")

	mustCommit(t, c, 14)
	wantFinished(t, c, rs(20, 21), "Commit(14)")
	if !fileExists(fsys, finPath) {
		t.Fatal(".finished removed while a range is recorded")
	}
	mustCommit(t, c, 21)
	wantFinished(t, c, nil, "Commit(21)")
	crashed = fsys.Crash(vfs.CrashOptions{})
	if !fileExists(fsys, finPath) {
		t.Fatal(".finished removed while under the compaction size: the next record would create it again")
	}
	c4 := openFin(t, crashed, 1000)
	if c4.Offset() != 21 || len(c4.Finished()) != 0 {
		t.Fatalf("after a power loss: offset %d, finished %v; want 21, none (the stale records ignored)", c4.Offset(), c4.Finished())
	}
	// Past the compaction size, a commit that leaves nothing live removes
	// it durably.
	mustRecord(t, c, rs(30, 31))
	c.compactBytes = 1
	mustCommit(t, c, 31)
	if fileExists(fsys, finPath) || fileExists(fsys.Crash(vfs.CrashOptions{}), finPath) {
		t.Fatal(".finished past the compaction size still exists (or comes back after a power loss) once a Commit left no range")
	}
	c5 := openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000)
	if c5.Offset() != 31 || len(c5.Finished()) != 0 {
		t.Fatalf("after removal: offset %d, finished %v; want 31, none", c5.Offset(), c5.Finished())
	}
}

// TestFinishedValidation: an empty range or one below the offset is an
// error and nothing is written; after Close every call wraps ErrClosed.
func TestFinishedValidation(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	mustCommit(t, c, 10)
	for _, bad := range [][]contract.OffsetRange{rs(12, 12), rs(13, 12), rs(9, 11), rs(20, 21, 5, 6)} {
		if err := c.RecordFinished(bad); err == nil {
			t.Errorf("RecordFinished(%v) = nil, want an error", bad)
		}
	}
	if fileExists(fsys, finPath) || len(c.Finished()) != 0 {
		t.Fatalf("a refused RecordFinished wrote or claimed something: file %v, %v", fileExists(fsys, finPath), c.Finished())
	}
	if err := c.RecordFinished(nil); err != nil {
		t.Fatalf("RecordFinished(nil) = %v", err)
	}
	c.Close()
	for what, err := range map[string]error{
		"RecordFinished": c.RecordFinished(rs(10, 11)),
		"ClearFinished":  c.ClearFinished(),
	} {
		if !errors.Is(err, contract.ErrClosed) {
			t.Errorf("%s after Close = %v, want contract.ErrClosed", what, err)
		}
	}
}

// TestFinishedWriteFailure: a RecordFinished whose write or fsync fails
// claims nothing, and the next one rewrites the file whole (its state on
// disk is unknown after a failed fsync), so that everything claimed is
// durable.
func TestFinishedWriteFailure(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync} {
		t.Run(op.String(), func(t *testing.T) {
			fsys := finFS(t)
			c := openFin(t, fsys, 1000)
			mustRecord(t, c, rs(1, 2))
			failFinishedOp(fsys, op)
			if err := c.RecordFinished(rs(5, 6)); err == nil {
				t.Fatal("RecordFinished with a failing write = nil")
			}
			wantFinished(t, c, rs(1, 2), "after a failed RecordFinished")
			fsys.SetHook(nil)
			mustRecord(t, c, rs(8, 9))
			wantFinished(t, c, rs(1, 2, 8, 9), "after the next one")
			c2 := openFin(t, fsys.Crash(vfs.CrashOptions{SectorSize: 512}), 1000)
			if got := c2.Finished(); !slices.Contains(got, contract.OffsetRange{Lo: 1, Hi: 2}) || !slices.Contains(got, contract.OffsetRange{Lo: 8, Hi: 9}) {
				t.Fatalf("after a power loss: %v, want [1,2) and [8,9) at least", got)
			}
		})
	}
}

// TestFinishedManyRanges: a RecordFinished with more ranges than one
// record holds writes several records, fsynced one by one, and all of
// them read back.
func TestFinishedManyRanges(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1<<40)
	mustRecord(t, c, rs(0, 1)) // the file exists: the next call only appends
	var many []contract.OffsetRange
	for i := int64(0); i < 5000; i++ {
		many = append(many, contract.OffsetRange{Lo: 10 + 3*i, Hi: 11 + 3*i + i%2})
	}
	before := fsys.SyncCount()
	mustRecord(t, c, many)
	wantAppendedRecords(t, fsys, before, encodedFinishedSize(rs(0, 1))+encodedFinishedSize(many), "encodedFinishedSize")
	want := mergeRanges(rs(0, 1), normalizeRanges(many))
	wantFinished(t, c, want, "memory")
	wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1<<40), want, "after a power loss")
}

// TestFinishedClear: ClearFinished removes the file durably and forgets
// everything; a missing file is fine.
func TestFinishedClear(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	if err := c.ClearFinished(); err != nil {
		t.Fatalf("ClearFinished with nothing recorded: %v", err)
	}
	mustRecord(t, c, rs(4, 9))
	if err := c.ClearFinished(); err != nil {
		t.Fatal(err)
	}
	wantFinished(t, c, nil, "after ClearFinished")
	crashed := fsys.Crash(vfs.CrashOptions{})
	if fileExists(fsys, finPath) || fileExists(crashed, finPath) {
		t.Fatal(".finished survives ClearFinished (or a power loss after it)")
	}
	wantFinished(t, openFin(t, crashed, 1000), nil, "reopened after ClearFinished")
	// contract.SeekCheckpoint clears, then moves the offset.
	mustRecord(t, c, rs(30, 31))
	if err := contract.SeekCheckpoint(c, 2); err != nil {
		t.Fatal(err)
	}
	wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), nil, "reopened after SeekCheckpoint")
}

// TestFinishedBackwardCommit: a Commit that moves the offset back (the
// local checkpoint allows it) does not bring back ranges a forward Commit
// had dropped from memory but left in the file.
func TestFinishedBackwardCommit(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	mustRecord(t, c, rs(10, 20, 40, 41))
	mustCommit(t, c, 15)
	mustCommit(t, c, 5)
	wantFinished(t, c, rs(15, 20, 40, 41), "after Commit(15), Commit(5)")
	c2 := openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000)
	if c2.Offset() != 5 {
		t.Fatalf("offset %d, want 5", c2.Offset())
	}
	wantFinished(t, c2, rs(15, 20, 40, 41), "reopened: [10,15) must stay forgotten")
}

// TestFinishedPastLogEnd: ranges at or past the log's end (its tail was
// lost) are dropped at open and the file rewritten without them, so that
// new messages at those offsets are delivered, also after a later reopen
// with a longer log.
func TestFinishedPastLogEnd(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	mustRecord(t, c, rs(2, 4, 8, 12, 50, 60))
	c2 := openFin(t, fsys, 10)
	wantFinished(t, c2, rs(2, 4, 8, 10), "opened with log end 10")
	if !c2.FinishedRecovery().DroppedPastEnd {
		t.Fatal("FinishedRecovery.DroppedPastEnd not set")
	}
	wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), rs(2, 4, 8, 10), "reopened with log end 1000")
}

// TestFinishedCompaction: a file past the compaction threshold whose live
// ranges encode to under a quarter of it is rewritten (tmp, fsync, rename,
// directory fsync) by the Commit that trims them, and by a RecordFinished
// that grows it; a power loss afterwards finds the compacted file, and no
// tmp is left.
func TestFinishedCompaction(t *testing.T) {
	t.Run("commit", func(t *testing.T) {
		fsys := finFS(t)
		c := openFin(t, fsys, 1<<40)
		c.compactBytes = 1 << 30 // none while appending
		for i := int64(0); i < 600; i++ {
			mustRecord(t, c, rs(1000+2*i, 1001+2*i))
		}
		big, _ := fsys.ReadFile(finPath)
		if len(big) <= 4096 {
			t.Fatalf("file is %d bytes after 600 appends, want more than 4096", len(big))
		}
		c.compactBytes = 4096
		mustCommit(t, c, 1000+2*590) // leaves 10 ranges
		small, _ := fsys.ReadFile(finPath)
		if len(small) >= len(big)/4 || int64(len(small)) != encodedFinishedSize(c.Finished()) {
			t.Fatalf("after the Commit: %d bytes (was %d; live ranges encode to %d), want compacted", len(small), len(big), encodedFinishedSize(c.Finished()))
		}
		if fileExists(fsys, finPath+vfs.TmpExt) {
			t.Fatal("compaction left its tmp file")
		}
		want := c.Finished()
		if len(want) != 10 {
			t.Fatalf("live ranges %v, want 10", want)
		}
		wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{SectorSize: 512}), 1<<40), want, "after a power loss")
		// Appending to the compacted file goes on where it ends.
		mustRecord(t, c, rs(5000, 5001))
		wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1<<40), append(want, contract.OffsetRange{Lo: 5000, Hi: 5001}), "after an append to the compacted file")
	})
	t.Run("record", func(t *testing.T) {
		// One-range records take 13 bytes a range; compacted, the ranges
		// of one record take 2.
		fsys := finFS(t)
		c := openFin(t, fsys, 1<<40)
		c.compactBytes = 4096
		var want []contract.OffsetRange
		for i := int64(0); i < 2000; i++ {
			r := contract.OffsetRange{Lo: 1000 + 2*i, Hi: 1001 + 2*i}
			mustRecord(t, c, []contract.OffsetRange{r})
			want = append(want, r)
		}
		got, _ := fsys.ReadFile(finPath)
		// Compacted when it passes the threshold at under a quarter
		// live, looked at once per doubling: at most 8 times the live
		// size, and less than the 26,000 bytes appended.
		if live := encodedFinishedSize(want); len(got) >= 2000*13*3/4 || int64(len(got)) > 8*live {
			t.Fatalf("file is %d bytes after 2000 one-range appends (live %d), want compacted on the way", len(got), live)
		}
		wantFinished(t, c, want, "memory")
		wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{SectorSize: 512}), 1<<40), want, "after a power loss")
	})
}

// TestFinishedRemoveCheckpointAndLister: RemoveCheckpoint removes the
// .finished file (and a leftover tmp) durably; the checkpoint lister
// never lists a .finished file as a checkpoint.
func TestFinishedRemoveCheckpointAndLister(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	mustAppend(t, l, payload(1, 32))
	d, err := l.Checkpoint("d")
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, d, 0)
	mustRecord(t, d, rs(0, 1))
	onlyFin, err := l.Checkpoint("onlyfin") // recorded, never committed
	if err != nil {
		t.Fatal(err)
	}
	mustRecord(t, onlyFin, rs(0, 1))
	names, err := l.Checkpoints()
	if err != nil || !slices.Equal(names, []string{"d"}) {
		t.Fatalf("Checkpoints() = %v, %v; want [d]", names, err)
	}
	cdir := path.Join(testDir, CheckpointDir)
	if err := fsys.WriteFile(path.Join(cdir, "d"+FinishedExt+vfs.TmpExt), []byte("x"), true); err != nil {
		t.Fatal(err)
	}
	if err := l.RemoveCheckpoint("d"); err != nil {
		t.Fatal(err)
	}
	if got := rootEntries(t, fsys.Crash(vfs.CrashOptions{}), cdir); got != "onlyfin"+FinishedExt {
		t.Fatalf("after RemoveCheckpoint and a power loss the checkpoints directory holds %q, want only onlyfin's file", got)
	}
	d2, err := l.Checkpoint("d")
	if err != nil {
		t.Fatal(err)
	}
	if d2.Offset() != 0 || len(d2.Finished()) != 0 {
		t.Fatalf("checkpoint d created again: offset %d, finished %v; want 0, none", d2.Offset(), d2.Finished())
	}
}

// TestVerifyFinished: `mmmq verify` checks every .finished file and
// reports a torn last append, damage to fsynced records and a set-aside
// file as checkpoint problems; a sound file is no problem.
func TestVerifyFinished(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	for i := 0; i < 3; i++ {
		mustAppend(t, l, payload(i, 32))
	}
	c, err := l.Checkpoint("d")
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, c, 1)
	for i := int64(0); i < 700; i++ {
		mustRecord(t, c, rs(1+i, 2+i))
	}
	l.Close()
	verify := func() []string {
		t.Helper()
		rep, err := Verify(testDir, Options{FS: fsys, Logger: zaptest.NewLogger(t)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rep.Checkpoints
	}
	p := path.Join(testDir, CheckpointDir, "d"+FinishedExt)
	good, _ := fsys.ReadFile(p)
	if got := verify(); len(got) != 1 || !strings.Contains(got[0], "beyond log end 3") {
		t.Fatalf("verify of a sound file recording offsets up to 701 in a log of 3: %q, want only the log-end note", got)
	}
	// Within the log: nothing to report.
	fsys.WriteFile(p, slices.Concat(encodeFinished(rs(1, 3))...), true)
	if got := verify(); len(got) != 0 {
		t.Fatalf("verify of a sound file: %q, want no problem", got)
	}
	bad := slices.Clone(good)
	bad[len(bad)-3] ^= 0xff
	fsys.WriteFile(p, bad, true)
	if got := strings.Join(verify(), "\n"); !strings.Contains(got, "torn last append") {
		t.Fatalf("verify of a torn last record: %q", got)
	}
	bad = slices.Clone(good)
	bad[FinishedHeaderSize+2] ^= 0xff
	fsys.WriteFile(p, bad, true)
	if got := strings.Join(verify(), "\n"); !strings.Contains(got, "corrupt record at byte 0") || !strings.Contains(got, "crc mismatch") {
		t.Fatalf("verify of a damaged first record: %q", got)
	}
	fsys.WriteFile(p+FinishedCorruptExt, bad, true)
	if got := strings.Join(verify(), "\n"); !strings.Contains(got, "d.finished.corrupt: a damaged finished-offsets file set aside") {
		t.Fatalf("verify with a set-aside file: %q", got)
	}
}

// finCorruption is a named way to damage a .finished file: it gets the
// file's bytes and the start of each record, and returns the new bytes.
type finCorruption func(data []byte, starts []int) []byte

// finDamageCase is a named corruption of a .finished file of n+1 records
// (n small ones, then one last append of one full record) and what the
// recovery at open must make of it.
type finDamageCase struct {
	name    string
	damage  finCorruption
	corrupt bool // reported as corruption (set aside), else cut
	kept    int  // the records kept (of the n+1 written); -1: wherever the damage is
}

// finDamageCases are the corruptions every kind of record is recovered
// from alike, over n small records and a last big one: damage within one
// append of the end is a torn last append (cut), damage farther from the
// end is corruption. early is the byte of record 5's body the early
// damage flips.
func finDamageCases(n, early int) []finDamageCase {
	return []finDamageCase{
		{"tear the last record", func(b []byte, s []int) []byte { return b[:len(b)-5] }, false, n},
		{"tear the last record's header", func(b []byte, s []int) []byte { return b[:s[n]+3] }, false, n},
		{"flip a byte in the last record", func(b []byte, s []int) []byte { b[len(b)-100] ^= 0x40; return b }, false, n},
		{"zero a sector in the last append", func(b []byte, s []int) []byte {
			lo := (s[n] + 511) / 512 * 512
			clear(b[lo : lo+512])
			return b
		}, false, n},
		{"zero the whole last append", func(b []byte, s []int) []byte { clear(b[s[n]:]); return b }, false, n},
		{"garbage after the last record", func(b []byte, s []int) []byte { return append(b, 1, 2, 3, 4, 5, 6, 7, 8, 9) }, false, n + 1},
		{"unknown kind in the last record", func(b []byte, s []int) []byte { return withKind(b, s[n], 3) }, false, n},
		{"damage an early record with more data after it", func(b []byte, s []int) []byte { b[s[5]+FinishedHeaderSize+early] ^= 0x01; return b }, true, 5},
		{"zero a sector of fsynced records", func(b []byte, s []int) []byte { clear(b[1024:1536]); return b }, true, -1},
		{"unknown kind in an early record", func(b []byte, s []int) []byte { return withKind(b, s[3], 9) }, true, 3},
	}
}

// runFinDamageCase writes n+1 records to checkpoint "d" with write (n
// appends of one record, then one of one full record), damages the file
// as tc says and opens it again: corruption is reported (error naming
// file and byte, CorruptAt, the damaged file set aside as
// .finished.corrupt), a torn last append is cut (warning, CutAt and
// CutBytes, the file cut there, nothing set aside); check checks what the
// recovered checkpoint holds given the records kept, and again after a
// power loss and a reopen, which must do nothing more.
func runFinDamageCase(t *testing.T, n int, tc finDamageCase, write func(c *Checkpoint), check func(c *Checkpoint, kept int, what string)) {
	t.Helper()
	fsys := finFS(t)
	write(openFin(t, fsys, 1<<40))
	data, _ := fsys.ReadFile(finPath)
	var starts []int
	for pos := 0; pos < len(data); {
		_, size, err := decodeFinishedRecord(data[pos:])
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, pos)
		pos += size
	}
	if len(starts) != n+1 {
		t.Fatalf("%d records written, want %d (the last append must be one record)", len(starts), n+1)
	}
	damaged := tc.damage(slices.Clone(data), starts)
	fsys.WriteFile(finPath, damaged, true)
	e := scanFinished(damaged).end
	kept := tc.kept
	if kept < 0 {
		kept = slices.Index(starts, int(e))
	}
	if kept < 0 {
		t.Fatalf("the damage is at byte %d, want the start of a record", e)
	}
	if kept != n+1 && int(e) != starts[kept] {
		t.Fatalf("the damage is at byte %d, want the start of record %d (%d)", e, kept, starts[kept])
	}

	core, logs := observer.New(zapcore.WarnLevel)
	c2, err := OpenCheckpoint(fsys, finTopic, "d", 1<<40, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	rec := c2.FinishedRecovery()
	check(c2, kept, "after recovery")
	after, _ := fsys.ReadFile(finPath)
	if tc.corrupt {
		if rec.CorruptAt != e || rec.CutBytes != 0 {
			t.Fatalf("recovery %+v: want corruption reported at %d", rec, e)
		}
		es := logs.FilterLevelExact(zapcore.ErrorLevel).All()
		if len(es) != 1 || es[0].ContextMap()["file"] != finPath || es[0].ContextMap()["pos"] != e {
			t.Fatalf("error log %v: want one naming %s at byte %d", es, finPath, e)
		}
		aside, err := fsys.ReadFile(finPath + FinishedCorruptExt)
		if err != nil || !bytes.Equal(aside, damaged) {
			t.Fatalf("set-aside file: %v (equal %v)", err, bytes.Equal(aside, damaged))
		}
	} else {
		if rec.CorruptAt != -1 || rec.CutAt != e || rec.CutBytes != int64(len(damaged))-e {
			t.Fatalf("recovery %+v: want a cut at %d of %d bytes", rec, e, int64(len(damaged))-e)
		}
		if ws := logs.FilterLevelExact(zapcore.WarnLevel).All(); len(ws) != 1 || ws[0].ContextMap()["cut-bytes"] != int64(len(damaged))-e {
			t.Fatalf("warn log %v: want one saying what was cut", ws)
		}
		if !bytes.Equal(after, damaged[:e]) {
			t.Fatalf("file after the cut: %d bytes, want the first %d", len(after), e)
		}
		if fileExists(fsys, finPath+FinishedCorruptExt) {
			t.Fatal("a torn append was set aside as corrupt")
		}
	}
	// Recovery is durable and done: a power loss, then a reopen finds
	// the same and does nothing more.
	c3, err := OpenCheckpoint(fsys.Crash(vfs.CrashOptions{}), finTopic, "d", 1<<40, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	check(c3, kept, "reopened after recovery and a power loss")
	if r := c3.FinishedRecovery(); r != (FinishedRecovery{CorruptAt: -1}) {
		t.Fatalf("second open did %+v, want nothing", r)
	}
}

// TestFinishedRecoveryCorruption: the recovery decision at open, over
// named corruptions. Damage within one append of the end is a torn last
// append: cut (warning); anything farther from the end is damage to
// fsynced data: reported (error naming file and byte), the file set aside
// as .finished.corrupt and a fresh one written from the valid records
// before the damage. Either way nothing that was not recorded appears.
func TestFinishedRecoveryCorruption(t *testing.T) {
	const n = 800 // single-range records of ~13 bytes: well over a damage window
	rangeOf := func(i int) contract.OffsetRange {
		return contract.OffsetRange{Lo: int64(100 + 2*i), Hi: int64(101 + 2*i)}
	}
	var lastBig []contract.OffsetRange // the last append: one full record of many ranges
	for i := 0; i < 1500; i++ {
		lastBig = append(lastBig, contract.OffsetRange{Lo: int64(10000 + 3*i), Hi: int64(10001 + 3*i)})
	}
	tests := append(finDamageCases(n, 1),
		finDamageCase{"damage just past one window from the end", func(b []byte, s []int) []byte {
			i := 0
			for len(b)-s[i] > FinishedDamageWindow+16 {
				i++
			}
			b[s[i-1]+4] ^= 0x01 // its CRC
			return b
		}, true, -1},
	)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runFinDamageCase(t, n, tc, func(c *Checkpoint) {
				for i := 0; i < n; i++ {
					mustRecord(t, c, []contract.OffsetRange{rangeOf(i)})
				}
				mustRecord(t, c, lastBig)
			}, func(c *Checkpoint, kept int, what string) {
				var want []contract.OffsetRange
				for i := 0; i < min(kept, n); i++ {
					want = append(want, rangeOf(i))
				}
				want = normalizeRanges(want)
				if kept > n {
					want = mergeRanges(want, lastBig)
				}
				wantFinished(t, c, want, what)
			})
		})
	}
}

// withKind rewrites the kind byte of the record at pos to kind, with a
// valid CRC: a record the CRC alone would pass.
func withKind(b []byte, pos int, kind byte) []byte {
	length := int(uint32(b[pos])<<24 | uint32(b[pos+1])<<16 | uint32(b[pos+2])<<8 | uint32(b[pos+3]))
	body := b[pos+FinishedHeaderSize : pos+FinishedHeaderSize+length]
	body[0] = kind
	c := Checksum(body)
	b[pos+4], b[pos+5], b[pos+6], b[pos+7] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	return b
}

// TestFinishedRecordFormat pins the byte layout of a record.
func TestFinishedRecordFormat(t *testing.T) {
	rec, n := appendFinishedRecord(nil, rs(300, 302, 305, 306))
	wantRecord(t, rec, n, 2, "ranges", FinishedKindRanges, 2, 0xac, 0x02, 2, 3, 1)
	wantUndecodable(t, []namedRecord{
		{"count 0", finRecord(FinishedKindRanges, 0)},
		{"empty range", finRecord(FinishedKindRanges, 1, 5, 0)},
		{"trailing byte", finRecord(FinishedKindRanges, 1, 5, 1, 0)},
		{"count past the body", finRecord(FinishedKindRanges, 3, 5, 1)},
		{"offset past int64", finRecord(FinishedKindRanges, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 2)},
	})
}

// wantRecord checks that rec, written holding n values (ranges or counts,
// as what says), is the record framing body (length, CRC, body) and that
// n is wantN.
func wantRecord(t *testing.T, rec []byte, n, wantN int, what string, body ...byte) {
	t.Helper()
	if want := finRecord(body...); n != wantN || !bytes.Equal(rec, want) {
		t.Fatalf("record = % x (%d %s), want % x", rec, n, what, want)
	}
}

// namedRecord is a named record's bytes.
type namedRecord struct {
	name string
	b    []byte
}

// wantUndecodable checks that the decoder refuses every one of bad.
func wantUndecodable(t *testing.T, bad []namedRecord) {
	t.Helper()
	for _, tc := range bad {
		if _, _, err := decodeFinishedRecord(tc.b); err == nil {
			t.Errorf("%s: decoded, want an error", tc.name)
		}
	}
}

// finRecord frames body bytes as a record with a valid CRC.
func finRecord(body ...byte) []byte {
	b := make([]byte, FinishedHeaderSize, FinishedHeaderSize+len(body))
	b[3] = byte(len(body))
	c := Checksum(body)
	b[4], b[5], b[6], b[7] = byte(c>>24), byte(c>>16), byte(c>>8), byte(c)
	return append(b, body...)
}

// FuzzDecodeFinishedRecord: the record decoder never panics nor
// allocates from a garbage count, and whatever it accepts is either
// ascending, disjoint, non-empty ranges within int64 (kind 1) or strictly
// ascending offsets within int64 with counts from 1 to 2³²-1 (kind 2),
// which encode and decode again to the same values.
func FuzzDecodeFinishedRecord(f *testing.F) {
	f.Add([]byte{})
	f.Add(slices.Concat(encodeFinished(rs(0, 1, 5, 9, 1<<40, 1<<40+3))...))
	f.Add(finRecord(FinishedKindRanges, 1, 5, 0))
	f.Add(finRecord(3, 1, 5, 1))
	f.Add(finRecord(FinishedKindRanges, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, 1))
	f.Add(finRecord(FinishedKindRanges, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 2))
	f.Add(slices.Concat(encodeDeliveries(dc(0, 1, 1, 2, 9, 1<<32-1, 1<<40, 3))...))
	f.Add(finRecord(FinishedKindDeliveries, 1, 5, 0))
	f.Add(finRecord(FinishedKindDeliveries, 1, 5, 0x80, 0x80, 0x80, 0x80, 0x10))
	f.Add(finRecord(FinishedKindDeliveries, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 0, 1))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, size, err := decodeFinishedRecord(b)
		if err != nil {
			return
		}
		if size > len(b) || size < FinishedHeaderSize+finishedMinBody {
			t.Fatalf("size %d of %d bytes", size, len(b))
		}
		if (len(rec.ranges) == 0) == (len(rec.counts) == 0) {
			t.Fatalf("record holds %d ranges and %d counts, want one kind, not empty", len(rec.ranges), len(rec.counts))
		}
		if ds := rec.counts; len(ds) > 0 {
			for i, d := range ds {
				if d.Offset < 0 || d.Count == 0 || (i > 0 && d.Offset <= ds[i-1].Offset) {
					t.Fatalf("invalid delivery counts %v", ds)
				}
			}
			var again []contract.DeliveryCount
			for _, b := range encodeDeliveries(ds) {
				r, _, err := decodeFinishedRecord(b)
				if err != nil {
					t.Fatalf("re-encoded %v does not decode: %v", ds, err)
				}
				again = append(again, r.counts...)
			}
			if !slices.Equal(again, ds) {
				t.Fatalf("round trip %v → %v", ds, again)
			}
			_ = scanFinished(b)
			return
		}
		got := rec.ranges
		for i, r := range got {
			if r.Lo < 0 || r.Lo >= r.Hi || (i > 0 && r.Lo < got[i-1].Hi) {
				t.Fatalf("invalid ranges %v", got)
			}
		}
		var again []contract.OffsetRange
		for _, rec := range encodeFinished(normalizeRanges(got)) {
			r, _, err := decodeFinishedRecord(rec)
			if err != nil {
				t.Fatalf("re-encoded %v does not decode: %v", got, err)
			}
			again = append(again, r.ranges...)
		}
		if !slices.Equal(again, normalizeRanges(got)) {
			t.Fatalf("round trip %v → %v", got, again)
		}
		_ = scanFinished(b)
	})
}

func TestFinishedRangeHelpers(t *testing.T) {
	for _, tc := range []struct{ a, b, want []contract.OffsetRange }{
		{nil, nil, nil},
		{rs(1, 3), rs(3, 5), rs(1, 5)},
		{rs(1, 3, 10, 12), rs(2, 11), rs(1, 12)},
		{rs(1, 2, 4, 5), rs(2, 4), rs(1, 5)},
		{rs(5, 6), rs(1, 2), rs(1, 2, 5, 6)},
	} {
		if got := mergeRanges(tc.a, tc.b); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("mergeRanges(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
	if got := normalizeRanges(rs(9, 10, 1, 4, 3, 6, 6, 7)); !slices.Equal(got, rs(1, 7, 9, 10)) {
		t.Errorf("normalizeRanges = %v", got)
	}
	if got := trimRanges(rs(1, 4, 6, 9), 7); !slices.Equal(got, rs(7, 9)) {
		t.Errorf("trimRanges = %v", got)
	}
	if got := trimRanges(rs(1, 4), 4); got != nil {
		t.Errorf("trimRanges to nothing = %v", got)
	}
}

// TestFinishedRewriteDirSyncFailure: a compaction whose directory fsync
// fails leaves the new file in the namespace while a power loss may bring
// the old one back under the name (MemFS keeps the last synced directory
// entries). The Commit that compacted still succeeds (its offset is
// durable), and the next RecordFinished must not append to a file whose
// name may not be durable: it rewrites the file whole, so that what it
// acknowledges survives the power loss.
func TestFinishedRewriteDirSyncFailure(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1<<40)
	mustCommit(t, c, 0) // the checkpoint file exists: the next Commit fsyncs no directory of its own
	c.compactBytes = 1 << 30
	for i := int64(0); i < 400; i++ {
		mustRecord(t, c, rs(1000+2*i, 1001+2*i))
	}
	c.compactBytes = 1024
	failed := false
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSyncDir && !failed {
			failed = true
			return errors.New("injected directory fsync failure")
		}
		return nil
	})
	mustCommit(t, c, 1000+2*390) // compacts; its directory fsync fails
	fsys.SetHook(nil)
	if !failed {
		t.Fatal("the Commit did not compact (no directory fsync)")
	}
	mustRecord(t, c, rs(9000, 9001))
	want := c.Finished()
	wantFinished(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1<<40), want, "after a power loss")
}

// A second damaged file is set aside beside the first, never over it.
func TestFinishedSecondCorruptionKeepsTheFirst(t *testing.T) {
	fsys := finFS(t)
	damageAndReopen := func() {
		c := openFin(t, fsys, 1<<40)
		for i := range 800 {
			mustRecord(t, c, []contract.OffsetRange{{Lo: int64(100 + 2*i), Hi: int64(101 + 2*i)}})
		}
		data, _ := fsys.ReadFile(finPath)
		data[FinishedHeaderSize+20] ^= 0x01 // an early record
		fsys.WriteFile(finPath, data, true)
		openFin(t, fsys, 1<<40)
	}
	damageAndReopen()
	first, _ := fsys.ReadFile(finPath + FinishedCorruptExt)
	damageAndReopen()
	again, _ := fsys.ReadFile(finPath + FinishedCorruptExt)
	second, _ := fsys.ReadFile(finPath + FinishedCorruptExt + ".1")
	if len(first) == 0 || !slices.Equal(first, again) || len(second) == 0 {
		t.Fatalf("set-aside files: first %d bytes (then %d), second %d bytes; want the first kept and the second beside it", len(first), len(again), len(second))
	}
}
