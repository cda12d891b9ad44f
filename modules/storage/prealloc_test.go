package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Preallocation (prealloc.go): the files of a busy topic's active segment
// carry written zeros ahead of the data while it runs; sealed, cleanly
// closed and repaired ones end exactly at their last entry.

const testPrealloc = 64 << 10

// preWrite appends rounds group commits of 10 entries (distinct payloads
// of 80 to 200 bytes) one after the other, calling each (when set) after
// every commit, and returns the payloads by offset.
func preWrite(t *testing.T, l *Log, rounds int, each func()) [][]byte {
	t.Helper()
	var all [][]byte
	for r := range rounds {
		batch := make([][]byte, 10)
		for j := range batch {
			batch[j] = payload(len(all)+j, 80+(r*7+j*13)%120)
		}
		if _, err := l.AppendBatch(context.Background(), batch, contract.Durable); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch...)
		if each != nil {
			each()
		}
	}
	return all
}

// readVFS returns the whole file at name of fsys.
func readVFS(t *testing.T, fsys vfs.FS, name string) []byte {
	t.Helper()
	f, err := fsys.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return b
}

// segmentFiles returns the contents of every .mmm and .idx of the topic
// in dir, by base name.
func segmentFiles(t *testing.T, fsys vfs.FS, dir string) map[string][]byte {
	t.Helper()
	ents, err := fsys.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name, SegmentExt) || strings.HasSuffix(e.Name, IndexExt) {
			out[e.Name] = readVFS(t, fsys, filepath.Join(dir, e.Name))
		}
	}
	return out
}

// endsAtLastEntry fails unless every segment of files holds exactly its
// entries back to back and its index exactly their positions: no zero
// tail in either file.
func endsAtLastEntry(t *testing.T, what string, files map[string][]byte) {
	t.Helper()
	for name, mmm := range files {
		stem, ok := strings.CutSuffix(name, SegmentExt)
		if !ok {
			continue
		}
		idx, ok := files[stem+IndexExt]
		if !ok {
			t.Errorf("%s: %s has no index", what, name)
			continue
		}
		var pos int64
		var want []byte
		for pos < int64(len(mmm)) {
			n, _, err := DecodeHeader(mmm[pos:], int64(len(mmm))-pos, MaxEntryPayload)
			if err != nil {
				t.Errorf("%s: %s at byte %d of %d: %v (a zero tail?)", what, name, pos, len(mmm), err)
				break
			}
			want = append(want, byte(pos>>56), byte(pos>>48), byte(pos>>40), byte(pos>>32), byte(pos>>24), byte(pos>>16), byte(pos>>8), byte(pos))
			pos += EntrySize(n)
		}
		if string(idx) != string(want) {
			t.Errorf("%s: %s is %d bytes, want %d (one entry per entry of %s)", what, stem+IndexExt, len(idx), len(want), name)
		}
	}
}

// hasZeroTail reports whether the file ends in at least 4 KiB of zeros
// (an entry ends with its JSON's last byte, never zero).
func hasZeroTail(b []byte) bool {
	return len(b) >= preallocAlign && lastNonZero(b[len(b)-preallocAlign:]) < 0
}

func activeSegment(l *Log) *segment {
	segs := *l.segs.Load()
	return segs[len(segs)-1]
}

// TestPreallocClosedFilesEndAtLastEntry: the same appends with
// preallocation on and off, on a MemFS and on the real filesystem, in
// both index-sync modes and across rotations: while the log runs the
// active files carry a zero tail and group commits use fdatasync; once
// closed, every segment and index file is byte for byte the one written
// with preallocation off.
func TestPreallocClosedFilesEndAtLastEntry(t *testing.T) {
	for _, fsName := range []string{"mem", "os"} {
		forModes(t, func(t *testing.T, mode IndexSync) {
			t.Run(fsName, func(t *testing.T) {
				files := map[int64]map[string][]byte{}
				for _, pre := range []int64{0, testPrealloc} {
					var fsys vfs.FS = vfs.NewMem()
					dir := testDir
					if fsName == "os" {
						fsys, dir = vfs.OS{}, filepath.Join(t.TempDir(), "orders")
					}
					l, err := Open(dir, Options{FS: fsys, Logger: zap.NewNop(), IndexSync: mode, SegmentMaxBytes: 100 << 10, Preallocate: pre})
					if err != nil {
						t.Fatal(err)
					}
					tails := 0
					preWrite(t, l, 300, func() {
						seg := activeSegment(l)
						if hasZeroTail(readVFS(t, fsys, seg.mmmPath)) && hasZeroTail(readVFS(t, fsys, seg.idxPath)) {
							tails++
						}
					})
					st := l.Stats()
					if err := l.Close(); err != nil {
						t.Fatal(err)
					}
					if st.Segments < 3 {
						t.Fatalf("%d segments: no rotation exercised", st.Segments)
					}
					switch {
					case pre == 0 && (tails != 0 || st.Datasyncs != 0 || st.PreallocatedBytes != 0):
						t.Fatalf("preallocation off: %d commits saw zero tails, %d fdatasyncs, %d bytes preallocated", tails, st.Datasyncs, st.PreallocatedBytes)
					case pre > 0 && (tails < 100 || st.Datasyncs < st.Batches/2):
						t.Fatalf("preallocation on: only %d of 300 commits saw zero tails in both files, %d of %d fsyncs were fdatasyncs (%d group commits)", tails, st.Datasyncs, st.Fsyncs, st.Batches)
					}
					t.Logf("preallocate=%d: %d group commits, %d fsyncs of which %d fdatasync, %d segments", pre, st.Batches, st.Fsyncs, st.Datasyncs, st.Segments)
					files[pre] = segmentFiles(t, fsys, dir)
					endsAtLastEntry(t, fmt.Sprintf("closed, preallocate=%d", pre), files[pre])
				}
				off, on := files[0], files[testPrealloc]
				if len(off) != len(on) {
					t.Fatalf("%d files with preallocation off, %d on", len(off), len(on))
				}
				for name, b := range off {
					if string(on[name]) != string(b) {
						t.Errorf("%s differs: %d bytes with preallocation on, %d off", name, len(on[name]), len(b))
					}
				}
			})
		})
	}
}

// TestPreallocRotationSealsTrimmed: at the moment a rotation creates the
// next segment, a power loss (only what was fsynced survives) finds every
// earlier segment and its index ending exactly at their last entry: the
// trim was fsynced before the next segment existed.
func TestPreallocRotationSealsTrimmed(t *testing.T) {
	forModes(t, func(t *testing.T, mode IndexSync) {
		fsys := vfs.NewMem()
		rotations := 0
		var l *Log
		hooks := &Hooks{AfterRotateSegment: func() {
			rotations++
			snap := fsys.Crash(vfs.CrashOptions{})
			files := segmentFiles(t, snap, testDir)
			newest := ""
			for name := range files {
				newest = max(newest, name)
			}
			// The new .mmm (its .idx not created yet) is the newest
			// name; everything before it is sealed.
			delete(files, newest)
			endsAtLastEntry(t, fmt.Sprintf("rotation %d", rotations), files)
		}}
		l = openMem(t, fsys, Options{IndexSync: mode, SegmentMaxBytes: 48 << 10, Preallocate: testPrealloc, Hooks: hooks, Logger: zap.NewNop()})
		all := preWrite(t, l, 200, nil)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if rotations < 3 {
			t.Fatalf("%d rotations", rotations)
		}
		l2 := openMem(t, fsys, Options{IndexSync: mode, Logger: zap.NewNop()})
		defer l2.Close()
		if r := l2.Repair(); !r.Clean() {
			t.Fatalf("reopen after a clean close repaired: %v", r.Actions)
		}
		wantAll(t, l2, all)
	})
}

// TestPreallocCrashCutsZeroTail: a power loss (or kill -9) while the
// active files carry their zero tail. Verify reports ZERO_TAIL, Open cuts
// the tails (counted as ZeroTailBytes, not as torn bytes or entries),
// every entry is there, the files end at their last entry and Verify then
// reports OK. A sealed segment with a zero index tail is still refused.
func TestPreallocCrashCutsZeroTail(t *testing.T) {
	forModes(t, func(t *testing.T, mode IndexSync) {
		fsys := vfs.NewMem()
		l := openMem(t, fsys, Options{IndexSync: mode, SegmentMaxBytes: 1 << 20, Preallocate: testPrealloc, Logger: zap.NewNop()})
		all := preWrite(t, l, 50, nil)
		l.preWait()
		seg := activeSegment(l)
		if !hasZeroTail(readVFS(t, fsys, seg.mmmPath)) || !hasZeroTail(readVFS(t, fsys, seg.idxPath)) {
			t.Fatal("no zero tail to crash with")
		}
		// A lazy index's last entries are fsynced later: sync them, so
		// that only zero tails are left to cut.
		l.wmu.Lock()
		if l.w.idxDirty {
			if err := l.syncActiveIndex(); err != nil {
				t.Fatal(err)
			}
		}
		l.wmu.Unlock()
		snap := fsys.Crash(vfs.CrashOptions{})
		l.Close()

		vr, err := Verify(testDir, Options{FS: snap}, nil)
		if err != nil || vr.Status != StatusZeroTail || vr.Recovery.ZeroTailBytes == 0 {
			t.Fatalf("verify before restart: %s %+v %v, want %s", vr.Status, vr.Recovery, err, StatusZeroTail)
		}
		rl, err := Open(testDir, Options{FS: snap, IndexSync: mode, Logger: zap.NewNop()})
		if err != nil {
			t.Fatalf("restart refused: %v", err)
		}
		r := rl.Repair()
		if r.ZeroTailBytes == 0 || r.TruncatedBytes != 0 || r.CutEntries != 0 || r.CutIndexBytes != 0 {
			t.Errorf("repair %+v: want only zero tails cut", r)
		}
		wantAll(t, rl, all)
		if got := rl.Stats().Bytes; got != seg.size {
			t.Errorf("Stats().Bytes %d, want the data's %d", got, seg.size)
		}
		rl.Close()
		endsAtLastEntry(t, "after the restart", segmentFiles(t, snap, testDir))
		if vr, err := Verify(testDir, Options{FS: snap}, nil); err != nil || vr.Status != StatusOK {
			t.Fatalf("verify after restart: %s %v %v", vr.Status, vr.Recovery.Actions, err)
		}
	})
}

// TestPreallocSealedZeroIndexTailRefused: a zero tail is accepted on the
// last segment only; a sealed segment's index ending in zero entries
// cannot have been left by a rotation (it trims and fsyncs first), so it
// is corruption, files untouched.
func TestPreallocSealedZeroIndexTailRefused(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{SegmentMaxBytes: 4 << 10, Preallocate: testPrealloc, Logger: zap.NewNop()})
	preWrite(t, l, 20, nil)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	appendFile(t, fsys, idxOf(0), make([]byte, 4096))
	before := snapshotFS(t, fsys)
	_, err := Open(testDir, Options{FS: fsys, Logger: zap.NewNop()})
	var ce *contract.CorruptionError
	if !errors.As(err, &ce) || ce.File != idxOf(0) {
		t.Fatalf("open: %v, want a corruption of %s", err, idxOf(0))
	}
	sameFiles(t, "refused open", before, snapshotFS(t, fsys))
}

// TestPreallocIdleGivesBack: a topic idle for PreallocateIdle cuts its
// zero tail (files end at the last entry, budget returned) and
// preallocates again once busy.
func TestPreallocIdleGivesBack(t *testing.T) {
	fsys := vfs.NewMem()
	budget := NewPreallocBudget(1<<20, nil)
	l := openMem(t, fsys, Options{Preallocate: testPrealloc, Preallocation: budget, PreallocateIdle: 30 * time.Millisecond, Logger: zap.NewNop()})
	defer l.Close()
	preWrite(t, l, 20, nil)
	if l.Stats().PreallocatedBytes == 0 || budget.Stats().Used == 0 {
		t.Fatal("nothing preallocated")
	}
	deadline := time.Now().Add(5 * time.Second)
	for l.Stats().PreallocatedBytes != 0 {
		if time.Now().After(deadline) {
			t.Fatal("idle topic kept its preallocated tail")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if u := budget.Stats().Used; u != 0 {
		t.Fatalf("budget still has %d bytes used", u)
	}
	endsAtLastEntry(t, "idle", segmentFiles(t, fsys, testDir))
	preWrite(t, l, 5, nil)
	if l.Stats().PreallocatedBytes == 0 {
		t.Fatal("busy again, not preallocated again")
	}
}

// TestPreallocBudgetCap: topics sharing one budget never hold more zero
// bytes together than its cap, and give all of it back when closed.
func TestPreallocBudgetCap(t *testing.T) {
	fsys := vfs.NewMem()
	const limit = 3 * testPrealloc / 2
	budget := NewPreallocBudget(limit, nil)
	var logs []*Log
	for i := range 6 {
		l, err := Open(fmt.Sprintf("t%d", i), Options{FS: fsys, Preallocate: testPrealloc, Preallocation: budget, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, l)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var peak int64
	peaked := make(chan struct{})
	go func() {
		defer close(peaked)
		for {
			select {
			case <-stop:
				return
			default:
			}
			peak = max(peak, budget.Stats().Used)
			time.Sleep(100 * time.Microsecond)
		}
	}()
	for _, l := range logs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			preWrite(t, l, 40, nil)
		}()
	}
	wg.Wait()
	close(stop)
	<-peaked
	st := budget.Stats()
	if st.Used > limit || peak > limit {
		t.Fatalf("budget used %d (peak %d), cap %d", st.Used, peak, limit)
	}
	if st.OverCap == 0 || st.Skipped != st.OverCap+st.LowSpace+st.Busy {
		t.Fatalf("budget %+v: six topics fit in a cap of one and a half, or the refusals do not add up: the cap was not exercised", st)
	}
	for _, l := range logs {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if u := budget.Stats().Used; u != 0 {
		t.Fatalf("closed topics still hold %d preallocated bytes", u)
	}
}

// TestPreallocBudgetFollowsTheData: as appends overwrite a chunk's
// zeros, the bytes they fill go back to the budget, so one busy topic
// holds about one chunk ahead of its data however much it writes, and
// the budget's Used is the zeros its files hold. Before, every chunk
// stayed held until the next trim: a cap of one and a half chunks ran out
// after the first, and the topic (and every other) stopped preallocating.
func TestPreallocBudgetFollowsTheData(t *testing.T) {
	fsys := vfs.NewMem()
	const limit = 3 * testPrealloc / 2
	budget := NewPreallocBudget(limit, nil)
	l, err := Open("t", Options{FS: fsys, Preallocate: testPrealloc, Preallocation: budget, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	preWrite(t, l, 400, nil) // about 560 KiB of entries: 8 chunks' worth
	l.preWait()
	seg := activeSegment(l)
	if seg.size < 8*testPrealloc {
		t.Fatalf("wrote %d bytes, want over %d: the test writes too little", seg.size, 8*testPrealloc)
	}
	st := budget.Stats()
	if st.OverCap != 0 {
		t.Fatalf("budget %+v: %d chunks refused by a cap of one and a half chunks for one topic: filled zeros were not given back", st, st.OverCap)
	}
	files := segmentFiles(t, fsys, "t")
	var zeros int64
	for name, b := range files {
		switch {
		case strings.HasSuffix(name, ".mmm"):
			zeros += int64(len(b)) - seg.size
		case strings.HasSuffix(name, ".idx"):
			zeros += int64(len(b)) - seg.count*IndexEntrySize
		}
	}
	// No chunk is being written (preWait): what the budget holds is what
	// the files hold ahead of the data.
	if st.Used != zeros || zeros <= 0 {
		t.Fatalf("budget holds %d bytes, the active files %d zero bytes", st.Used, zeros)
	}
}

// TestPreallocDiskGuard: no chunk is written that would leave the data
// filesystem under min-free-bytes; appends go on without preallocation.
func TestPreallocDiskGuard(t *testing.T) {
	fsys := vfs.NewMem()
	fsys.SetCapacity(4 << 20)
	guard := NewSpaceGuard(SpaceGuardOptions{FS: fsys, Dir: ".", MinFree: 4<<20 - 40<<10, Slack: 16 << 10})
	budget := NewPreallocBudget(0, guard)
	l := openMem(t, fsys, Options{Preallocate: testPrealloc, Preallocation: budget, SpaceGuard: guard, Logger: zap.NewNop()})
	all := preWrite(t, l, 10, nil)
	if st := budget.Stats(); st.Used != 0 || st.LowSpace == 0 || st.OverCap != 0 {
		t.Fatalf("budget %+v: a chunk was written under the disk guard's minimum", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2 := openMem(t, fsys, Options{Logger: zap.NewNop()})
	defer l2.Close()
	wantAll(t, l2, all)
}

// TestPreallocZeroTailReadInWindows: a 16 MiB zero tail (a large
// preallocation left by a kill) is cut at startup with a few large reads,
// one per 1 MiB window, not a scan byte by byte; the entries before it
// are all kept.
func TestPreallocZeroTailReadInWindows(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{Logger: zap.NewNop()})
	all := preWrite(t, l, 5, nil)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	const tail = 16 << 20
	appendFile(t, fsys, mmmOf(0), make([]byte, tail))
	appendFile(t, fsys, idxOf(0), make([]byte, 64<<10))
	var reads atomic.Int64
	fsys.SetHook(func(op vfs.Op, _ string) error {
		if op == vfs.OpRead {
			reads.Add(1)
		}
		return nil
	})
	rl := openMem(t, fsys, Options{Logger: zap.NewNop()})
	fsys.SetHook(nil)
	defer rl.Close()
	if r := rl.Repair(); r.ZeroTailBytes != tail+64<<10 || r.TruncatedBytes != 0 || r.CutEntries != 0 {
		t.Fatalf("repair %+v: want only the %d zero bytes cut", r, tail+64<<10)
	}
	wantAll(t, rl, all)
	if n := reads.Load(); n > tail/scanWindow+16 {
		t.Fatalf("%d reads to cut a %d-byte zero tail: not a window at a time", n, tail)
	}
	t.Logf("%d reads for a %d MiB zero tail", reads.Load(), tail>>20)
}
