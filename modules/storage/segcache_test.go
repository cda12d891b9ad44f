package storage

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// openCounting opens the test topic on a MemFS wrapped in a CountingFS, whose
// OpenFiles and MaxOpenFiles count the descriptors the log holds.
func openCounting(t *testing.T, fsys *vfs.CountingFS, o Options) *Log {
	t.Helper()
	o.FS = fsys
	o.Logger = zaptest.NewLogger(t)
	l, err := Open(testDir, o)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return l
}

// TestOpenFilesBoundedBySegmentCache: a log with many more segments than
// its cache holds never has more than capacity pairs open — the active
// segment, the one a rotation is creating and the pairs readers pin
// included — while several goroutines read every offset back with Read and
// ReadBatch and appends (and rotations) go on. Repair on reopen, Verify and
// Dump hold one segment's files at a time, and Close leaves none open.
func TestOpenFilesBoundedBySegmentCache(t *testing.T) {
	const capacity, readers, before, during = 4, 4, 300, 200
	fsys := vfs.NewCounting(vfs.NewMem())
	o := Options{SegmentMaxBytes: 1024, MaxOpenSegments: capacity}
	l := openCounting(t, fsys, o)
	for i := 0; i < before; i++ {
		mustAppend(t, l, payload(i, 200))
	}
	if n := l.Stats().Segments; n < 10*capacity {
		t.Fatalf("want many more segments than the cache holds, got %d", n)
	}
	bound := int64(2 * capacity)

	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() { // appends and rotations go on during the reads
		defer wg.Done()
		defer close(done)
		for i := before; i < before+during; i++ {
			mustAppend(t, l, payload(i, 200))
		}
	}()
	check := func(off int64, got []byte) bool {
		if want := payload(int(off), 200); !bytes.Equal(got, want) {
			t.Errorf("offset %d: got %.30q, want %.30q", off, got, want)
			return false
		}
		return true
	}
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for pass := 0; ; pass++ {
				hw := l.HighWatermark()
				for k := int64(0); k < hw; k++ {
					off := (k*int64(7+2*r) + int64(r)) % hw // each reader its own order
					p, err := l.Read(off)
					if err != nil {
						t.Errorf("read %d: %v", off, err)
						return
					}
					if !check(off, p) {
						return
					}
				}
				for off := int64(0); off < hw; {
					es, err := l.ReadBatch(off, 3+r)
					if err != nil || len(es) == 0 {
						t.Errorf("read batch %d: %d entries, %v", off, len(es), err)
						return
					}
					for _, e := range es {
						if e.Offset != off || !check(off, e.Payload) {
							return
						}
						off++
					}
				}
				select {
				case <-done:
					if pass > 0 {
						return
					}
				default:
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if peak := fsys.MaxOpenFiles.Load(); peak > bound {
		t.Errorf("%d files open at the peak with %d segments; want <= %d (cache of %d pairs)", peak, l.Stats().Segments, bound, capacity)
	}
	if got := l.cache.Len(); got > capacity {
		t.Errorf("cache holds %d pairs, capacity %d", got, capacity)
	}
	hw := l.HighWatermark()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := fsys.OpenFiles.Load(); n != 0 {
		t.Fatalf("%d files open after Close", n)
	}

	// Repair of the reopened log, Verify and Dump: one segment at a time.
	fsys.MaxOpenFiles.Store(0)
	l = openCounting(t, fsys, o)
	if got := l.HighWatermark(); got != hw {
		t.Fatalf("reopened high watermark %d, want %d", got, hw)
	}
	if peak := fsys.MaxOpenFiles.Load(); peak > 4 {
		t.Errorf("repair held %d files open at once; want <= 4", peak)
	}
	for _, e := range readAll(t, l, 50) {
		check(e.Offset, e.Payload)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	fsys.MaxOpenFiles.Store(0)
	if rep, err := Verify(testDir, Options{FS: fsys}, nil); err != nil || rep.Status != StatusOK || rep.Entries != hw {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
	n := int64(0)
	if err := Dump(testDir, Options{FS: fsys}, 0, 0, func(DumpEntry) error { n++; return nil }); err != nil || n != hw {
		t.Fatalf("dump: %d entries, %v", n, err)
	}
	if peak, open := fsys.MaxOpenFiles.Load(), fsys.OpenFiles.Load(); peak > 2 || open != 0 {
		t.Errorf("verify and dump: %d files open at the peak, %d after; want <= 2 and 0", peak, open)
	}
}

// TestSegmentCachePinOutlivesEviction: a pair evicted while a reader pins
// it (as Close evicts every pair of its log) stays open and readable until
// the reader releases it, then closes; the segment reopens on its next read.
func TestSegmentCachePinOutlivesEviction(t *testing.T) {
	fsys := vfs.NewCounting(vfs.NewMem())
	l := openCounting(t, fsys, Options{SegmentMaxBytes: 1024, MaxOpenSegments: 2})
	defer l.Close()
	for i := 0; i < 30; i++ {
		mustAppend(t, l, payload(i, 200))
	}
	segs := *l.segs.Load()
	if len(segs) < 4 {
		t.Fatalf("want 4+ segments, got %d", len(segs))
	}
	f0, err := l.pin(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	open := fsys.OpenFiles.Load()
	l.cache.drop(segs[:1])
	if segs[0].files.Load() != nil {
		t.Fatal("segment 0 still attached after it was evicted")
	}
	if got := fsys.OpenFiles.Load(); got != open {
		t.Fatalf("%d files open after evicting a pinned pair, want %d (still open)", got, open)
	}
	pos, err := f0.readPositions(0, 1, nil)
	if err != nil {
		t.Fatalf("read of an evicted but pinned pair: %v", err)
	}
	if p, err := f0.readEntryAt(pos[0], -1, defaultMaxRecordBytes); err != nil || !bytes.Equal(p, payload(0, 200)) {
		t.Fatalf("entry 0 through the pinned pair: %.30q, %v", p, err)
	}
	f0.unpin()
	if got := fsys.OpenFiles.Load(); got != open-2 {
		t.Fatalf("%d files open after the last pin of the evicted pair was released, want %d", got, open-2)
	}
	if p, err := l.Read(0); err != nil || !bytes.Equal(p, payload(0, 200)) {
		t.Fatalf("read 0 after eviction: %.30q, %v", p, err)
	}
}

// TestSegmentCacheMissWaitsForRoom: with a cache of 1 pair pinned by a
// reader, a read of another segment waits for the pin to be released
// instead of opening more files, then completes; at no time are more than
// 2 files open.
func TestSegmentCacheMissWaitsForRoom(t *testing.T) {
	fsys := vfs.NewCounting(vfs.NewMem())
	l := openCounting(t, fsys, Options{SegmentMaxBytes: 1024, MaxOpenSegments: 1})
	defer l.Close()
	for i := 0; i < 10; i++ {
		mustAppend(t, l, payload(i, 200))
	}
	segs := *l.segs.Load()
	f0, err := l.pin(segs[0])
	if err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			f0.unpin() // never leave the other reader waiting
		}
	})
	fsys.MaxOpenFiles.Store(fsys.OpenFiles.Load())
	got := make(chan error, 1)
	go func() {
		p, err := l.Read(segs[1].base)
		if err == nil && !bytes.Equal(p, payload(int(segs[1].base), 200)) {
			err = fmt.Errorf("offset %d holds %.30q", segs[1].base, p)
		}
		got <- err
	}()
	for waiting := 0; waiting == 0; runtime.Gosched() {
		select {
		case err := <-got:
			t.Fatalf("the read of segment 1 finished (%v) while the only pair was pinned", err)
		default:
		}
		waiting = int(l.cache.waits.Load())
	}
	released = true
	f0.unpin()
	if err := <-got; err != nil {
		t.Fatalf("read of segment 1 after the pin was released: %v", err)
	}
	if peak := fsys.MaxOpenFiles.Load(); peak > 2 {
		t.Fatalf("%d files open at the peak with a cache of 1 pair, want <= 2", peak)
	}
}

// TestReadMissingSealedFileIsIOError: when a sealed segment's file is gone
// by the time a read reopens it, Read and ReadBatch return an I/O error
// wrapping fs.ErrNotExist that names the file, never an empty read, an
// out-of-range or a corruption.
func TestReadMissingSealedFileIsIOError(t *testing.T) {
	for _, file := range []string{"segment", "index"} {
		t.Run(file, func(t *testing.T) {
			fsys := vfs.NewCounting(vfs.NewMem())
			l := openCounting(t, fsys, Options{SegmentMaxBytes: 1024, MaxOpenSegments: 1})
			defer l.Close()
			for i := 0; i < 30; i++ {
				mustAppend(t, l, payload(i, 200))
			}
			segs := *l.segs.Load()
			if _, err := l.Read(segs[1].base); err != nil { // evicts segs[0]
				t.Fatal(err)
			}
			path := segs[0].mmmPath
			if file == "index" {
				path = segs[0].idxPath
			}
			if err := fsys.Remove(path); err != nil {
				t.Fatal(err)
			}
			p, err := l.Read(1)
			if err == nil || !errors.Is(err, fs.ErrNotExist) || errors.Is(err, contract.ErrOutOfRange) || errors.Is(err, contract.ErrCorrupt) {
				t.Fatalf("read with %s missing: %q, %v; want an error wrapping fs.ErrNotExist", path, p, err)
			}
			if !bytes.Contains([]byte(err.Error()), []byte(path)) {
				t.Errorf("error %q does not name %s", err, path)
			}
			es, err := l.ReadBatch(0, 10)
			if len(es) != 0 || err == nil || !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("read batch with %s missing: %d entries, %v; want none and an error wrapping fs.ErrNotExist", path, len(es), err)
			}
		})
	}
}

// TestIdleTopicsHoldNoFiles: 40 topics share a cache of 4 pairs. Their
// active segments are evicted like sealed ones once their commits are
// done, so after appends and reads to every topic at most 4 pairs are
// open; an evicted active segment is reopened read-write by its next
// append (a read-only pair a reader cached meanwhile is replaced, and a
// reader still pinning it keeps reading); every entry reads back, and
// Close leaves nothing open.
func TestIdleTopicsHoldNoFiles(t *testing.T) {
	const topics, capacity = 40, 4
	fsys := vfs.NewCounting(vfs.NewMem())
	cache := NewSegmentCache(capacity)
	o := Options{FS: fsys, Logger: zaptest.NewLogger(t), SegmentCache: cache}
	logs := make([]*Log, topics)
	for i := range logs {
		l, err := Open(fmt.Sprintf("data/t%d", i), o)
		if err != nil {
			t.Fatalf("open topic %d: %v", i, err)
		}
		logs[i] = l
	}
	bounded := func(when string) {
		t.Helper()
		if n := fsys.OpenFiles.Load(); n > 2*capacity {
			t.Fatalf("%s: %d files open, want at most %d (2 per cached pair)", when, n, 2*capacity)
		}
	}
	bounded("after creating the topics")
	for round := 0; round < 3; round++ {
		for i, l := range logs {
			if off := mustAppend(t, l, payload(i*10+round, 50)); off != int64(round) {
				t.Fatalf("round %d topic %d: offset %d", round, i, off)
			}
		}
		bounded(fmt.Sprintf("after append round %d", round))
		for i, l := range logs {
			for off := 0; off <= round; off++ {
				if p, err := l.Read(int64(off)); err != nil || !bytes.Equal(p, payload(i*10+off, 50)) {
					t.Fatalf("topic %d offset %d: %.30q, %v", i, off, p, err)
				}
			}
		}
		bounded(fmt.Sprintf("after read round %d", round))
	}
	if cache.opens.Load() < topics {
		t.Fatalf("%d opens: the active segments were never evicted and reopened", cache.opens.Load())
	}

	// A reader pins a read-only pair of topic 0's active segment; the
	// next append replaces it with a read-write pair and the reader's
	// pair stays usable until it is released.
	l := logs[0]
	seg := (*l.segs.Load())[0]
	cache.drop([]*segment{seg})
	ro, err := l.pin(seg)
	if err != nil || ro.writable {
		t.Fatalf("pin of an evicted active segment: writable=%v, %v", ro != nil && ro.writable, err)
	}
	mustAppend(t, l, payload(3, 50))
	if f := seg.files.Load(); f == nil || !f.writable || f == ro {
		t.Fatal("the append did not replace the reader's read-only pair with a read-write one")
	}
	pos, err := ro.readPositions(0, 1, nil)
	if err != nil {
		t.Fatalf("read through the replaced pair: %v", err)
	}
	if p, err := ro.readEntryAt(pos[0], -1, defaultMaxRecordBytes); err != nil || !bytes.Equal(p, payload(0, 50)) {
		t.Fatalf("entry 0 through the replaced pair: %.30q, %v", p, err)
	}
	ro.unpin()
	bounded("after the replaced pair was released")

	for _, l := range logs {
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := fsys.OpenFiles.Load(); n != 0 {
		t.Fatalf("%d files open after every log closed", n)
	}
}

// TestMaxOpenSegmentsFromTheLimit: the automatic capacity is a quarter of
// the open-file limit within 1..4096 (never more than a quarter: at a limit
// of 24 a floor of 16 pairs would take 32 descriptors), and a configured capacity whose
// descriptors exceed half of the limit is refused naming the key, the limit
// and the largest value that fits.
func TestMaxOpenSegmentsFromTheLimit(t *testing.T) {
	for _, tc := range []struct {
		limit uint64
		auto  int
	}{{0, 256}, {3, 1}, {24, 6}, {40, 10}, {1024, 256}, {20000, 4096}, {1 << 20, 4096}} {
		if got := AutoMaxOpenSegments(tc.limit); got != tc.auto {
			t.Errorf("AutoMaxOpenSegments(%d) = %d, want %d", tc.limit, got, tc.auto)
		}
	}
	for _, tc := range []struct {
		n     int
		limit uint64
		ok    bool
	}{{0, 1024, true}, {256, 1024, true}, {257, 1024, false}, {512, 1024, false}, {5000, 20000, true}, {100000, 0, true}} {
		err := CheckMaxOpenSegments(tc.n, tc.limit)
		if (err == nil) != tc.ok {
			t.Errorf("CheckMaxOpenSegments(%d, %d) = %v, want ok=%v", tc.n, tc.limit, err, tc.ok)
		}
		if err != nil && (!strings.Contains(err.Error(), "mmmq.broker.storage.max-open-segments") || !strings.Contains(err.Error(), fmt.Sprint(tc.limit/4))) {
			t.Errorf("error %q does not name the key and the largest value that fits (%d)", err, tc.limit/4)
		}
	}
}
