package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// stamped returns a message JSON of about 100 bytes stored at ts (Unix ms).
func stamped(i int, ts int64) []byte {
	return []byte(fmt.Sprintf(`{"topic":{"name":"orders"},"content":{"i":"%05d","p":"%s"},"timestamp":%013d}`, i, strings.Repeat("y", 30), ts))
}

// topicBytes is the size of every .mmm and .idx file in the topic dir.
func topicBytes(t *testing.T, fsys *vfs.MemFS) int64 {
	t.Helper()
	var n int64
	for name, b := range snapshotFS(t, fsys) {
		if strings.HasSuffix(name, SegmentExt) || strings.HasSuffix(name, IndexExt) {
			n += int64(len(b))
		}
	}
	return n
}

// wantExpired fails unless err is an OFFSET_EXPIRED naming start.
func wantExpired(t *testing.T, err error, start int64) {
	t.Helper()
	var oe *contract.OffsetExpiredError
	if !errors.As(err, &oe) || !errors.Is(err, contract.ErrOffsetExpired) || oe.StartOffset != start {
		t.Fatalf("err = %v, want OFFSET_EXPIRED with start offset %d", err, start)
	}
	if c := contract.Classify(err); c.Status != 410 || c.Code != contract.CodeOffsetExpired {
		t.Fatalf("Classify = %+v, want 410 OFFSET_EXPIRED", c)
	}
}

// TestRetentionBySize: 4 KiB segments and max-bytes 40960 over 5,000
// publishes: the topic stays within max-bytes plus one segment, the start
// offset advances to a segment base, reads below it are OFFSET_EXPIRED, and
// everything from it on reads back — also after reopening.
func TestRetentionBySize(t *testing.T) {
	const segMax, maxBytes = 4096, 40960
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: segMax})
	p := contract.RetentionPolicy{MaxBytes: maxBytes}
	most, deleted := int64(0), 0
	for i := 0; i < 5000; i++ {
		mustAppend(t, l, stamped(i, 1))
		if i%50 == 49 {
			res, err := l.ApplyRetention(p, time.Now(), contract.KeepAll)
			if err != nil {
				t.Fatal(err)
			}
			deleted += res.Segments
			most = max(most, topicBytes(t, fsys))
		}
	}
	// Between two passes 50 entries arrive; the bound after a pass is
	// max-bytes + one segment (the one that pushes it over is kept only
	// while deleting it would not be needed).
	if limit := int64(maxBytes + segMax + 50*(EntrySize(len(stamped(0, 1)))+IndexEntrySize)); most > limit {
		t.Fatalf("topic held %d bytes after a retention pass, limit %d", most, limit)
	}
	if n := topicBytes(t, fsys); n > maxBytes+segMax+int64(EntrySize(len(stamped(0, 1)))+IndexEntrySize) {
		t.Fatalf("topic holds %d bytes after the last pass", n)
	}
	start := l.StartOffset()
	st := l.Stats()
	if start == 0 || deleted == 0 || st.StartOffset != start || st.FirstSegment != start {
		t.Fatalf("start offset %d after deleting %d segments (stats %+v)", start, deleted, st)
	}
	if _, err := l.Read(0); err == nil {
		t.Fatal("offset 0 still readable")
	} else {
		wantExpired(t, err, start)
	}
	_, err := l.ReadBatch(start-1, 10)
	wantExpired(t, err, start)
	es := readAll(t, l, 100)
	for _, e := range es {
		if !bytes.Equal(e.Payload, stamped(int(e.Offset), 1)) {
			t.Fatalf("offset %d = %s", e.Offset, e.Payload)
		}
	}
	if int64(len(es)) != 5000-start {
		t.Fatalf("read %d entries from %d", len(es), start)
	}
	l.Close()
	rl := openMem(t, fsys, Options{SegmentMaxBytes: segMax})
	defer rl.Close()
	if rl.StartOffset() != start || rl.HighWatermark() != 5000 || !rl.Repair().Clean() {
		t.Fatalf("reopened: start %d hw %d report %+v", rl.StartOffset(), rl.HighWatermark(), rl.Repair())
	}
	if off := mustAppend(t, rl, stamped(5000, 1)); off != 5000 {
		t.Fatalf("append after reopen: %d", off)
	}
}

// TestRetentionByAge: a sealed segment goes once its newest entry is older
// than max-age, judged at the time passed in (no sleeping); the active
// segment never goes, even when all of it is old.
func TestRetentionByAge(t *testing.T) {
	fsys := vfs.NewMem()
	entry := int64(EntrySize(len(stamped(0, 0))))
	l := openMem(t, fsys, Options{SegmentMaxBytes: 10 * entry}) // 10 entries per segment
	defer l.Close()
	base := time.UnixMilli(1_700_000_000_000)
	for i := 0; i < 35; i++ { // entry i is stored at base + i seconds
		mustAppend(t, l, stamped(i, base.Add(time.Duration(i)*time.Second).UnixMilli()))
	}
	p := contract.RetentionPolicy{MaxAge: 10 * time.Second}
	// At base+19.5s the first segment's newest entry (9s) is 10.5 s old;
	// the second's (19s) only 0.5 s.
	res, err := l.ApplyRetention(p, base.Add(19500*time.Millisecond), contract.KeepAll)
	if err != nil || res.Segments != 1 || res.StartOffset != 10 || res.Entries != 10 {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	// Exactly max-age old is not older than max-age.
	if res, err = l.ApplyRetention(p, base.Add(29*time.Second), contract.KeepAll); err != nil || res.Segments != 0 {
		t.Fatalf("at the boundary: %+v %v", res, err)
	}
	// Far in the future: everything sealed goes, the active segment stays.
	res, err = l.ApplyRetention(p, base.Add(time.Hour), contract.KeepAll)
	if err != nil || res.Segments != 2 || l.StartOffset() != 30 || l.Stats().Segments != 1 {
		t.Fatalf("last pass: %+v %v, start %d", res, err, l.StartOffset())
	}
	if es := readAll(t, l, 100); len(es) != 5 || es[0].Offset != 30 {
		t.Fatalf("left %d entries", len(es))
	}
}

// TestRetentionKeepFrom: keepFrom holds back the segment that contains it
// and every one after it, whatever the policy says.
func TestRetentionKeepFrom(t *testing.T) {
	fsys := vfs.NewMem()
	entry := int64(EntrySize(len(stamped(0, 0))))
	l := openMem(t, fsys, Options{SegmentMaxBytes: 10 * entry})
	defer l.Close()
	for i := 0; i < 50; i++ {
		mustAppend(t, l, stamped(i, 0))
	}
	p := contract.RetentionPolicy{MaxBytes: 1}
	seg := 10 * (entry + IndexEntrySize) // a sealed segment's .mmm + .idx
	// HeldBytes: the due segments keepFrom kept (20-29 and 30-39; 40-49 is
	// the active one, never due).
	if res, err := l.ApplyRetention(p, time.Now(), 25); err != nil || res.StartOffset != 20 || res.HeldBytes != 2*seg {
		t.Fatalf("keepFrom 25: %+v %v, want start 20, held %d", res, err, 2*seg)
	}
	if res, err := l.ApplyRetention(p, time.Now(), 30); err != nil || res.StartOffset != 30 || res.HeldBytes != seg {
		t.Fatalf("keepFrom 30 (a segment base): %+v %v, want held %d", res, err, seg)
	}
	if res, err := l.ApplyRetention(p, time.Now(), contract.KeepAll); err != nil || res.StartOffset != 40 || res.HeldBytes != 0 {
		t.Fatalf("contract.KeepAll: %+v %v", res, err)
	}
	// Nothing to do: no policy.
	if res, err := l.ApplyRetention(contract.RetentionPolicy{}, time.Now(), contract.KeepAll); err != nil || res.Segments != 0 {
		t.Fatalf("empty policy: %+v %v", res, err)
	}
}

// TestRetentionConcurrentReaders: readers racing head deletions on the real
// filesystem (files really unlinked, a small segment cache so that pairs
// are reopened) get either the entry or OFFSET_EXPIRED, never an I/O
// error: a reader pinning a deleted segment keeps reading the unlinked
// files, one that reopens it after the unlink sees ENOENT, reported as
// expired.
func TestRetentionConcurrentReaders(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "orders")
	entry := int64(EntrySize(len(stamped(0, 0))))
	l, err := Open(dir, Options{Logger: zap.NewNop(), SegmentMaxBytes: 4 * entry, MaxOpenSegments: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 600
	for i := 0; i < n; i++ {
		if _, err := l.Append(context.Background(), stamped(i, 0), contract.Written); err != nil {
			t.Fatal(err)
		}
	}
	waitHighWatermark(t, l, n)
	var expired, read atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := 0; r < 4; r++ {
		rng := rand.New(rand.NewPCG(uint64(r), 9))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := l.StartOffset() + int64(rng.IntN(8))
				var err error
				if rng.IntN(2) == 0 {
					var p []byte
					if p, err = l.Read(off); err == nil && !bytes.Equal(p, stamped(int(off), 0)) {
						t.Errorf("offset %d = %s", off, p)
						return
					}
				} else {
					var es []Entry
					if es, err = l.ReadBatch(off, 3); err == nil && (len(es) == 0 || es[0].Offset != off) {
						t.Errorf("ReadBatch(%d) = %d entries", off, len(es))
						return
					}
				}
				switch {
				case err == nil:
					read.Add(1)
				case errors.Is(err, contract.ErrOffsetExpired):
					expired.Add(1)
				default:
					t.Errorf("read %d: %v (want the entry or OFFSET_EXPIRED)", off, err)
					return
				}
			}
		}()
	}
	p := contract.RetentionPolicy{MaxBytes: 1}
	for keep := int64(8); keep < n-8; keep += 4 {
		if _, err := l.ApplyRetention(p, time.Now(), keep); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	if l.StartOffset() < n-16 {
		t.Fatalf("start offset %d", l.StartOffset())
	}
	t.Logf("reads %d, expired %d", read.Load(), expired.Load())
	if read.Load() == 0 {
		t.Fatal("no read succeeded: the race was not exercised")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if files := len(ents) - 1; files > 2*8 { // checkpoints dir aside
		t.Fatalf("%d files left in the topic dir", files)
	}
}

// TestRepairInterruptedDeletion: a first segment with one of its two files
// (retention crashed between the unlinks) is finished by repair, and the
// chain starts at the next segment; a missing file in any other segment is
// still corruption, with every file left untouched.
func TestRepairInterruptedDeletion(t *testing.T) {
	entry := int64(EntrySize(len(stamped(0, 0))))
	build := func(t *testing.T) *vfs.MemFS { // segments 0, 10, 20, 30 (active)
		fsys := vfs.NewMem()
		l := openMem(t, fsys, Options{SegmentMaxBytes: 10 * entry})
		for i := 0; i < 35; i++ {
			mustAppend(t, l, stamped(i, 0))
		}
		l.Close()
		return fsys
	}
	tests := []struct {
		name      string
		remove    []string
		wantStart int64  // 0: refused
		wantFile  string // corruption names this file
	}{
		{name: "first segment lost its .idx", remove: []string{idxOf(0)}, wantStart: 10},
		{name: "first segment lost its .mmm", remove: []string{mmmOf(0)}, wantStart: 10},
		{name: "chain starts at 10, its .idx lost", remove: []string{idxOf(0), mmmOf(0), idxOf(10)}, wantStart: 20},
		{name: "second segment lost its .idx", remove: []string{idxOf(10)}, wantFile: mmmOf(10)},
		{name: "second segment lost its .mmm", remove: []string{mmmOf(10)}, wantFile: idxOf(10)},
		{name: "gap after a deleted head", remove: []string{idxOf(0), mmmOf(0), idxOf(10), mmmOf(10), idxOf(20)}, wantStart: 30},
		{name: "gap in the middle", remove: []string{idxOf(10), mmmOf(10)}, wantFile: mmmOf(20)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := build(t)
			for _, f := range tc.remove {
				if err := fsys.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshotFS(t, fsys)
			// Verify (check only) agrees with Open and modifies nothing.
			vr, err := Verify(testDir, Options{FS: fsys}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(snapshotFS(t, fsys)) != fmt.Sprint(before) {
				t.Fatal("Verify modified files")
			}
			l, err := Open(testDir, Options{FS: fsys, Logger: zaptest.NewLogger(t), SegmentMaxBytes: 10 * entry})
			if tc.wantFile != "" {
				ce := asCorruption(t, err)
				if ce.File != tc.wantFile || vr.Status != StatusCorrupt {
					t.Fatalf("corruption in %s (verify %s), want %s", ce.File, vr.Status, tc.wantFile)
				}
				if fmt.Sprint(snapshotFS(t, fsys)) != fmt.Sprint(before) {
					t.Fatal("a refused topic was modified")
				}
				return
			}
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer l.Close()
			if l.StartOffset() != tc.wantStart || l.HighWatermark() != 35 || vr.StartOffset != tc.wantStart ||
				vr.NextOffset != 35 || vr.Entries != 35-tc.wantStart || vr.Status != StatusInterruptedRetention {
				t.Fatalf("start %d hw %d (verify: start %d next %d entries %d %s; want %s)", l.StartOffset(), l.HighWatermark(),
					vr.StartOffset, vr.NextOffset, vr.Entries, vr.Status, StatusInterruptedRetention)
			}
			if len(tc.remove) == 1 || tc.wantStart == 20 {
				if !strings.Contains(strings.Join(l.Repair().Actions, "|"), "finish interrupted retention deletion") || len(l.Repair().Removed) != 1 {
					t.Fatalf("report %+v", l.Repair())
				}
			}
			for name := range snapshotFS(t, fsys) {
				if strings.HasPrefix(filepath.Base(name), SegmentName(tc.wantStart-10)) {
					t.Fatalf("%s left behind", name)
				}
			}
			for _, e := range readAll(t, l, 100) {
				if !bytes.Equal(e.Payload, stamped(int(e.Offset), 0)) {
					t.Fatalf("offset %d = %s", e.Offset, e.Payload)
				}
			}
			_, err = l.Read(tc.wantStart - 1)
			wantExpired(t, err, tc.wantStart)
		})
	}
}

// TestCrashBetweenSegmentUnlinks: power loss at the named point between
// the two unlinks of a head deletion (the .idx gone, the .mmm not yet),
// with and without the directory entries of earlier steps made durable:
// reopening succeeds, finishes the deletion when it became visible, and
// every entry from the start offset on is intact.
func TestCrashBetweenSegmentUnlinks(t *testing.T) {
	entry := int64(EntrySize(len(stamped(0, 0))))
	for _, syncBefore := range []bool{false, true} {
		t.Run(fmt.Sprintf("dirSyncedBeforeCrash=%v", syncBefore), func(t *testing.T) {
			fsys := vfs.NewMem()
			var snap *vfs.MemFS
			hits := 0
			h := &Hooks{BetweenSegmentUnlinks: func() {
				hits++
				if hits == 2 { // in the second segment's deletion
					if syncBefore {
						// What a real filesystem may have written on its own.
						_ = fsys.SyncDir(testDir)
					}
					snap = fsys.Crash(vfs.CrashOptions{})
				}
			}}
			l := openMem(t, fsys, Options{SegmentMaxBytes: 10 * entry, Hooks: h})
			for i := 0; i < 45; i++ {
				mustAppend(t, l, stamped(i, 0))
			}
			if _, err := l.ApplyRetention(contract.RetentionPolicy{MaxBytes: 1}, time.Now(), 25); err != nil {
				t.Fatal(err)
			}
			l.Close()
			if snap == nil {
				t.Fatal("hook never ran")
			}
			rl := openMem(t, snap, Options{SegmentMaxBytes: 10 * entry})
			defer rl.Close()
			wantStart := int64(10)
			if syncBefore {
				wantStart = 20
				if !strings.Contains(strings.Join(rl.Repair().Actions, "|"), "finish interrupted retention deletion: remove "+SegmentName(10)+SegmentExt) {
					t.Fatalf("report %+v", rl.Repair())
				}
			}
			if rl.StartOffset() != wantStart || rl.HighWatermark() != 45 {
				t.Fatalf("start %d hw %d", rl.StartOffset(), rl.HighWatermark())
			}
			for _, e := range readAll(t, rl, 100) {
				if !bytes.Equal(e.Payload, stamped(int(e.Offset), 0)) {
					t.Fatalf("offset %d = %s", e.Offset, e.Payload)
				}
			}
		})
	}
}

// TestPowerLossPropertyWithRetention is the power-loss property test with
// retention deleting head segments while the writers append: no
// DURABLE-acknowledged entry at or after the recovered start offset is
// lost or altered, and reopening succeeds every round.
func TestPowerLossPropertyWithRetention(t *testing.T) {
	lazy := lazyVariants()
	variants := append(slices.Clone(crashVariants), lazy[1], lazy[len(lazy)-1])
	// And with preallocation: the sector models and a lazy variant.
	variants = append(variants, preallocVariants([]crashVariant{crashVariants[4], crashVariants[5], lazy[len(lazy)-1]})...)
	for vi, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			total := runCrashRounds(t, uint64(500000+vi*100000), v, true, func(c crashCounts) bool {
				return c.ackedDurable > 0 && c.startAfterCrash > 0
			})
			t.Logf("%s: %d rounds; acked durable %d; lost durable %d; acked entries below the recovered start offset (deleted) %d; sum of start offsets after the crash %d",
				v.name, total.rounds, total.ackedDurable, total.lostDurable, total.deleted, total.startAfterCrash)
			if total.ackedDurable == 0 || total.startAfterCrash == 0 {
				t.Fatal("no DURABLE acks or no deletion survived a crash: the property was not exercised")
			}
		})
	}
}

// TestRetentionRemoveFailureRetried: when removing a head segment's file
// fails (EIO), ApplyRetention reports it and deletes nothing after it; the
// next call finishes that segment first, so the files on disk never have a
// gap that repair would refuse.
func TestRetentionRemoveFailureRetried(t *testing.T) {
	fsys := vfs.NewMem()
	entry := int64(EntrySize(len(stamped(0, 0))))
	l := openMem(t, fsys, Options{SegmentMaxBytes: 10 * entry})
	for i := 0; i < 45; i++ {
		mustAppend(t, l, stamped(i, 0))
	}
	var fail atomic.Bool
	fail.Store(true)
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpRemove && fail.Load() && strings.HasSuffix(name, SegmentName(10)+SegmentExt) {
			return &os.PathError{Op: "remove", Path: name, Err: errors.New("injected EIO")}
		}
		return nil
	})
	p := contract.RetentionPolicy{MaxBytes: 1}
	res, err := l.ApplyRetention(p, time.Now(), contract.KeepAll)
	if err == nil || res.Segments != 1 || res.StartOffset != 20 {
		t.Fatalf("with a failing remove: %+v %v (want segment 0 deleted, then the error at 10)", res, err)
	}
	// A power loss now: segment 0's deletion was made durable, segment
	// 10's half-done one was not (no directory fsync after it), so it
	// comes back whole; the topic opens at 10 with every entry.
	snap := fsys.Crash(vfs.CrashOptions{})
	rl := openMem(t, snap, Options{SegmentMaxBytes: 10 * entry})
	if rl.StartOffset() != 10 || rl.HighWatermark() != 45 || len(readAll(t, rl, 100)) != 35 {
		t.Fatalf("reopened after the failure: start %d hw %d (report %+v)", rl.StartOffset(), rl.HighWatermark(), rl.Repair())
	}
	rl.Close()
	// Still failing: the next call retries segment 10 first and stops.
	if res, err := l.ApplyRetention(p, time.Now(), contract.KeepAll); err == nil || res.Segments != 0 {
		t.Fatalf("retry while failing: %+v %v", res, err)
	}
	fail.Store(false)
	res, err = l.ApplyRetention(p, time.Now(), contract.KeepAll)
	if err != nil || res.StartOffset != 40 {
		t.Fatalf("after the fault: %+v %v", res, err)
	}
	if _, ok := snapshotFS(t, fsys)[mmmOf(10)]; ok {
		t.Fatal("segment 10's .mmm left behind")
	}
	l.Close()
	rl = openMem(t, fsys, Options{SegmentMaxBytes: 10 * entry})
	defer rl.Close()
	if rl.StartOffset() != 40 || !rl.Repair().Clean() {
		t.Fatalf("reopened: start %d, report %+v", rl.StartOffset(), rl.Repair())
	}
}
