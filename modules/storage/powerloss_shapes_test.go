package storage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// The shapes a power loss leaves on real disks (the page cache writes
// dirty pages back in any order) and the deep damage that must still be
// refused, each in both index-sync modes: the topic is written by the real
// Log, then the files are changed the way the disk would leave them, then
// the topic is opened again in that mode.

// shapeTopic writes n entries of size bytes in mode as one group commit
// after three acknowledged ones, closes the log and returns the FS and the
// payloads by offset.
func shapeTopic(t *testing.T, mode IndexSync, n, size int) (*vfs.MemFS, [][]byte) {
	t.Helper()
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{IndexSync: mode, SegmentMaxBytes: 1 << 30, IndexSyncInterval: time.Hour})
	var all [][]byte
	for i := range 3 {
		p := payload(i, size)
		mustAppend(t, l, p)
		all = append(all, p)
	}
	var batch [][]byte
	for i := range n {
		batch = append(batch, payload(3+i, size))
	}
	for len(batch) > 0 {
		k := min(len(batch), max(1, MaxGroupBytes/(size+HeaderSize)-1))
		if _, err := l.AppendBatch(context.Background(), batch[:k], contract.Durable); err != nil {
			t.Fatal(err)
		}
		all = append(all, batch[:k]...)
		batch = batch[k:]
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return fsys, all
}

func openShape(t *testing.T, fsys *vfs.MemFS, mode IndexSync) (*Log, error) {
	t.Helper()
	return Open(testDir, Options{FS: fsys, IndexSync: mode, SegmentMaxBytes: 1 << 30, Logger: zap.NewNop()})
}

func wantAll(t *testing.T, l *Log, all [][]byte) {
	t.Helper()
	if hw := l.HighWatermark(); hw != int64(len(all)) {
		t.Fatalf("high watermark %d, want %d", hw, len(all))
	}
	for off, p := range all {
		got, err := l.Read(int64(off))
		if err != nil || string(got) != string(p) {
			t.Fatalf("read %d: %.40q %v, want %.40q", off, got, err, p)
		}
	}
}

func forModes(t *testing.T, fn func(t *testing.T, mode IndexSync)) {
	for _, mode := range []IndexSync{IndexSyncCommit, IndexSyncLazy} {
		t.Run(mode.String(), func(t *testing.T) { fn(t, mode) })
	}
}

// TestPowerLossShapeZeroSectorThenData: three acknowledged entries, then a
// group commit that was written but never fsynced: a fourth entry of about
// 2 KB spanning several 512-byte sectors with one whole sector in its
// middle zeroed, and a CRC-valid fifth entry, neither in the index. The
// topic opens with the three acknowledged entries; the two others are cut
// and the valid one counted.
func TestPowerLossShapeZeroSectorThenData(t *testing.T) {
	forModes(t, func(t *testing.T, mode IndexSync) {
		fsys, all := shapeTopic(t, mode, 0, 40)
		seg := mmmOf(0)
		start := int64(0)
		if b, err := fsys.ReadFile(seg); err == nil {
			start = int64(len(b))
		}
		tail := AppendEntry(nil, payload(3, 2100))
		tail = AppendEntry(tail, payload(4, 40))
		sector := (start/512 + 2) * 512
		clear(tail[sector-start : sector-start+512])
		appendFile(t, fsys, seg, tail)
		l, err := openShape(t, fsys, mode)
		if err != nil {
			t.Fatalf("open refused a torn group commit: %v", err)
		}
		defer l.Close()
		wantAll(t, l, all)
		if r := l.Repair(); r.CutValidEntries != 1 || r.TruncatedBytes != int64(len(tail)) {
			t.Fatalf("report %+v: want 1 valid entry cut, %d bytes truncated", r, len(tail))
		}
	})
}

// TestPowerLossShapeIndexPageLost: one group commit of 600 entries whose
// index write crosses a 4 KiB page boundary; the first page persisted only
// as far as the last fsync (the three earlier entries), the second page
// persisted. The segment was fsynced before the index was written, so all
// 603 entries are served and the lost page is rebuilt.
func TestPowerLossShapeIndexPageLost(t *testing.T) {
	forModes(t, func(t *testing.T, mode IndexSync) {
		fsys, all := shapeTopic(t, mode, 600, 30)
		patchFile(t, fsys, idxOf(0), func(b []byte) []byte {
			if len(b) != 603*IndexEntrySize {
				t.Fatalf("index is %d bytes, want 603 entries", len(b))
			}
			clear(b[3*IndexEntrySize : 4096])
			return b
		})
		l, err := openShape(t, fsys, mode)
		if err != nil {
			t.Fatalf("open refused a lost index page: %v", err)
		}
		defer l.Close()
		wantAll(t, l, all)
		if r := l.Repair(); r.CutEntries != 4096/IndexEntrySize-3 || r.ReindexedEntries != 600 {
			t.Fatalf("report %+v: want %d zero index entries cut, 600 indexed again", r, 4096/IndexEntrySize-3)
		}
	})
}

// lagTopic writes about mib MiB of entries and cuts the index back to its
// first three entries: an index lagging mib MiB behind its segment.
func lagTopic(t *testing.T, mode IndexSync, mib int) (*vfs.MemFS, [][]byte) {
	t.Helper()
	const size = 2000
	fsys, all := shapeTopic(t, mode, mib<<20/(size+HeaderSize), size)
	patchFile(t, fsys, idxOf(0), func(b []byte) []byte { return b[:3*IndexEntrySize] })
	return fsys, all
}

// TestPowerLossShapeIndexLags40MiB: the index of the last segment lists 3
// entries of a 40 MiB segment (a lazily synced index, or one written by
// another mode). The walk indexes every entry again.
func TestPowerLossShapeIndexLags40MiB(t *testing.T) {
	forModes(t, func(t *testing.T, mode IndexSync) {
		fsys, all := lagTopic(t, mode, 40)
		start := time.Now()
		l, err := openShape(t, fsys, mode)
		if err != nil {
			t.Fatalf("open refused a lagging index: %v", err)
		}
		defer l.Close()
		t.Logf("%s: opened with %d entries indexed again in %v", mode, l.Repair().ReindexedEntries, time.Since(start))
		wantAll(t, l, all)
	})
}

// TestPowerLossShapeDamage40MiBBeforeEnd: the same lagging index, with one
// payload byte flipped 40 MiB before the end of the unindexed, fsynced
// data. Valid entries follow the damage for far more than a group commit,
// so it is corruption: refused, naming the file, the byte and the offset,
// with every file left as it was.
func TestPowerLossShapeDamage40MiBBeforeEnd(t *testing.T) {
	forModes(t, func(t *testing.T, mode IndexSync) {
		fsys, all := lagTopic(t, mode, 41)
		seg := mmmOf(0)
		b, _ := fsys.ReadFile(seg)
		// The entry that starts 40 MiB (or a little more) before the end.
		var pos, off int64
		for i := range all {
			if int64(len(b))-pos <= 40<<20 {
				off = int64(i)
				break
			}
			pos += EntrySize(len(all[i]))
		}
		patchFile(t, fsys, seg, func(b []byte) []byte { b[pos+HeaderSize+5] ^= 0x01; return b })
		before := snapshotFS(t, fsys)
		_, err := openShape(t, fsys, mode)
		ce := asCorruption(t, err)
		want := fmt.Sprintf("entry at byte %d is invalid", pos)
		if ce.Pos != pos || ce.Offset != off || !strings.HasSuffix(ce.File, SegmentName(0)+SegmentExt) || !strings.Contains(ce.Reason, want) {
			t.Fatalf("refusal %+v; want %s byte %d, offset %d, %q", ce, seg, pos, off, want)
		}
		sameFiles(t, "refused open", before, snapshotFS(t, fsys))
	})
}
