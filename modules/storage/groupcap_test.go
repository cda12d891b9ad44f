package storage

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// syncedSizes records, for every fsync of a file whose name ends in ext,
// how many bytes the file grew since the previous one: the bytes one
// group commit left unsynced.
type syncedSizes struct {
	mu    sync.Mutex
	fsys  *vfs.MemFS
	ext   string
	last  map[string]int
	grown []int
}

func watchSyncs(fsys *vfs.MemFS, ext string) *syncedSizes {
	s := &syncedSizes{fsys: fsys, ext: ext, last: map[string]int{}}
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op != vfs.OpSync || !strings.HasSuffix(name, ext) {
			return nil
		}
		b, err := fsys.ReadFile(name)
		if err != nil {
			return nil
		}
		s.mu.Lock()
		s.grown = append(s.grown, len(b)-s.last[name])
		s.last[name] = len(b)
		s.mu.Unlock()
		return nil
	})
	return s
}

// TestGroupCommitCapsSegmentBytes: a batch far larger than MaxGroupBytes
// becomes several group commits, none of which leaves more than
// MaxGroupBytes of the segment unsynced, and it is answered once, after
// the last, with every entry readable; one entry larger than the cap is a
// group of its own. Recovery's damage window relies on this bound.
func TestGroupCommitCapsSegmentBytes(t *testing.T) {
	for _, mode := range []IndexSync{IndexSyncCommit, IndexSyncLazy} {
		t.Run(mode.String(), func(t *testing.T) {
			fsys := vfs.NewMem()
			l := openMem(t, fsys, Options{IndexSync: mode, MaxRecordBytes: 3 << 20, SegmentMaxBytes: 64 << 20})
			defer l.Close()
			w := watchSyncs(fsys, SegmentExt)
			var batch [][]byte
			total := 0
			for i := 0; total < 5*MaxGroupBytes; i++ {
				p := payload(i, 1000)
				batch = append(batch, p)
				total += int(EntrySize(len(p)))
			}
			first, err := l.AppendBatch(context.Background(), batch, contract.Durable)
			if err != nil || first != 0 {
				t.Fatalf("append batch: first %d, %v", first, err)
			}
			big := payload(-1, 2<<20)
			if off := mustAppend(t, l, big); off != int64(len(batch)) {
				t.Fatalf("big entry at offset %d, want %d", off, len(batch))
			}
			w.mu.Lock()
			grown := append([]int(nil), w.grown...)
			w.mu.Unlock()
			fsys.SetHook(nil)
			if len(grown) < 6 {
				t.Fatalf("segment fsyncs grew the file by %v: want at least 5 group commits for %d bytes and one for the big entry", grown, total)
			}
			for i, g := range grown[:len(grown)-1] {
				if g > MaxGroupBytes {
					t.Errorf("group commit %d left %d segment bytes unsynced, over MaxGroupBytes %d", i, g, MaxGroupBytes)
				}
			}
			if g := grown[len(grown)-1]; g != int(EntrySize(len(big))) {
				t.Errorf("the big entry's group wrote %d bytes, want only the entry (%d)", g, EntrySize(len(big)))
			}
			got := readAll(t, l, 1<<30)
			if len(got) != len(batch)+1 {
				t.Fatalf("read back %d entries, want %d", len(got), len(batch)+1)
			}
		})
	}
}

// TestLazyIndexSyncedByBytes: in lazy mode with an interval that never
// fires during the test, the index is still fsynced once the segment bytes
// its unsynced entries cover reach LazyIndexSyncBytes.
func TestLazyIndexSyncedByBytes(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{IndexSync: IndexSyncLazy, IndexSyncInterval: time.Hour, SegmentMaxBytes: 64 << 20})
	defer l.Close()
	w := watchSyncs(fsys, IndexExt)
	p := payload(0, 4000)
	var batch [][]byte
	for range 64 {
		batch = append(batch, p)
	}
	var written int64
	for written < 3*LazyIndexSyncBytes {
		if _, err := l.AppendBatch(context.Background(), batch, contract.Durable); err != nil {
			t.Fatal(err)
		}
		written += int64(len(batch)) * EntrySize(len(p))
	}
	w.mu.Lock()
	n := len(w.grown)
	w.mu.Unlock()
	fsys.SetHook(nil)
	if n < 2 {
		t.Fatalf("%d index fsyncs after %d segment bytes in lazy mode with a 1h interval: want at least 2 (one per %d bytes)", n, written, LazyIndexSyncBytes)
	}
}
