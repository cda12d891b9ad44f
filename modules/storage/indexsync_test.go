package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Tests of index-sync lazy: its fsync count, when it fsyncs the index, and
// that a topic survives a crash whatever mode wrote it and whatever mode
// opens it. The power-loss property rounds in lazy mode are in
// crash_test.go (TestPowerLossPropertyLazy and its negative control).

// TestIndexSyncFsyncCount: commit mode pays two fsyncs per group commit;
// lazy mode one, plus one index fsync per rotation and one at close.
func TestIndexSyncFsyncCount(t *testing.T) {
	const n = 20
	entry := EntrySize(len(payload(0, 40)))
	for _, tc := range []struct {
		mode        IndexSync
		segMax      int64
		wantFsyncs  int64 // after n sequential DURABLE appends
		wantIndex   int64
		wantOnClose int64 // index fsyncs Close adds
	}{
		{IndexSyncCommit, 1 << 20, 2 * n, n, 0},
		{IndexSyncLazy, 1 << 20, n, 0, 1},
		// 5 entries per segment: the 4 rotations each fsync the full
		// segment's index before the next segment exists.
		{IndexSyncLazy, 5 * entry, n + 3, 3, 1},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			fsys := vfs.NewMem()
			l := openMem(t, fsys, Options{IndexSync: tc.mode, IndexSyncInterval: time.Hour, SegmentMaxBytes: tc.segMax})
			for i := 0; i < n; i++ {
				mustAppend(t, l, payload(i, 40))
			}
			st := l.Stats()
			if st.Batches != n || st.Fsyncs != tc.wantFsyncs || st.IndexFsyncs != tc.wantIndex {
				t.Fatalf("%d group commits: %d fsyncs (%d of the index), want %d (%d)", st.Batches, st.Fsyncs, st.IndexFsyncs, tc.wantFsyncs, tc.wantIndex)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			if got := l.Stats().IndexFsyncs; got != tc.wantIndex+tc.wantOnClose {
				t.Fatalf("index fsyncs after close %d, want %d", got, tc.wantIndex+tc.wantOnClose)
			}
			// Closed cleanly, the index is complete on disk: a power loss
			// now needs no repair.
			rl := openMem(t, fsys.Crash(vfs.CrashOptions{}), Options{SegmentMaxBytes: tc.segMax})
			defer rl.Close()
			if rl.HighWatermark() != n || !rl.Repair().Clean() {
				t.Fatalf("after close and power loss: hw %d, repair %+v", rl.HighWatermark(), rl.Repair())
			}
		})
	}
}

// TestIndexSyncLazyInterval: an idle lazy topic's index is fsynced by the
// interval timer, so a power loss after it needs no re-indexing; before it,
// the entries come back from the segment.
func TestIndexSyncLazyInterval(t *testing.T) {
	fsys := vfs.NewMem()
	synced := make(chan struct{}, 16)
	obs := &syncObserver{index: synced}
	l := openMem(t, fsys, Options{IndexSync: IndexSyncLazy, IndexSyncInterval: 200 * time.Millisecond, Observer: obs})
	defer l.Close()
	for i := 0; i < 3; i++ {
		mustAppend(t, l, payload(i, 40))
	}
	before := fsys.Crash(vfs.CrashOptions{})
	if l.Stats().IndexFsyncs != 0 {
		// The interval is far longer than three appends on any machine
		// this runs on; if not, the check below would prove nothing.
		t.Fatalf("index fsynced before the interval: %+v", l.Stats())
	}
	<-synced // the timer fired on the idle topic
	after := fsys.Crash(vfs.CrashOptions{})
	for _, c := range []struct {
		fs        *vfs.MemFS
		reindexed int64
	}{{before, 3}, {after, 0}} {
		rl := openMem(t, c.fs, Options{})
		if rl.HighWatermark() != 3 || rl.Repair().ReindexedEntries != c.reindexed {
			t.Errorf("hw %d, repair %+v, want 3 entries, %d indexed again", rl.HighWatermark(), rl.Repair(), c.reindexed)
		}
		rl.Close()
	}
}

// syncObserver reports index fsyncs on a channel.
type syncObserver struct{ index chan struct{} }

func (o *syncObserver) ObserveFsync(_ string, f FileKind, _ time.Duration) {
	if f == FileIndex {
		select {
		case o.index <- struct{}{}:
		default:
		}
	}
}
func (o *syncObserver) ObserveBatch(string, int) {}

// TestIndexSyncModeSwitchAcrossCrash: a topic written in one mode, cut by
// a power loss with its index unsynced, then opened and written in the
// other mode, and cut again, never loses an acknowledged entry: repair
// needs no record of the mode that wrote it.
func TestIndexSyncModeSwitchAcrossCrash(t *testing.T) {
	for _, order := range [][]IndexSync{
		{IndexSyncLazy, IndexSyncCommit, IndexSyncLazy},
		{IndexSyncCommit, IndexSyncLazy, IndexSyncCommit},
	} {
		t.Run(order[0].String()+"-first", func(t *testing.T) {
			fsys := vfs.NewMem()
			next := 0
			for round, mode := range order {
				l := openMem(t, fsys, Options{IndexSync: mode, IndexSyncInterval: time.Hour, SegmentMaxBytes: 600})
				if got := l.HighWatermark(); got != int64(next) {
					t.Fatalf("round %d (%s): hw %d after the crash, want %d acknowledged", round, mode, got, next)
				}
				for i := 0; i < 12; i++ {
					if off := mustAppend(t, l, payload(next, 40)); off != int64(next) {
						t.Fatalf("append at %d, want %d", off, next)
					}
					next++
				}
				// Power loss with the writer still open: a lazy index
				// holds unsynced entries.
				fsys = fsys.Crash(vfs.CrashOptions{TornTail: true})
				l.Close()
			}
			l := openMem(t, fsys, Options{SegmentMaxBytes: 600})
			defer l.Close()
			got := readAll(t, l, 100)
			if len(got) != next {
				t.Fatalf("%d entries, want %d", len(got), next)
			}
			requirePayloads(t, got, 40)
		})
	}
}

// TestIndexSyncLazyFsyncFailure: a failed index fsync fails a lazy log (an
// I/O error needs an operator) without taking any acknowledged entry:
// Reopen cuts the index back to what its last good fsync covered and
// repair indexes the rest again from the segment, which was fsynced before
// any of them was answered.
func TestIndexSyncLazyFsyncFailure(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{IndexSync: IndexSyncLazy, IndexSyncInterval: 20 * time.Millisecond})
	defer l.Close()
	var fail atomic.Bool
	fsys.SetHook(func(op vfs.Op, name string) error {
		if fail.Load() && op == vfs.OpSync && strings.HasSuffix(name, IndexExt) {
			return errEIO
		}
		return nil
	})
	for i := 0; i < 4; i++ {
		mustAppend(t, l, payload(i, 40))
	}
	fail.Store(true)
	mustAppend(t, l, payload(4, 40))
	// The interval timer fires and its fsync fails.
	for deadline := time.Now().Add(10 * time.Second); l.Err() == nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the interval's index fsync never ran (the log did not fail)")
		}
	}
	if !errors.Is(l.Err(), ErrFailed) || !errors.Is(l.Err(), syscall.EIO) || !strings.Contains(l.Err().Error(), IndexExt) {
		t.Fatalf("log error %v, want a failure naming the index fsync", l.Err())
	}
	if _, err := l.Append(context.Background(), payload(5, 40), contract.Durable); !errors.Is(err, ErrFailed) {
		t.Fatalf("append to the failed log: %v", err)
	}
	// A power loss now keeps every acknowledged entry.
	rl := openMem(t, fsys.Crash(vfs.CrashOptions{TornTail: true}), Options{})
	if rl.HighWatermark() != 5 {
		t.Fatalf("after power loss: hw %d, want 5", rl.HighWatermark())
	}
	rl.Close()
	fail.Store(false)
	hw, err := l.Reopen()
	if err != nil || hw != 5 {
		t.Fatalf("reopen: %d, %v", hw, err)
	}
	if off := mustAppend(t, l, payload(5, 40)); off != 5 {
		t.Fatalf("append after reopen: %d", off)
	}
	requirePayloads(t, readAll(t, l, 100), 40)
}

func TestParseIndexSync(t *testing.T) {
	for in, want := range map[string]IndexSync{"commit": IndexSyncCommit, "LAZY": IndexSyncLazy, "Lazy": IndexSyncLazy} {
		if got, err := ParseIndexSync(in); err != nil || got != want {
			t.Errorf("ParseIndexSync(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseIndexSync("always"); err == nil || !strings.Contains(err.Error(), "commit or lazy") {
		t.Errorf("ParseIndexSync(always): %v", err)
	}
}

// TestRestartAfterKillThenPowerLoss: a killed process leaves its last
// writes in the page cache (MemFS.Kill); the restart's repair must fsync
// what it then trusts, so that a power loss after the restart takes
// nothing it served or acknowledged. Two shapes: an entry written to the
// segment but not fsynced, indexed again by the restart (and then
// acknowledged to a retry as a duplicate in the broker); and, in lazy mode,
// an index found complete in the page cache, whose segment the restarted
// writer seals at its next rotation.
func TestRestartAfterKillThenPowerLoss(t *testing.T) {
	for _, tc := range []struct {
		mode  IndexSync
		point string // where the process is killed during m3's group commit
		// syncFS: the restart syncs the whole filesystem first and opens
		// with FilesystemSynced, as the broker's local backend does.
		syncFS bool
	}{
		{IndexSyncCommit, "AfterSegmentWrite", false},
		{IndexSyncLazy, "AfterSegmentWrite", false},
		{IndexSyncLazy, "AfterAnswer", false}, // m3 answered, its index entry unsynced
		{IndexSyncCommit, "AfterSegmentWrite", true},
		{IndexSyncLazy, "AfterAnswer", true},
	} {
		mode := tc.mode
		t.Run(fmt.Sprintf("%s/%s/syncfs=%v", mode, tc.point, tc.syncFS), func(t *testing.T) {
			fsys := vfs.NewMem()
			var armed atomic.Bool
			var killed *vfs.MemFS
			var logRef atomic.Pointer[Log]
			kill := func() {
				// AfterAnswer of m2's group may come after the test armed
				// the kill (it follows the answer): only m3's counts.
				if tc.point == "AfterAnswer" && logRef.Load().HighWatermark() < 4 {
					return
				}
				if armed.CompareAndSwap(true, false) {
					killed = fsys.Kill()
				}
			}
			h := &Hooks{}
			if tc.point == "AfterAnswer" {
				h.AfterAnswer = kill
			} else {
				h.AfterSegmentWrite = kill
			}
			// The segment is full after m3: the restarted writer's first
			// append seals it.
			segMax := 4 * EntrySize(len(payload(0, 40)))
			opts := Options{IndexSync: mode, IndexSyncInterval: time.Hour, SegmentMaxBytes: segMax}
			withHooks := opts
			withHooks.Hooks = h
			l := openMem(t, fsys, withHooks)
			logRef.Store(l)
			for i := 0; i < 3; i++ {
				mustAppend(t, l, payload(i, 40))
			}
			armed.Store(true)
			mustAppend(t, l, payload(3, 40)) // killed after its segment write
			l.Close()
			// The restart finds m3 complete in the page cache.
			reopts := opts
			if tc.syncFS {
				if err := killed.SyncFS("/"); err != nil {
					t.Fatal(err)
				}
				reopts.FilesystemSynced = true
			}
			l2 := openMem(t, killed, reopts)
			if l2.HighWatermark() != 4 || (tc.point == "AfterSegmentWrite") != (l2.Repair().ReindexedEntries > 0) {
				t.Fatalf("restart: hw %d, repair %+v", l2.HighWatermark(), l2.Repair())
			}
			// A power loss right after the restart keeps what it serves.
			early := openMem(t, killed.Crash(vfs.CrashOptions{}), opts)
			if early.HighWatermark() != 4 {
				t.Fatalf("power loss right after the restart: hw %d, want the 4 it served (repair %+v)", early.HighWatermark(), early.Repair())
			}
			early.Close()
			// The restarted broker acknowledges more, across rotations.
			for i := 4; i < 30; i++ {
				mustAppend(t, l2, payload(i, 40))
			}
			if l2.Stats().Segments < 3 {
				t.Fatalf("no rotation: %+v", l2.Stats())
			}
			// Power loss with the restarted writer still open.
			l3 := openMem(t, killed.Crash(vfs.CrashOptions{}), opts)
			defer l3.Close()
			got := readAll(t, l3, 100)
			if len(got) != 30 {
				t.Fatalf("after the power loss: %d entries, want the 30 served (repair %+v)", len(got), l3.Repair())
			}
			requirePayloads(t, got, 40)
			l2.Close()
		})
	}
}
