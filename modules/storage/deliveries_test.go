package storage

import (
	"errors"
	"slices"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

func mustDeliver(t testing.TB, c *Checkpoint, ds []contract.DeliveryCount) {
	t.Helper()
	if err := c.RecordDeliveries(ds); err != nil {
		t.Fatalf("RecordDeliveries(%v): %v", ds, err)
	}
}

func wantDeliveries(t testing.TB, c *Checkpoint, want []contract.DeliveryCount, what string) {
	t.Helper()
	if got := c.Deliveries(); !slices.Equal(got, want) {
		t.Fatalf("%s: Deliveries() = %v, want %v", what, got, want)
	}
}

// TestDeliveriesRoundTrip: recorded counts are kept one per offset (a
// later count replaces an earlier one, within one call too), survive a
// power loss once RecordDeliveries returned, are forgotten by the Commit
// that passes them (stale ones in the file ignored on reopen), by the
// RecordFinished that finishes their offset and by ClearFinished (and so
// by a seek); the file lives while a count does, with no range left, and
// is removed durably once nothing is left.
func TestDeliveriesRoundTrip(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	wantDeliveries(t, c, nil, "new checkpoint")
	mustCommit(t, c, 3)
	mustDeliver(t, c, dc(10, 1, 5, 1, 7, 2))
	wantDeliveries(t, c, dc(5, 1, 7, 2, 10, 1), "given out of order")
	mustDeliver(t, c, dc(5, 2, 12, 1, 12, 3))
	wantDeliveries(t, c, dc(5, 2, 7, 2, 10, 1, 12, 3), "replaced, and the last of an offset in one call wins")
	before := fsys.SyncCount()
	mustDeliver(t, c, dc(7, 2))
	if fsys.SyncCount() != before {
		t.Fatal("a count already stored was written again")
	}
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), dc(5, 2, 7, 2, 10, 1, 12, 3), "after a power loss")

	mustRecord(t, c, rs(6, 8, 12, 13))
	wantDeliveries(t, c, dc(5, 2, 10, 1), "after RecordFinished of 6, 7 and 12")
	before = fsys.SyncCount()
	mustDeliver(t, c, dc(7, 9))
	if fsys.SyncCount() != before {
		t.Fatal("a count of a finished offset was written")
	}
	wantDeliveries(t, c, dc(5, 2, 10, 1), "a finished offset gets no count")
	c2 := openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000)
	wantDeliveries(t, c2, dc(5, 2, 10, 1), "reopened: finished offsets have no count")
	wantFinished(t, c2, rs(6, 8, 12, 13), "reopened")

	mustCommit(t, c, 8)
	wantDeliveries(t, c, dc(10, 1), "Commit(8)")
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), dc(10, 1), "reopened after Commit(8): the stale count ignored")
	mustCommit(t, c, 13)
	wantFinished(t, c, nil, "Commit(13)")
	mustDeliver(t, c, dc(20, 4))
	if !fileExists(fsys, finPath) {
		t.Fatal(".finished removed while a count is recorded")
	}
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), dc(20, 4), "a count alone")
	mustCommit(t, c, 21)
	wantDeliveries(t, c, nil, "Commit(21)")
	if !fileExists(fsys, finPath) {
		t.Fatal(".finished removed while under the compaction size")
	}
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), nil, "reopened after Commit(21): stale counts ignored")
	mustDeliver(t, c, dc(22, 1))
	c.compactBytes = 1
	mustCommit(t, c, 23)
	crashed := fsys.Crash(vfs.CrashOptions{})
	if fileExists(fsys, finPath) || fileExists(crashed, finPath) {
		t.Fatal(".finished past the compaction size still exists (or comes back after a power loss) once a Commit left no range and no count")
	}
	c.compactBytes = FinishedCompactBytes

	// ClearFinished forgets every count; contract.SeekCheckpoint clears.
	mustDeliver(t, c, dc(30, 2))
	if err := c.ClearFinished(); err != nil {
		t.Fatal(err)
	}
	wantDeliveries(t, c, nil, "after ClearFinished")
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), nil, "reopened after ClearFinished")
	mustDeliver(t, c, dc(31, 5))
	if err := contract.SeekCheckpoint(c, 2); err != nil {
		t.Fatal(err)
	}
	wantDeliveries(t, c, nil, "after SeekCheckpoint")
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), nil, "reopened after SeekCheckpoint")
}

// TestDeliveriesValidation: a count of 0 or one below the offset is an
// error and nothing is written; after Close RecordDeliveries wraps
// ErrClosed.
func TestDeliveriesValidation(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1000)
	mustCommit(t, c, 10)
	for _, bad := range [][]contract.DeliveryCount{dc(12, 0), dc(9, 1), dc(20, 1, 5, 1)} {
		if err := c.RecordDeliveries(bad); err == nil {
			t.Errorf("RecordDeliveries(%v) = nil, want an error", bad)
		}
	}
	if fileExists(fsys, finPath) || len(c.Deliveries()) != 0 {
		t.Fatalf("a refused RecordDeliveries wrote or claimed something: file %v, %v", fileExists(fsys, finPath), c.Deliveries())
	}
	if err := c.RecordDeliveries(nil); err != nil {
		t.Fatalf("RecordDeliveries(nil) = %v", err)
	}
	c.Close()
	if err := c.RecordDeliveries(dc(10, 1)); !errors.Is(err, contract.ErrClosed) {
		t.Errorf("RecordDeliveries after Close = %v, want contract.ErrClosed", err)
	}
}

// TestDeliveriesWriteFailure: a RecordDeliveries whose write or fsync
// fails claims nothing, and the next one rewrites the file whole with the
// live ranges and counts, so that everything claimed is durable.
func TestDeliveriesWriteFailure(t *testing.T) {
	for _, op := range []vfs.Op{vfs.OpWrite, vfs.OpSync} {
		t.Run(op.String(), func(t *testing.T) {
			fsys := finFS(t)
			c := openFin(t, fsys, 1000)
			mustRecord(t, c, rs(1, 2))
			mustDeliver(t, c, dc(3, 1))
			failFinishedOp(fsys, op)
			if err := c.RecordDeliveries(dc(3, 2, 5, 1)); err == nil {
				t.Fatal("RecordDeliveries with a failing write = nil")
			}
			wantDeliveries(t, c, dc(3, 1), "after a failed RecordDeliveries")
			fsys.SetHook(nil)
			mustDeliver(t, c, dc(8, 1))
			wantDeliveries(t, c, dc(3, 1, 8, 1), "after the next one")
			c2 := openFin(t, fsys.Crash(vfs.CrashOptions{SectorSize: 512}), 1000)
			wantFinished(t, c2, rs(1, 2), "after a power loss")
			got := c2.Deliveries()
			if len(got) < 2 || got[0].Offset != 3 || got[0].Count < 1 || !slices.Contains(got, contract.DeliveryCount{Offset: 8, Count: 1}) {
				t.Fatalf("after a power loss: %v, want offset 3 counted at least once and 8 once", got)
			}
		})
	}
}

// TestDeliveriesManyCounts: a RecordDeliveries with more counts than one
// record holds writes several kind-2 records, fsynced one by one, and all
// of them read back.
func TestDeliveriesManyCounts(t *testing.T) {
	fsys := finFS(t)
	c := openFin(t, fsys, 1<<40)
	mustDeliver(t, c, dc(0, 1)) // the file exists: the next call only appends
	var many []contract.DeliveryCount
	for i := int64(0); i < 3000; i++ {
		many = append(many, contract.DeliveryCount{Offset: 10 + 3*i, Count: uint32(1 + i*i*7919%(1<<31))})
	}
	before := fsys.SyncCount()
	mustDeliver(t, c, many)
	wantAppendedRecords(t, fsys, before, encodedDeliveriesSize(dc(0, 1))+encodedDeliveriesSize(many), "encodedDeliveriesSize")
	want := append(dc(0, 1), many...)
	wantDeliveries(t, c, want, "memory")
	wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1<<40), want, "after a power loss")
}

// TestDeliveriesCompaction: a file grown by counts replaced again and
// again is rewritten to the live ranges and counts (by the
// RecordDeliveries that grows it and by the Commit that trims it); a
// Commit back keeps counts a forward Commit dropped forgotten; counts at
// or past the log's end are dropped at open and the file rewritten.
func TestDeliveriesCompaction(t *testing.T) {
	t.Run("record", func(t *testing.T) {
		fsys := finFS(t)
		c := openFin(t, fsys, 1<<40)
		c.compactBytes = 4096
		mustRecord(t, c, rs(50, 52))
		for n := uint32(1); n <= 1500; n++ {
			mustDeliver(t, c, []contract.DeliveryCount{{Offset: int64(n % 8), Count: n}})
		}
		want := c.Deliveries()
		if len(want) != 8 || want[0] != (contract.DeliveryCount{Offset: 0, Count: 1496}) {
			t.Fatalf("live counts %v, want 8, offset 0 at 1496", want)
		}
		got, _ := fsys.ReadFile(finPath)
		if live := encodedFinishedSize(c.Finished()) + encodedDeliveriesSize(want); len(got) > 8*int(live)+4096 || len(got) >= 1500*13/2 {
			t.Fatalf("file is %d bytes after 1500 appends (live %d), want compacted on the way", len(got), live)
		}
		c2 := openFin(t, fsys.Crash(vfs.CrashOptions{SectorSize: 512}), 1<<40)
		wantDeliveries(t, c2, want, "after a power loss")
		wantFinished(t, c2, rs(50, 52), "after a power loss")
	})
	t.Run("commit", func(t *testing.T) {
		fsys := finFS(t)
		c := openFin(t, fsys, 1<<40)
		c.compactBytes = 1 << 30
		for i := int64(0); i < 600; i++ {
			mustDeliver(t, c, dc(1000+i, 3))
		}
		big, _ := fsys.ReadFile(finPath)
		c.compactBytes = 2048
		mustCommit(t, c, 1590)
		small, _ := fsys.ReadFile(finPath)
		want := c.Deliveries()
		if len(want) != 10 || len(small) >= len(big)/4 || int64(len(small)) != encodedDeliveriesSize(want) {
			t.Fatalf("after the Commit: %d counts, %d bytes (was %d), want 10 counts compacted", len(want), len(small), len(big))
		}
		wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1<<40), want, "after a power loss")
	})
	t.Run("commit back", func(t *testing.T) {
		fsys := finFS(t)
		c := openFin(t, fsys, 1000)
		mustDeliver(t, c, dc(10, 1, 12, 2, 40, 3))
		mustCommit(t, c, 11)
		mustCommit(t, c, 5)
		wantDeliveries(t, c, dc(12, 2, 40, 3), "after Commit(11), Commit(5)")
		c2 := openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000)
		wantDeliveries(t, c2, dc(12, 2, 40, 3), "reopened: offset 10's count must stay forgotten")
	})
	t.Run("past log end", func(t *testing.T) {
		fsys := finFS(t)
		c := openFin(t, fsys, 1000)
		mustDeliver(t, c, dc(2, 1, 9, 2, 10, 3, 50, 4))
		c2 := openFin(t, fsys, 10)
		wantDeliveries(t, c2, dc(2, 1, 9, 2), "opened with log end 10")
		if !c2.FinishedRecovery().DroppedPastEnd {
			t.Fatal("FinishedRecovery.DroppedPastEnd not set")
		}
		wantDeliveries(t, openFin(t, fsys.Crash(vfs.CrashOptions{}), 1000), dc(2, 1, 9, 2), "reopened with log end 1000")
	})
}

// TestDeliveriesRecordFormat pins the byte layout of a kind-2 record and
// refuses malformed ones.
func TestDeliveriesRecordFormat(t *testing.T) {
	rec, n := appendDeliveriesRecord(nil, dc(300, 1, 301, 2, 305, 200))
	wantRecord(t, rec, n, 3, "counts", FinishedKindDeliveries, 3, 0xac, 0x02, 1, 0, 2, 3, 0xc8, 0x01)
	r, size, err := decodeFinishedRecord(rec)
	if err != nil || size != len(rec) || !slices.Equal(r.counts, dc(300, 1, 301, 2, 305, 200)) || r.ranges != nil {
		t.Fatalf("decode = %+v, %d, %v", r, size, err)
	}
	wantUndecodable(t, []namedRecord{
		{"pair count 0", finRecord(FinishedKindDeliveries, 0)},
		{"delivery count 0", finRecord(FinishedKindDeliveries, 1, 5, 0)},
		{"delivery count past uint32", finRecord(FinishedKindDeliveries, 1, 5, 0x80, 0x80, 0x80, 0x80, 0x10)},
		{"trailing byte", finRecord(FinishedKindDeliveries, 1, 5, 1, 0)},
		{"pair count past the body", finRecord(FinishedKindDeliveries, 3, 5, 1)},
		{"offset past int64", finRecord(FinishedKindDeliveries, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 1)},
		{"second offset past int64", finRecord(FinishedKindDeliveries, 2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 1, 0, 1)},
		{"unknown kind", finRecord(3, 1, 5, 1)},
	})
}

// TestDeliveriesRecoveryCorruption: the recovery decision of
// TestFinishedRecoveryCorruption for kind-2 records. Damage within one
// append of the end is a torn last append: cut (warning), the counts of
// the records before it kept; anything farther from the end is damage to
// fsynced data: reported (error naming file and byte), the file set aside
// as .finished.corrupt and a fresh one written from the valid records
// before the damage. No count appears that was not recorded, and no
// count is lower than the last valid record before the damage says.
func TestDeliveriesRecoveryCorruption(t *testing.T) {
	const n = 800 // one-count records of ~12 bytes, over a damage window
	countOf := func(i int) contract.DeliveryCount {
		// Offsets repeat: offset i%100 gets count i/100+1, so that a
		// later record replaces an earlier one.
		return contract.DeliveryCount{Offset: int64(100 + i%100), Count: uint32(i/100 + 1)}
	}
	var lastBig []contract.DeliveryCount // the last append: one full record
	for i := 0; i < 1200; i++ {
		lastBig = append(lastBig, contract.DeliveryCount{Offset: int64(10000 + 2*i), Count: uint32(1 + i%7)})
	}
	wantAfter := func(kept int) []contract.DeliveryCount {
		m := map[int64]uint32{}
		for i := 0; i < min(kept, n); i++ {
			m[countOf(i).Offset] = countOf(i).Count
		}
		if kept > n {
			for _, d := range lastBig {
				m[d.Offset] = d.Count
			}
		}
		var out []contract.DeliveryCount
		for off, c := range m {
			out = append(out, contract.DeliveryCount{Offset: off, Count: c})
		}
		sortDeliveries(out)
		return out
	}
	tests := append(finDamageCases(n, 2),
		finDamageCase{"count 0 in an early record (valid CRC)", func(b []byte, s []int) []byte {
			b[s[110]+FinishedHeaderSize+3] = 0 // the count byte of a one-pair record at a one-byte offset (110)
			return withKind(b, s[110], FinishedKindDeliveries)
		}, true, 110},
	)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			runFinDamageCase(t, n, tc, func(c *Checkpoint) {
				for i := 0; i < n; i++ {
					mustDeliver(t, c, []contract.DeliveryCount{countOf(i)})
				}
				mustDeliver(t, c, lastBig)
			}, func(c *Checkpoint, kept int, what string) {
				wantDeliveries(t, c, wantAfter(kept), what)
			})
		})
	}
}

// TestDeliveriesHelpers: the slice operations on delivery counts.
func TestDeliveriesHelpers(t *testing.T) {
	if got := normalizeDeliveries(dc(9, 1, 3, 2, 9, 4, 3, 1)); !slices.Equal(got, dc(3, 1, 9, 4)) {
		t.Errorf("normalizeDeliveries = %v", got)
	}
	if got := mergeDeliveries(dc(1, 1, 3, 1, 5, 1), dc(0, 2, 3, 2, 6, 2)); !slices.Equal(got, dc(0, 2, 1, 1, 3, 2, 5, 1, 6, 2)) {
		t.Errorf("mergeDeliveries = %v", got)
	}
	if got := changedDeliveries(dc(1, 1, 3, 1), dc(1, 1, 2, 1, 3, 2)); !slices.Equal(got, dc(2, 1, 3, 2)) {
		t.Errorf("changedDeliveries = %v", got)
	}
	if got := dropFinishedDeliveries(dc(1, 1, 3, 1, 5, 1, 8, 1), rs(2, 4, 5, 6)); !slices.Equal(got, dc(1, 1, 8, 1)) {
		t.Errorf("dropFinishedDeliveries = %v", got)
	}
	if got := trimDeliveries(dc(1, 1, 3, 1, 5, 1), 3); !slices.Equal(got, dc(3, 1, 5, 1)) {
		t.Errorf("trimDeliveries = %v", got)
	}
	if got := trimDeliveries(dc(1, 1), 2); got != nil {
		t.Errorf("trimDeliveries to nothing = %v", got)
	}
	if got := trimDeliveriesAbove(dc(1, 1, 3, 1, 5, 1), 5); !slices.Equal(got, dc(1, 1, 3, 1)) {
		t.Errorf("trimDeliveriesAbove = %v", got)
	}
}
