package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestReopenAfterFailure: after an injected ENOSPC (the disk full) or EIO
// (a write or an fsync, of the segment or of the index), Reopen brings the
// log back at its pre-failure high watermark, on the same Log: every
// acknowledged entry is intact, nothing the failure refused is visible —
// not even the index entry of a failed index fsync that the page cache
// still holds, which a restart would take back — a Notify waiter from
// before the failure wakes on the next append, and appends work again.
// A power loss right after keeps exactly the acknowledged entries.
func TestReopenAfterFailure(t *testing.T) {
	// 68-byte entries in 256-byte segments: after 10 entries the failed
	// append goes to the active segment; after 12 it first rotates, so
	// the failure hits a segment created by the failed batch.
	for _, acked0 := range []int{10, 12} {
		t.Run(fmt.Sprintf("after %d", acked0), func(t *testing.T) { testReopenAfterFailure(t, acked0) })
	}
}

func testReopenAfterFailure(t *testing.T, acked0 int) {
	for _, tc := range []struct {
		name  string
		cause string
		fault func(t *testing.T, fsys *vfs.MemFS, on *atomic.Bool)
	}{
		{"disk full (ENOSPC)", "ENOSPC", func(t *testing.T, fsys *vfs.MemFS, _ *atomic.Bool) {
			fsys.SetCapacity(memUsed(t, fsys) + 40) // less than one entry
		}},
		{"segment fsync EIO", "EIO", eioOn(vfs.OpSync, SegmentExt)},
		{"index fsync EIO", "EIO", eioOn(vfs.OpSync, IndexExt)},
		{"segment write EIO", "EIO", eioOn(vfs.OpWrite, SegmentExt)},
		{"index write EIO", "EIO", eioOn(vfs.OpWrite, IndexExt)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := vfs.NewMem()
			opts := Options{SegmentMaxBytes: 256}
			l := openMem(t, fsys, opts)
			defer func() { l.Close() }()
			var acked [][]byte
			for i := 0; i < acked0; i++ {
				p := payload(i, 60)
				mustAppend(t, l, p)
				acked = append(acked, p)
			}
			waiter := l.Notify(int64(acked0))
			segsBefore := l.Stats().Segments
			var on atomic.Bool
			on.Store(true)
			tc.fault(t, fsys, &on)
			_, err := l.Append(context.Background(), payload(100, 60), contract.Durable)
			if c := contract.Classify(err); c.Code != contract.CodeTopicFailed || !strings.Contains(err.Error(), "("+tc.cause+")") {
				t.Fatalf("append at the fault: %v (%+v), want TOPIC_FAILED naming %s", err, c, tc.cause)
			}
			for _, lvl := range []contract.AckLevel{contract.Durable, contract.Written, contract.Accepted} {
				if _, err := l.Append(context.Background(), payload(101, 60), lvl); !errors.Is(err, ErrFailed) {
					t.Fatalf("%s append after the failure: %v", lvl, err)
				}
			}
			if rotated := l.Stats().Segments > segsBefore; rotated != (acked0 == 12) {
				t.Fatalf("the failed append rotated: %v, want %v", rotated, acked0 == 12)
			}
			// The fault is gone (space freed, the device back): reopen.
			on.Store(false)
			fsys.SetCapacity(0)
			hw, err := l.Reopen()
			if err != nil || hw != int64(acked0) {
				t.Fatalf("reopen: hw %d, %v; want %d", hw, err, acked0)
			}
			if l.Err() != nil || l.Stats().Failed != "" || l.HighWatermark() != int64(acked0) || isClosed(waiter) {
				t.Fatalf("after reopen: err %v, stats %+v, waiter closed %v", l.Err(), l.Stats(), isClosed(waiter))
			}
			got := readAll(t, l, 100)
			if len(got) != len(acked) {
				t.Fatalf("%d entries visible after reopen, %d acknowledged", len(got), len(acked))
			}
			for i := 0; i < 5; i++ {
				p := payload(200+i, 60)
				if off := mustAppend(t, l, p); off != int64(len(acked)) {
					t.Fatalf("append after reopen at %d, want %d", off, len(acked))
				}
				acked = append(acked, p)
			}
			if !isClosed(waiter) {
				t.Fatal("a Notify waiter from before the failure did not wake")
			}
			if _, err := l.Reopen(); !errors.Is(err, ErrNotFailed) {
				t.Fatalf("reopen of a healthy log: %v", err)
			}
			crashed := fsys.Crash(vfs.CrashOptions{TornTail: true})
			for _, f := range []*vfs.MemFS{fsys, crashed} {
				if f == fsys {
					l.Close()
				}
				vr, err := Verify(testDir, Options{FS: f}, nil)
				if err != nil || vr.Status != StatusOK || vr.Entries != int64(len(acked)) {
					t.Fatalf("verify: %+v %v, want OK with %d entries", vr, err, len(acked))
				}
				l2 := openMem(t, f, opts)
				got := readAll(t, l2, 100)
				l2.Close()
				if len(got) != len(acked) {
					t.Fatalf("after restart %d entries, %d acknowledged", len(got), len(acked))
				}
				for i, e := range got {
					if !bytes.Equal(e.Payload, acked[i]) {
						t.Fatalf("offset %d = %q", i, e.Payload)
					}
				}
			}
		})
	}
}

// eioOn fails op on files ending with suffix with EIO while on is set.
func eioOn(op vfs.Op, suffix string) func(*testing.T, *vfs.MemFS, *atomic.Bool) {
	return func(_ *testing.T, fsys *vfs.MemFS, on *atomic.Bool) {
		fsys.SetHook(func(o vfs.Op, name string) error {
			if on.Load() && o == op && strings.HasSuffix(name, suffix) {
				return errEIO
			}
			return nil
		})
	}
}

// memUsed is the bytes of every file of fsys.
func memUsed(t *testing.T, fsys *vfs.MemFS) int64 {
	var n int64
	for _, b := range snapshotFS(t, fsys) {
		n += int64(len(b))
	}
	return n
}

// TestReopenFailsWhileTheFaultPersists: a reopen whose own fsync fails
// leaves the log failed (TOPIC_FAILED, the new and the old cause in the
// error), refuses nothing it should not and succeeds once the fault is gone.
func TestReopenFailsWhileTheFaultPersists(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	for i := 0; i < 3; i++ {
		mustAppend(t, l, payload(i, 40))
	}
	var on atomic.Bool
	on.Store(true)
	eioOn(vfs.OpSync, "")(t, fsys, &on)
	if _, err := l.Append(context.Background(), payload(3, 40), contract.Durable); !errors.Is(err, ErrFailed) {
		t.Fatalf("append: %v", err)
	}
	_, err := l.Reopen()
	if !errors.Is(err, ErrFailed) || contract.Classify(err).Code != contract.CodeTopicFailed || l.Err() == nil {
		t.Fatalf("reopen with fsync still failing: %v (log err %v)", err, l.Err())
	}
	if _, err := l.Append(context.Background(), payload(4, 40), contract.Durable); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after a failed reopen: %v", err)
	}
	on.Store(false)
	if hw, err := l.Reopen(); err != nil || hw != 3 {
		t.Fatalf("second reopen: %d %v", hw, err)
	}
	if off := mustAppend(t, l, payload(5, 40)); off != 3 {
		t.Fatalf("append at %d, want 3", off)
	}
}

// TestAppendDuringReopenIsBusy: while Reopen runs, appends are refused at
// once with ErrReopening (409 TOPIC_BUSY), as is a second Reopen; nothing
// of them is stored.
func TestAppendDuringReopenIsBusy(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	inCut := newGate(t)
	closeAtEnd(t, l, inCut)
	mustAppend(t, l, payload(0, 40))
	var on atomic.Bool
	on.Store(true)
	eioOn(vfs.OpSync, SegmentExt)(t, fsys, &on)
	if _, err := l.Append(context.Background(), payload(1, 40), contract.Durable); !errors.Is(err, ErrFailed) {
		t.Fatalf("append: %v", err)
	}
	fsys.SetHook(func(op vfs.Op, _ string) error {
		if op == vfs.OpTruncate {
			inCut.wait()
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { _, err := l.Reopen(); done <- err }()
	<-inCut.entered
	_, err := l.Append(context.Background(), payload(2, 40), contract.Durable)
	if !errors.Is(err, ErrReopening) || contract.Classify(err).Code != contract.CodeTopicBusy {
		t.Fatalf("append during reopen: %v, want TOPIC_BUSY", err)
	}
	if _, err := l.Reopen(); !errors.Is(err, ErrReopening) {
		t.Fatalf("second reopen: %v", err)
	}
	fsys.SetHook(nil)
	inCut.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if off := mustAppend(t, l, payload(3, 40)); off != 1 {
		t.Fatalf("append after reopen at %d, want 1", off)
	}
}
