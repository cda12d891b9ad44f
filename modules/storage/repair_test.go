package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// The topic every corruption case starts from: 23 entries of 48 bytes
// (40-byte payloads) written by the real Log with SegmentMaxBytes 200, so
// five entries per segment (rotation is checked before an append, at 240
// bytes): segments 0, 5, 10, 15 (sealed, 240 bytes, 5 index entries) and 20
// (active, 3 entries at 0, 48, 96, 144 bytes).
const (
	fxEntries  = 23
	fxPayload  = 40
	fxEntry    = HeaderSize + fxPayload
	fxSegBytes = 200
	fxLastBase = 20
)

func fxOptions() Options { return Options{SegmentMaxBytes: fxSegBytes} }

func fxPayloadAt(off int64) []byte { return payload(int(off), fxPayload) }

func buildFixture(t *testing.T) *vfs.MemFS {
	t.Helper()
	fsys := vfs.NewMem()
	l := openMem(t, fsys, fxOptions())
	for i := int64(0); i < fxEntries; i++ {
		if off := mustAppend(t, l, fxPayloadAt(i)); off != i {
			t.Fatalf("append %d got offset %d", i, off)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, base := range []int64{0, 5, 10, 15, 20} {
		want := int64(5 * fxEntry)
		if base == fxLastBase {
			want = 3 * fxEntry
		}
		if b, _ := fsys.ReadFile(mmmOf(base)); int64(len(b)) != want {
			t.Fatalf("fixture segment %d is %d bytes, want %d", base, len(b), want)
		}
	}
	return fsys
}

func mmmOf(base int64) string { return path.Join(testDir, SegmentName(base)+SegmentExt) }
func idxOf(base int64) string { return path.Join(testDir, SegmentName(base)+IndexExt) }

// snapshotFS returns every file below the MemFS root with its bytes.
func snapshotFS(t testing.TB, fsys *vfs.MemFS) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := fsys.List(dir)
		if err != nil {
			t.Fatalf("list %s: %v", dir, err)
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name)
			if e.IsDir {
				walk(p)
				continue
			}
			b, err := fsys.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = b
		}
	}
	walk(".")
	return out
}

func sameFiles(t testing.TB, what string, before, after map[string][]byte) {
	t.Helper()
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			t.Errorf("%s: %s was removed", what, p)
		case !bytes.Equal(a, b):
			t.Errorf("%s: %s changed (%d → %d bytes)", what, p, len(b), len(a))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s was created", what, p)
		}
	}
}

// Named corruption functions, in the style of etcd's repair_test.go
// corruptFunc: each one damages the fixture topic in one way a crash, a
// power loss or a bad disk can, and TestRecoveryCorruption runs each one
// as a subtest. First the file helpers they are built from.

func appendFile(t *testing.T, fsys *vfs.MemFS, name string, extra []byte) {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if err != nil && !vfs.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := fsys.WriteFile(name, append(b, extra...), true); err != nil {
		t.Fatal(err)
	}
}

func patchFile(t *testing.T, fsys *vfs.MemFS, name string, fn func(b []byte) []byte) {
	t.Helper()
	b, err := fsys.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := fsys.WriteFile(name, fn(b), true); err != nil {
		t.Fatal(err)
	}
}

func setIndex(t *testing.T, fsys *vfs.MemFS, base int64, rel int, pos uint64) {
	patchFile(t, fsys, idxOf(base), func(b []byte) []byte {
		binary.BigEndian.PutUint64(b[rel*IndexEntrySize:], pos)
		return b
	})
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func removeFile(t *testing.T, fsys *vfs.MemFS, name string) {
	t.Helper()
	if err := fsys.Remove(name); err != nil {
		t.Fatal(err)
	}
	if err := fsys.SyncDir(path.Dir(name)); err != nil {
		t.Fatal(err)
	}
}

// corruptNothing leaves the fixture as written: the control case.
func corruptNothing(*testing.T, *vfs.MemFS) {}

// corruptTornIndexTail appends the first 3 bytes of a 24th index entry to
// the last segment's index, as a crash mid-write of the .idx leaves it.
func corruptTornIndexTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, idxOf(fxLastBase), be64(3 * fxEntry)[:3])
}

// corruptTornIndexTailWithEntry writes entry 23 to the last segment but only
// 5 bytes of its index entry: the entry was never acknowledged.
func corruptTornIndexTailWithEntry(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxLastBase), AppendEntry(nil, fxPayloadAt(23)))
	appendFile(t, fsys, idxOf(fxLastBase), be64(3 * fxEntry)[:5])
}

// corruptZeroPaddedIndexTail appends 16 zero bytes (two index entries
// pointing at 0) to the last segment's index: its size reached the disk, its
// data did not.
func corruptZeroPaddedIndexTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, idxOf(fxLastBase), make([]byte, 16))
}

// corruptZeroPaddedIndexOverEntries writes entries 23 and 24 to the last
// segment and appends 16 zero bytes to its index instead of their positions.
func corruptZeroPaddedIndexOverEntries(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxLastBase), AppendEntry(AppendEntry(nil, fxPayloadAt(23)), fxPayloadAt(24)))
	appendFile(t, fsys, idxOf(fxLastBase), make([]byte, 16))
}

// corruptTornSegmentTail appends the first 30 bytes of entry 23 to the last
// segment, with no index entry.
func corruptTornSegmentTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxLastBase), AppendEntry(nil, fxPayloadAt(23))[:30])
}

// corruptZeroFilledSegmentTail appends 100 zero bytes to the last segment,
// with no index entry.
func corruptZeroFilledSegmentTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxLastBase), make([]byte, 100))
}

// corruptIndexIntoPreviousEntry points the index entry of offset 21 (second
// to last) 12 bytes into entry 21's own bytes, so entry 21 does not end
// where 22 starts.
func corruptIndexIntoPreviousEntry(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, fxLastBase, 1, fxEntry+12)
}

// corruptLastIndexIntoEntry points the index entry of offset 22 (the last)
// into the middle of entry 21.
func corruptLastIndexIntoEntry(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, fxLastBase, 2, fxEntry+24)
}

// corruptIndexShorterThanSegment appends entries 23, 24 and 25 to the last
// segment and none to its index: what a lazily synced index leaves after a
// power loss (the segment was fsynced, the index was not).
func corruptIndexShorterThanSegment(t *testing.T, fsys *vfs.MemFS) {
	var b []byte
	for off := int64(23); off <= 25; off++ {
		b = AppendEntry(b, fxPayloadAt(off))
	}
	appendFile(t, fsys, mmmOf(fxLastBase), b)
}

// corruptEmptyLastIndex empties the last segment's index: none of its
// three entries was ever synced there.
func corruptEmptyLastIndex(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, idxOf(fxLastBase), func([]byte) []byte { return []byte{} })
}

// corruptIndexTailThenTornEntry appends entries 23 and 24 and the first 30
// bytes of entry 25 to the last segment, none of them to its index.
func corruptIndexTailThenTornEntry(t *testing.T, fsys *vfs.MemFS) {
	b := AppendEntry(AppendEntry(nil, fxPayloadAt(23)), fxPayloadAt(24))
	appendFile(t, fsys, mmmOf(fxLastBase), append(b, AppendEntry(nil, fxPayloadAt(25))[:30]...))
}

// corruptInvalidEntryBeforeValidAfterIndex appends entries 23, 24 (one
// payload bit flipped) and 25 to the last segment, none to its index: an
// invalid entry with a valid one after it is damage, not a torn tail.
func corruptInvalidEntryBeforeValidAfterIndex(t *testing.T, fsys *vfs.MemFS) {
	bad := AppendEntry(nil, fxPayloadAt(24))
	bad[HeaderSize+2] ^= 0x10
	b := append(AppendEntry(nil, fxPayloadAt(23)), bad...)
	appendFile(t, fsys, mmmOf(fxLastBase), AppendEntry(b, fxPayloadAt(25)))
}

// corruptInvalidEntryBeforeValidBeyondWindow appends entries 23, 24 (one
// payload bit flipped) and then valid entries 25, 26, … to the last
// segment, none to its index, until a valid entry starts more than
// DamageWindow after the damaged one: no group commit can leave that much
// unsynced, so the damage lies in fsynced bytes.
func corruptInvalidEntryBeforeValidBeyondWindow(t *testing.T, fsys *vfs.MemFS) {
	bad := AppendEntry(nil, fxPayloadAt(24))
	bad[HeaderSize+2] ^= 0x10
	b := append(AppendEntry(nil, fxPayloadAt(23)), bad...)
	for off := int64(25); int64(len(b)) < DamageWindow+4*fxEntry; off++ {
		b = AppendEntry(b, fxPayloadAt(off))
	}
	appendFile(t, fsys, mmmOf(fxLastBase), b)
}

// corruptLengthClaimBeyondWindow is corruptInvalidEntryBeforeValidBeyondWindow
// with the damage in entry 24's length field instead of its payload: the
// length claims almost all the bytes after it (still within the file),
// more than a group commit. A claim read from damaged bytes must not widen
// the window over the fsynced entries that follow.
func corruptLengthClaimBeyondWindow(t *testing.T, fsys *vfs.MemFS) {
	b := AppendEntry(nil, fxPayloadAt(23))
	at := len(b)
	b = AppendEntry(b, fxPayloadAt(24))
	for off := int64(25); int64(len(b)) < DamageWindow+64*fxEntry; off++ {
		b = AppendEntry(b, fxPayloadAt(off))
	}
	binary.BigEndian.PutUint32(b[at:], uint32(len(b)-at-HeaderSize-fxEntry))
	appendFile(t, fsys, mmmOf(fxLastBase), b)
}

// corruptZeroSectorThenValid appends, after the indexed entries, an entry
// of 2000 bytes with one whole 512-byte sector in its middle zeroed, a
// second one whole, then a small valid entry, none indexed: a group commit
// whose later pages reached the disk while an earlier one did not.
func corruptZeroSectorThenValid(t *testing.T, fsys *vfs.MemFS) {
	start := 3 * fxEntry
	b := AppendEntry(nil, bytes.Repeat([]byte("a"), 2000))
	b = AppendEntry(b, bytes.Repeat([]byte("b"), 2000))
	b = AppendEntry(b, fxPayloadAt(99))
	sector := (start/512 + 1) * 512
	clear(b[sector-start : sector-start+512])
	appendFile(t, fsys, mmmOf(fxLastBase), b)
}

// corruptZeroIndexThenValid zeroes the index entry of offset 21, leaving
// entry 22 after it: an index page lost while the next one persisted.
func corruptZeroIndexThenValid(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, fxLastBase, 1, 0)
}

// corruptZeroIndexDamagedEntryValidIndex zeroes the index entry of offset
// 21 and flips a bit of entry 21 in the segment, leaving index entry 22
// valid: the index vouches for bytes after the damage, so they had been
// fsynced.
func corruptZeroIndexDamagedEntryValidIndex(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, fxLastBase, 1, 0)
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte { b[fxEntry+HeaderSize+3] ^= 0x01; return b })
}

// corruptIndexDisagreesWithWalk sets the index entry of offset 22 to the
// position of entry 21, a valid entry the walk puts at offset 21.
func corruptIndexDisagreesWithWalk(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, fxLastBase, 2, fxEntry)
}

// corruptIndexBeyondTornSegmentTail appends the first 30 bytes of entry 23
// to the last segment and index entries for 23 and 24: an index entry is
// written only after the bytes it points at were fsynced, so an index that
// points past the segment's end is damage whatever the index-sync mode.
func corruptIndexBeyondTornSegmentTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxLastBase), AppendEntry(nil, fxPayloadAt(23))[:30])
	appendFile(t, fsys, idxOf(fxLastBase), append(be64(3*fxEntry), be64(4*fxEntry)...))
}

// corruptSealedIndexIntoEntry points the index entry of offset 7, in sealed
// segment 5, 12 bytes into its entry.
func corruptSealedIndexIntoEntry(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, 5, 2, 2*fxEntry+12) // offset 7
}

// corruptOldEntryBitFlip flips one payload bit of entry 7, in sealed segment
// 5.
func corruptOldEntryBitFlip(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(5), func(b []byte) []byte { b[2*fxEntry+HeaderSize+3] ^= 0x04; return b })
}

// corruptOldEntryGarbageLength sets the length field of entry 7, in sealed
// segment 5, to 2^31-1.
func corruptOldEntryGarbageLength(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(5), func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[2*fxEntry:], math.MaxInt32)
		return b
	})
}

// corruptLastEntryGarbageLength sets the length field of entry 22, the last
// one, to 2^31-1.
func corruptLastEntryGarbageLength(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[2*fxEntry:], math.MaxInt32)
		return b
	})
}

// corruptSegmentShorterThanIndex cuts the last segment to its first two
// entries while its index still holds three.
func corruptSegmentShorterThanIndex(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte { return b[:2*fxEntry] })
}

// corruptSealedSegmentShorterThanIndex cuts sealed segment 10 to its first
// entry while its index still holds five.
func corruptSealedSegmentShorterThanIndex(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(10), func(b []byte) []byte { return b[:fxEntry] })
}

// corruptSealedIndexTorn appends 3 bytes to the index of sealed segment 5.
func corruptSealedIndexTorn(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, idxOf(5), []byte{0, 0, 1})
}

// corruptSealedIndexZeroPadded appends one zero index entry to sealed
// segment 5.
func corruptSealedIndexZeroPadded(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, idxOf(5), make([]byte, 8))
}

// corruptSealedLastEntryBitFlip flips a bit in the last byte of entry 9, the
// last of sealed segment 5.
func corruptSealedLastEntryBitFlip(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(5), func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b })
}

// corruptIndexEntryBeforeValidOne sets the index entry of offset 21 to
// position 1 (not after entry 20 by a whole entry) while entry 22 after it
// stays valid.
func corruptIndexEntryBeforeValidOne(t *testing.T, fsys *vfs.MemFS) {
	setIndex(t, fsys, fxLastBase, 1, 1) // offset 21: not increasing by an entry
}

// corruptMissingOldIndex removes the .idx of sealed segment 5.
func corruptMissingOldIndex(t *testing.T, fsys *vfs.MemFS) {
	removeFile(t, fsys, idxOf(5))
}

// corruptMissingOldSegment removes the .mmm of sealed segment 10.
func corruptMissingOldSegment(t *testing.T, fsys *vfs.MemFS) {
	removeFile(t, fsys, mmmOf(10))
}

// corruptLoneEmptySegmentAtTail creates an empty .mmm for offset 23 without
// its .idx: a crash between the two creates of a rotation.
func corruptLoneEmptySegmentAtTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxEntries), nil)
}

// corruptLoneEmptyIndexAtTail creates an empty .idx for offset 23 without
// its .mmm.
func corruptLoneEmptyIndexAtTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, idxOf(fxEntries), nil)
}

// corruptLoneSegmentAtTail creates a .mmm for offset 23 holding entry 23,
// without its .idx.
func corruptLoneSegmentAtTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, mmmOf(fxEntries), AppendEntry(nil, fxPayloadAt(23)))
}

// corruptLoneIndexAtTail creates an .idx for offset 23 holding one entry,
// without its .mmm.
func corruptLoneIndexAtTail(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, idxOf(fxEntries), be64(0))
}

// corruptLoneEmptySegmentInChain empties the .mmm of sealed segment 10 and
// removes its .idx.
func corruptLoneEmptySegmentInChain(t *testing.T, fsys *vfs.MemFS) {
	removeFile(t, fsys, idxOf(10))
	patchFile(t, fsys, mmmOf(10), func([]byte) []byte { return nil })
}

// corruptStrayFiles adds a leftover *.tmp file, two unknown files and an
// unknown directory to the topic.
func corruptStrayFiles(t *testing.T, fsys *vfs.MemFS) {
	appendFile(t, fsys, path.Join(testDir, "x.checkpoint.tmp"), []byte("junk"))
	appendFile(t, fsys, path.Join(testDir, "notes.txt"), []byte("keep me"))
	appendFile(t, fsys, path.Join(testDir, "0000000000000000023.mmm.bak"), []byte("keep me"))
	appendFile(t, fsys, path.Join(testDir, "somedir", "f"), []byte("keep me"))
}

// corruptChainGapMissingSegment removes both files of sealed segment 10 (and
// leaves a *.tmp file that a refusal must not remove).
func corruptChainGapMissingSegment(t *testing.T, fsys *vfs.MemFS) {
	removeFile(t, fsys, mmmOf(10))
	removeFile(t, fsys, idxOf(10))
	appendFile(t, fsys, path.Join(testDir, "left.tmp"), []byte("x")) // not removed on refusal
}

// corruptChainGapShortSegment removes the last entry of sealed segment 5
// from both its files, so segment 10 starts one offset late.
func corruptChainGapShortSegment(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, idxOf(5), func(b []byte) []byte { return b[:4*IndexEntrySize] })
	patchFile(t, fsys, mmmOf(5), func(b []byte) []byte { return b[:4*fxEntry] })
}

// corruptLastEntryBitFlip flips a bit in the payload of entry 22, the last
// one.
func corruptLastEntryBitFlip(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte { b[len(b)-2] ^= 0x01; return b })
}

// corruptLastEntryCut cuts the last 10 bytes of entry 22, the last one.
func corruptLastEntryCut(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte { return b[:len(b)-10] })
}

// corruptEveryLastSegmentEntry zeroes every byte of the last segment,
// leaving its index as it was.
func corruptEveryLastSegmentEntry(t *testing.T, fsys *vfs.MemFS) {
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte { clear(b); return b })
}

// repairWant is what a corruption case must lead to: a refusal, or a
// repaired log with these numbers and reads.
type repairWant struct {
	// refused: Open must fail with this *contract.CorruptionError (File is the base
	// name, Reason a substring) and leave every file byte-identical.
	refuse *contract.CorruptionError

	hw            int64
	cutEntries    int64
	cutIndexBytes int64
	truncated     int64
	reindexed     int64    // entries indexed again from the last segment
	cutValid      int64    // CRC-valid entries cut with a torn group commit
	zeroTail      int64    // zero bytes cut from the ends of the last segment's files
	actions       []string // one substring per expected action, in order
	removed       []string
	verify        string // Verify status before opening
	// corruptAt lists offsets whose reads fail with a *contract.CorruptionError
	// after a successful open; every other offset below hw must read back
	// byte-identical.
	corruptAt []int64
	check     func(t *testing.T, l *Log, fsys *vfs.MemFS)
}

// TestRecoveryCorruption runs every named corruption function on the
// fixture topic, then checks Verify, Open, the repair report, every read
// and a second Open (see checkRepairCase).
func TestRecoveryCorruption(t *testing.T) {
	tests := []struct {
		name    string
		corrupt func(t *testing.T, fsys *vfs.MemFS)
		want    repairWant
	}{
		{
			name:    "clean",
			corrupt: corruptNothing,
			want:    repairWant{hw: 23, verify: StatusOK},
		},
		{
			name:    "torn idx tail (len%8)",
			corrupt: corruptTornIndexTail,
			want:    repairWant{hw: 23, cutIndexBytes: 3, actions: []string{"cut torn index tail"}, verify: StatusTornTail},
		},
		{
			name:    "torn idx tail with its entry's bytes in the segment",
			corrupt: corruptTornIndexTailWithEntry,
			want: repairWant{hw: 24, cutIndexBytes: 5, reindexed: 1,
				actions: []string{"cut torn index tail", "index again 1 entries"}, verify: StatusTornTail},
		},
		{
			name:    "zero-padded idx tail",
			corrupt: corruptZeroPaddedIndexTail,
			want: repairWant{hw: 23, zeroTail: 16,
				actions: []string{"cut a zero tail of 2 index entries"}, verify: StatusZeroTail},
		},
		{
			name:    "zero-padded idx tail over synced entries (size reached disk, data did not)",
			corrupt: corruptZeroPaddedIndexOverEntries,
			want: repairWant{hw: 25, zeroTail: 16, reindexed: 2,
				actions: []string{"cut a zero tail of 2 index entries", "index again 2 entries"}, verify: StatusTornTail},
		},
		{
			name:    "torn segment tail (bytes beyond the last indexed entry)",
			corrupt: corruptTornSegmentTail,
			want: repairWant{hw: 23, truncated: 30, actions: []string{"truncate"}, verify: StatusTornTail,
				check: func(t *testing.T, l *Log, fsys *vfs.MemFS) {
					if b, _ := fsys.ReadFile(mmmOf(fxLastBase)); len(b) != 3*fxEntry {
						t.Errorf("segment is %d bytes after recovery, want %d", len(b), 3*fxEntry)
					}
				}},
		},
		{
			name:    "zero-filled segment tail",
			corrupt: corruptZeroFilledSegmentTail,
			want:    repairWant{hw: 23, zeroTail: 100, actions: []string{"cut a zero tail of 100 bytes"}, verify: StatusZeroTail},
		},
		{
			name:    "index entry points into the middle of the previous entry (second to last)",
			corrupt: corruptIndexIntoPreviousEntry,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + IndexExt, Pos: 16, Offset: 22,
				Reason: "does not start where entry 21 ends"}},
		},
		{
			name:    "last index entry points into the middle of an entry: cut, the entry indexed again",
			corrupt: corruptLastIndexIntoEntry,
			want: repairWant{hw: 23, cutEntries: 1, cutIndexBytes: 8, reindexed: 1,
				actions: []string{"cut torn entry at offset 22", "index again 1 entries"}, verify: StatusTornTail},
		},
		{
			name:    "index shorter than the segment (a lazy index tail)",
			corrupt: corruptIndexShorterThanSegment,
			want:    repairWant{hw: 26, reindexed: 3, actions: []string{"index again 3 entries of 0000000000000000020.mmm from offset 23"}, verify: StatusIndexTail},
		},
		{
			name:    "empty index over a full last segment",
			corrupt: corruptEmptyLastIndex,
			want:    repairWant{hw: 23, reindexed: 3, actions: []string{"index again 3 entries of 0000000000000000020.mmm from offset 20"}, verify: StatusIndexTail},
		},
		{
			name:    "lazy index tail, then a torn entry",
			corrupt: corruptIndexTailThenTornEntry,
			want: repairWant{hw: 25, reindexed: 2, truncated: 30,
				actions: []string{"index again 2 entries", "truncate"}, verify: StatusTornTail},
		},
		{
			name:    "after the index, an invalid entry followed by a valid one within a group commit: a torn group, cut",
			corrupt: corruptInvalidEntryBeforeValidAfterIndex,
			want: repairWant{hw: 24, reindexed: 1, truncated: 2 * fxEntry, cutValid: 1,
				actions: []string{"index again 1 entries", "cut a torn group commit of 0000000000000000020.mmm at byte 192", "truncate"},
				verify:  StatusTornTail},
		},
		{
			name:    "after the index, an invalid entry followed by valid ones beyond a group commit",
			corrupt: corruptInvalidEntryBeforeValidBeyondWindow,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + SegmentExt, Pos: 4 * fxEntry, Offset: 24,
				Reason: "but a valid entry follows at byte"}},
		},
		{
			name:    "after the index, a damaged length claiming past a group commit, then valid entries beyond one: refused, the claim not trusted",
			corrupt: corruptLengthClaimBeyondWindow,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + SegmentExt, Pos: 4 * fxEntry, Offset: 24,
				Reason: "but a valid entry follows at byte"}},
		},
		{
			name:    "after the index, a zeroed sector inside an entry, then a valid entry: a torn group, cut",
			corrupt: corruptZeroSectorThenValid,
			want: repairWant{hw: 23, truncated: 2*EntrySize(2000) + EntrySize(fxPayload), cutValid: 2,
				actions: []string{"cut a torn group commit", "truncate"}, verify: StatusTornTail},
		},
		{
			name:    "a lost index entry, then damage in the segment, then a valid index entry",
			corrupt: corruptZeroIndexDamagedEntryValidIndex,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + IndexExt, Pos: 16, Offset: 22,
				Reason: "walk ends at byte 48 before it"}},
		},
		{
			name:    "a later index entry points at another valid entry than the walk",
			corrupt: corruptIndexDisagreesWithWalk,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + IndexExt, Pos: 16, Offset: 22,
				Reason: "walk puts it at byte 96"}},
		},
		{
			name:    "index beyond a torn segment tail",
			corrupt: corruptIndexBeyondTornSegmentTail,
			// The first entry the segment does not hold whole is named
			// (offset 23, cut short), not only the last indexed one.
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + SegmentExt, Pos: 3 * fxEntry, Offset: 23,
				Reason: "offsets 23..24 (from byte 144; the last indexed entry starts at 192) are missing or cut short"}},
		},
		{
			name:    "index entry points into the middle of an entry in a sealed segment",
			corrupt: corruptSealedIndexIntoEntry,
			want:    repairWant{hw: 23, verify: StatusCorrupt, corruptAt: []int64{7}},
		},
		{
			name:    "bit flip in an old entry",
			corrupt: corruptOldEntryBitFlip,
			want: repairWant{hw: 23, verify: StatusCorrupt, corruptAt: []int64{7},
				check: func(t *testing.T, l *Log, _ *vfs.MemFS) {
					_, err := l.Read(7)
					ce := asCorruption(t, err)
					if ce.Offset != 7 || ce.Pos != 2*fxEntry || path.Base(ce.File) != SegmentName(5)+SegmentExt ||
						!strings.Contains(ce.Reason, "crc mismatch") || ce.Topic != testDir {
						t.Errorf("Read(7): %+v", ce)
					}
				}},
		},
		{
			name:    "garbage length in an old entry",
			corrupt: corruptOldEntryGarbageLength,
			want: repairWant{hw: 23, verify: StatusCorrupt, corruptAt: []int64{7},
				check: func(t *testing.T, l *Log, _ *vfs.MemFS) {
					allocs := allocBytes(func() {
						for i := 0; i < 20; i++ {
							l.Read(7)
							l.ReadBatch(7, 100)
							l.ReadBatch(5, 100)
						}
					})
					if allocs > 1<<20 {
						t.Errorf("60 reads of a 2 GiB length allocated %d bytes", allocs)
					}
				}},
		},
		{
			name:    "garbage length in the last entry: cut without allocating",
			corrupt: corruptLastEntryGarbageLength,
			want: repairWant{hw: 22, cutEntries: 1, cutIndexBytes: 8, truncated: fxEntry,
				actions: []string{"cut torn entry at offset 22", "truncate"}, verify: StatusTornTail},
		},
		{
			name:    "segment shorter than its index",
			corrupt: corruptSegmentShorterThanIndex,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxLastBase) + SegmentExt, Pos: 2 * fxEntry, Offset: 22,
				Reason: "shorter"}},
		},
		{
			name:    "sealed segment shorter than its index",
			corrupt: corruptSealedSegmentShorterThanIndex,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(10) + SegmentExt, Pos: fxEntry, Offset: 11,
				Reason: "segment is shorter (48 bytes) than its offset index says: offsets 11..14"}},
		},
		{
			name:    "sealed segment's index torn",
			corrupt: corruptSealedIndexTorn,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(5) + IndexExt, Pos: 40, Offset: 10,
				Reason: "sealed offset index has a torn entry"}},
		},
		{
			name:    "sealed segment's index zero-padded",
			corrupt: corruptSealedIndexZeroPadded,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(5) + IndexExt, Pos: 40, Offset: 10,
				Reason: "implausible position 0"}},
		},
		{
			name:    "sealed segment's last entry bit flip",
			corrupt: corruptSealedLastEntryBitFlip,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(5) + SegmentExt, Pos: 4 * fxEntry, Offset: 9,
				Reason: "last entry of a sealed segment is invalid"}},
		},
		{
			name:    "garbage index entry followed by one that agrees with the segment: rebuilt",
			corrupt: corruptIndexEntryBeforeValidOne,
			want: repairWant{hw: 23, cutEntries: 1, cutIndexBytes: 8, reindexed: 2,
				actions: []string{"cut 1 invalid index entries of 0000000000000000020.idx from offset 21", "index again 2 entries"},
				verify:  StatusTornTail},
		},
		{
			name:    "zero index page followed by a persisted one (the index written after the segment's fsync)",
			corrupt: corruptZeroIndexThenValid,
			want: repairWant{hw: 23, cutEntries: 1, cutIndexBytes: 8, reindexed: 2,
				actions: []string{"cut 1 invalid index entries of 0000000000000000020.idx from offset 21", "index again 2 entries"},
				verify:  StatusTornTail},
		},
		{
			name:    "missing idx in an old segment",
			corrupt: corruptMissingOldIndex,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(5) + SegmentExt, Pos: 0, Offset: 5,
				Reason: "is missing"}},
		},
		{
			name:    "missing mmm in an old segment",
			corrupt: corruptMissingOldSegment,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(10) + IndexExt, Pos: 0, Offset: 10,
				Reason: "is missing"}},
		},
		{
			name:    "lone empty mmm at the tail: rotation completes",
			corrupt: corruptLoneEmptySegmentAtTail,
			want: repairWant{hw: 23, actions: []string{"complete interrupted rotation"}, verify: StatusTornTail,
				check: func(t *testing.T, l *Log, fsys *vfs.MemFS) {
					if b, err := fsys.ReadFile(idxOf(fxEntries)); err != nil || len(b) != 0 {
						t.Fatalf("index of the completed rotation: %d bytes, %v", len(b), err)
					}
					if st := l.Stats(); st.Segments != 6 || st.ActiveSegment != fxEntries {
						t.Fatalf("stats %+v", st)
					}
					if off := mustAppend(t, l, fxPayloadAt(23)); off != 23 {
						t.Fatalf("append after rotation: offset %d", off)
					}
					if b, _ := fsys.ReadFile(mmmOf(fxEntries)); len(b) != fxEntry {
						t.Fatalf("entry 23 not in the completed segment (%d bytes)", len(b))
					}
				}},
		},
		{
			name:    "lone empty idx at the tail: removed",
			corrupt: corruptLoneEmptyIndexAtTail,
			want: repairWant{hw: 23, actions: []string{"remove lone empty index"}, removed: []string{SegmentName(fxEntries) + IndexExt},
				verify: StatusTornTail,
				check: func(t *testing.T, l *Log, fsys *vfs.MemFS) {
					if _, err := fsys.ReadFile(idxOf(fxEntries)); !vfs.IsNotExist(err) {
						t.Fatalf("lone index still there: %v", err)
					}
				}},
		},
		{
			name:    "non-empty lone mmm at the tail",
			corrupt: corruptLoneSegmentAtTail,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxEntries) + SegmentExt, Pos: 0, Offset: fxEntries,
				Reason: "is missing"}},
		},
		{
			name:    "non-empty lone idx at the tail",
			corrupt: corruptLoneIndexAtTail,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(fxEntries) + IndexExt, Pos: 0, Offset: fxEntries,
				Reason: "is missing"}},
		},
		{
			name:    "lone empty mmm in the middle of the chain",
			corrupt: corruptLoneEmptySegmentInChain,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(10) + SegmentExt, Pos: 0, Offset: 10,
				Reason: "is missing"}},
		},
		{
			name:    "stray tmp removed, unknown files left",
			corrupt: corruptStrayFiles,
			want: repairWant{hw: 23, actions: []string{"remove leftover x.checkpoint.tmp"}, removed: []string{"x.checkpoint.tmp"},
				verify: StatusTornTail,
				check: func(t *testing.T, l *Log, fsys *vfs.MemFS) {
					if _, err := fsys.ReadFile(path.Join(testDir, "x.checkpoint.tmp")); !vfs.IsNotExist(err) {
						t.Errorf("tmp still there: %v", err)
					}
					for _, f := range []string{"notes.txt", "0000000000000000023.mmm.bak", "somedir/f"} {
						if b, err := fsys.ReadFile(path.Join(testDir, f)); err != nil || string(b) != "keep me" {
							t.Errorf("%s: %q %v", f, b, err)
						}
					}
				}},
		},
		{
			name:    "chain gap (a middle segment missing)",
			corrupt: corruptChainGapMissingSegment,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(15) + SegmentExt, Pos: 0, Offset: 15,
				Reason: "previous segment ends at 10"}},
		},
		{
			name:    "chain gap (a sealed segment lost its last entry)",
			corrupt: corruptChainGapShortSegment,
			want: repairWant{refuse: &contract.CorruptionError{File: SegmentName(10) + SegmentExt, Pos: 0, Offset: 10,
				Reason: "previous segment ends at 9"}},
		},
		{
			name:    "torn last entry of the last segment (bit flip)",
			corrupt: corruptLastEntryBitFlip,
			want: repairWant{hw: 22, cutEntries: 1, cutIndexBytes: 8, truncated: fxEntry,
				actions: []string{"cut torn entry at offset 22", "truncate"}, verify: StatusTornTail},
		},
		{
			name:    "torn last entry of the last segment (runs past the end)",
			corrupt: corruptLastEntryCut,
			want: repairWant{hw: 22, cutEntries: 1, cutIndexBytes: 8, truncated: fxEntry - 10,
				actions: []string{"cut torn entry at offset 22", "truncate"}, verify: StatusTornTail},
		},
		{
			name:    "every entry of the last segment torn",
			corrupt: corruptEveryLastSegmentEntry,
			want: repairWant{hw: 20, cutEntries: 3, cutIndexBytes: 24, zeroTail: 3 * fxEntry,
				actions: []string{"cut torn entry at offset 22", "cut torn entry at offset 21", "cut torn entry at offset 20", "cut a zero tail of 144 bytes"},
				verify:  StatusTornTail},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { checkRepairCase(t, tc.corrupt, tc.want) })
	}
}

// checkRepairCase builds the fixture topic, applies corrupt and checks, in
// order: Verify changes nothing and predicts Open; a refused Open returns
// the wanted *contract.CorruptionError and changes nothing (checkRefused); an
// accepted Open reports the wanted numbers and actions (checkReport), reads
// back every entry but the corrupt ones (checkReads), passes w.check, and a
// second Open finds nothing to do (checkReopen).
func checkRepairCase(t *testing.T, corrupt func(*testing.T, *vfs.MemFS), w repairWant) {
	t.Helper()
	fsys := buildFixture(t)
	corrupt(t, fsys)
	before := snapshotFS(t, fsys)

	// Verify never modifies anything and agrees with Open.
	vr, err := Verify(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes}, nil)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	sameFiles(t, "verify", before, snapshotFS(t, fsys))
	if w.refuse != nil {
		w.verify = StatusCorrupt
	}
	if vr.Status != w.verify {
		t.Errorf("verify status %s, want %s (corruption %v)", vr.Status, w.verify, vr.Corruption)
	}
	if w.refuse == nil {
		checkDump(t, fsys, w)
		sameFiles(t, "dump", before, snapshotFS(t, fsys))
	}

	l, err := Open(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes, Logger: zap.NewNop()})
	if w.refuse != nil {
		checkRefused(t, l, err, vr, w.refuse, before, fsys)
		return
	}
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	checkReport(t, l, vr, w)
	checkReads(t, l, w)
	if w.check != nil {
		w.check(t, l, fsys)
	}
	checkReopen(t, l, fsys)
}

// checkDump: Dump, before any repair, shows every offset below the wanted
// high watermark in order — the ones repair will index again too, from
// the positions planned in memory — with its payload, or a problem for the
// corrupt ones.
func checkDump(t *testing.T, fsys *vfs.MemFS, w repairWant) {
	t.Helper()
	next := int64(0)
	err := Dump(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes}, 0, 0, func(e DumpEntry) error {
		if e.Offset != next {
			t.Fatalf("dump: offset %d, want %d", e.Offset, next)
		}
		if !slices.Contains(w.corruptAt, e.Offset) && (e.Problem != "" || !bytes.Equal(e.Payload, fxPayloadAt(e.Offset))) {
			t.Errorf("dump offset %d: problem %q payload %.40q", e.Offset, e.Problem, e.Payload)
		}
		next++
		return nil
	})
	if err != nil || next != w.hw {
		t.Errorf("dump showed %d entries (%v), want %d", next, err, w.hw)
	}
}

// checkRefused: Open failed with want (File compared by base name, Reason
// as a substring), Verify found the same corruption, and no file changed.
func checkRefused(t *testing.T, l *Log, err error, vr TopicReport, want *contract.CorruptionError, before map[string][]byte, fsys *vfs.MemFS) {
	t.Helper()
	if err == nil {
		l.Close()
		t.Fatalf("open succeeded with hw %d, want refusal", l.HighWatermark())
	}
	ce := asCorruption(t, err)
	if path.Base(ce.File) != want.File || ce.Pos != want.Pos || ce.Offset != want.Offset ||
		ce.Topic != testDir || !strings.Contains(ce.Reason, want.Reason) {
		t.Errorf("got  %s (File %s Pos %d Offset %d)\nwant File %s Pos %d Offset %d reason ~%q",
			ce, path.Base(ce.File), ce.Pos, ce.Offset, want.File, want.Pos, want.Offset, want.Reason)
	}
	if msg := err.Error(); !strings.Contains(msg, testDir) || !strings.Contains(msg, want.File) {
		t.Errorf("message does not name topic and file: %s", msg)
	}
	if vr.Corruption == nil || *vr.Corruption != *ce {
		t.Errorf("verify corruption %+v, open %+v", vr.Corruption, ce)
	}
	sameFiles(t, "refused open", before, snapshotFS(t, fsys))
}

// checkReport: the high watermark, the repair report's counts, actions
// (one substring each, in order) and removed files are the wanted ones,
// and Verify predicted the same counts and actions.
func checkReport(t *testing.T, l *Log, vr TopicReport, w repairWant) {
	t.Helper()
	rep := l.Repair()
	if l.HighWatermark() != w.hw || rep.Entries != w.hw || rep.CutEntries != w.cutEntries ||
		rep.CutIndexBytes != w.cutIndexBytes || rep.TruncatedBytes != w.truncated || rep.ReindexedEntries != w.reindexed ||
		rep.CutValidEntries != w.cutValid || rep.ZeroTailBytes != w.zeroTail {
		t.Errorf("hw %d, report %+v\nwant hw %d cutEntries %d cutIndexBytes %d truncatedBytes %d reindexed %d cutValid %d",
			l.HighWatermark(), rep, w.hw, w.cutEntries, w.cutIndexBytes, w.truncated, w.reindexed, w.cutValid)
	}
	if vr.Recovery.CutEntries != rep.CutEntries || vr.Recovery.TruncatedBytes != rep.TruncatedBytes ||
		vr.Recovery.CutValidEntries != rep.CutValidEntries ||
		vr.Recovery.ReindexedEntries != rep.ReindexedEntries || vr.NextOffset != w.hw ||
		!slices.Equal(vr.Recovery.Actions, rep.Actions) {
		t.Errorf("verify predicted %+v, open did %+v", vr.Recovery, rep)
	}
	if len(rep.Actions) != len(w.actions) {
		t.Errorf("actions %q, want %d matching %q", rep.Actions, len(w.actions), w.actions)
	} else {
		for i, a := range w.actions {
			if !strings.Contains(rep.Actions[i], a) {
				t.Errorf("action %d = %q, want it to contain %q", i, rep.Actions[i], a)
			}
		}
	}
	if !slices.Equal(rep.Removed, w.removed) {
		t.Errorf("removed %q, want %q", rep.Removed, w.removed)
	}
	if (len(w.actions) == 0) != rep.Clean() {
		t.Errorf("Clean() = %v with actions %q", rep.Clean(), rep.Actions)
	}
}

// checkReads: every offset below hw reads back byte-identical, except the
// ones listed as corrupt; those fail alone and are skippable, with Read and
// with ReadBatch.
func checkReads(t *testing.T, l *Log, w repairWant) {
	t.Helper()
	for off := int64(0); off < w.hw; off++ {
		p, err := l.Read(off)
		if slices.Contains(w.corruptAt, off) {
			if ce := asCorruption(t, err); ce.Offset != off {
				t.Errorf("Read(%d): corruption names offset %d", off, ce.Offset)
			}
			continue
		}
		if err != nil || !bytes.Equal(p, fxPayloadAt(off)) {
			t.Errorf("Read(%d) = %q, %v", off, p, err)
		}
	}
	got, skipped := readSkipping(t, l, 4)
	if !slices.Equal(skipped, w.corruptAt) {
		t.Errorf("skipping reader skipped %v, want %v", skipped, w.corruptAt)
	}
	if int64(len(got)+len(skipped)) != w.hw {
		t.Errorf("skipping reader got %d entries + %d skipped, want %d", len(got), len(skipped), w.hw)
	}
	for _, e := range got {
		if !bytes.Equal(e.Payload, fxPayloadAt(e.Offset)) {
			t.Errorf("ReadBatch offset %d: %q", e.Offset, e.Payload)
		}
	}
}

// checkReopen closes l and opens the topic again: repair is idempotent, so
// the second open finds nothing to do and keeps the high watermark.
func checkReopen(t *testing.T, l *Log, fsys *vfs.MemFS) {
	t.Helper()
	hw := l.HighWatermark()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("second open: %v", err)
	}
	defer l2.Close()
	if !l2.Repair().Clean() || l2.HighWatermark() != hw {
		t.Errorf("second open: hw %d (want %d), report %+v", l2.HighWatermark(), hw, l2.Repair())
	}
}

// readSkipping reads [0, hw) with ReadBatch of max entries the way the
// dispatcher does: on a *contract.CorruptionError it keeps the entries
// before the bad offset, skips that one offset and goes on.
func readSkipping(t *testing.T, l *Log, max int) (got []Entry, skipped []int64) {
	t.Helper()
	hw := l.HighWatermark()
	for off := int64(0); off < hw; {
		es, err := l.ReadBatch(off, max)
		for _, e := range es {
			if e.Offset != off {
				t.Fatalf("ReadBatch: offset %d, want %d", e.Offset, off)
			}
			got = append(got, e)
			off++
		}
		if err != nil {
			ce := asCorruption(t, err)
			if ce.Offset != off {
				t.Fatalf("ReadBatch at %d: corruption names offset %d after %d entries", off-int64(len(es)), ce.Offset, len(es))
			}
			skipped = append(skipped, off)
			off++
			continue
		}
		if len(es) == 0 {
			t.Fatalf("ReadBatch(%d) returned nothing below hw %d", off, hw)
		}
	}
	return got, skipped
}

func allocBytes(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestRecoveryGarbageLengthNoAllocation: opening a topic whose last entry
// has a 2 GiB length field must not allocate from that length.
func TestRecoveryGarbageLengthNoAllocation(t *testing.T) {
	fsys := buildFixture(t)
	patchFile(t, fsys, mmmOf(fxLastBase), func(b []byte) []byte {
		binary.BigEndian.PutUint32(b[2*fxEntry:], 0x7ffffff0)
		return b
	})
	var l *Log
	var err error
	n := allocBytes(func() {
		l, err = Open(testDir, Options{FS: fsys, SegmentMaxBytes: fxSegBytes, Logger: zap.NewNop()})
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n > 1<<20 {
		t.Fatalf("open allocated %d bytes", n)
	}
	if l.HighWatermark() != 22 {
		t.Fatalf("hw %d", l.HighWatermark())
	}
}

// TestOpenEmptyTopicDir: an existing but empty topic directory gets a first
// segment at offset 0.
func TestOpenEmptyTopicDir(t *testing.T) {
	fsys := vfs.NewMem()
	if err := fsys.MkdirAll(testDir); err != nil {
		t.Fatal(err)
	}
	l := openMem(t, fsys, Options{})
	defer l.Close()
	if l.HighWatermark() != 0 {
		t.Fatal(l.HighWatermark())
	}
	for _, f := range []string{mmmOf(0), idxOf(0)} {
		if _, err := fsys.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCheckpoints(t *testing.T) {
	const end = 23
	tests := []struct {
		name  string
		file  []byte // nil: no file
		want  int64
		size8 bool // the first commit leaves 8 bytes
	}{
		{"missing", nil, 0, true},
		{"0 bytes", []byte{}, 0, true},
		{"3 bytes", []byte{0, 0, 1}, 0, true},
		{"9 bytes", append(be64(5), 0), 0, true},
		{"8x0xFF (negative)", bytes.Repeat([]byte{0xff}, 8), 0, true},
		{"valid", be64(17), 17, true},
		{"at the end", be64(end), end, true},
		{"beyond the log end", be64(1000), end, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := buildFixture(t)
			cp := path.Join(testDir, CheckpointDir, "disp"+CheckpointExt)
			if tc.file != nil {
				if err := fsys.WriteFile(cp, tc.file, true); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshotFS(t, fsys)
			l := openMem(t, fsys, fxOptions())
			c, err := l.Checkpoint("disp")
			if err != nil {
				t.Fatal(err)
			}
			if c.Offset() != tc.want {
				t.Fatalf("offset %d, want %d", c.Offset(), tc.want)
			}
			if c2, _ := l.Checkpoint("disp"); c2 != c {
				t.Fatal("second Checkpoint call returned a different value")
			}
			sameFiles(t, "open checkpoint", before, snapshotFS(t, fsys))
			if err := c.Commit(9); err != nil {
				t.Fatal(err)
			}
			if b, _ := fsys.ReadFile(cp); !bytes.Equal(b, be64(9)) {
				t.Fatalf("after commit file = %x", b)
			}
			if err := c.Commit(21); err != nil {
				t.Fatal(err)
			}
			if b, _ := fsys.ReadFile(cp); !bytes.Equal(b, be64(21)) {
				t.Fatalf("after second commit file = %x", b)
			}
			// Committed values are durable: a power loss right after keeps them.
			crashed := fsys.Crash(vfs.CrashOptions{})
			l.Close()
			l2 := openMem(t, crashed, fxOptions())
			defer l2.Close()
			c2, err := l2.Checkpoint("disp")
			if err != nil {
				t.Fatal(err)
			}
			if c2.Offset() != 21 {
				t.Fatalf("after crash and reopen: %d", c2.Offset())
			}
		})
	}
}

// TestCheckpointOverwritesInPlace: a commit opens the same file, writes 8
// bytes at position 0 (no create, no truncate, no rename) and fsyncs it.
func TestCheckpointOverwritesInPlace(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	for i := 0; i < 5; i++ {
		mustAppend(t, l, payload(i, 10))
	}
	c, err := l.Checkpoint("d")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(1); err != nil {
		t.Fatal(err)
	}
	var ops []string
	fsys.SetHook(func(op vfs.Op, name string) error {
		ops = append(ops, op.String()+" "+path.Base(name))
		return nil
	})
	syncs := fsys.SyncCount()
	for i := int64(2); i <= 5; i++ {
		if err := c.Commit(i); err != nil {
			t.Fatal(err)
		}
		if b, _ := fsys.ReadFile(c.Path()); len(b) != 8 || binary.BigEndian.Uint64(b) != uint64(i) {
			t.Fatalf("file %x", b)
		}
	}
	fsys.SetHook(nil)
	want := slices.Repeat([]string{"open d.checkpoint", "write d.checkpoint", "sync d.checkpoint"}, 4)
	if !slices.Equal(ops, want) {
		t.Fatalf("ops %q, want %q", ops, want)
	}
	if fsys.SyncCount()-syncs != 4 {
		t.Fatalf("%d syncs for 4 commits", fsys.SyncCount()-syncs)
	}
	if err := c.Commit(-1); err == nil {
		t.Fatal("negative commit accepted")
	}
	if err := contract.ValidCheckpointName("../x"); err == nil {
		t.Fatal("path traversal name accepted")
	}
	if _, err := l.Checkpoint(".hidden"); err == nil {
		t.Fatal("dot name accepted")
	}
}

func TestCheckpointCommitErrorKeepsOffset(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	defer l.Close()
	c, err := l.Checkpoint("d")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(0); err != nil {
		t.Fatal(err)
	}
	eio := errors.New("injected EIO")
	fsys.SetHook(func(op vfs.Op, name string) error {
		if op == vfs.OpSync && strings.HasSuffix(name, CheckpointExt) {
			return eio
		}
		return nil
	})
	if err := c.Commit(3); !errors.Is(err, eio) {
		t.Fatalf("commit: %v", err)
	}
	fsys.SetHook(nil)
	if c.Offset() != 0 {
		t.Fatalf("offset %d after failed commit", c.Offset())
	}
}

// Checkpoints lists the committed checkpoint files by name, sorted, and
// leaves out what is not one: an uncommitted checkpoint (no file), other
// files, directories and invalid names.
func TestCheckpointsLists(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	if names, err := l.Checkpoints(); err != nil || len(names) != 0 {
		t.Fatalf("no checkpoints dir: %q, %v", names, err)
	}
	for _, name := range []string{"zeta", "alpha", "mid.dle"} {
		c, err := l.Checkpoint(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Commit(0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Checkpoint("opened-only"); err != nil {
		t.Fatal(err)
	}
	dir := path.Join(testDir, CheckpointDir)
	for _, f := range []string{"notes.txt", ".hidden" + CheckpointExt, CheckpointExt} {
		if err := fsys.WriteFile(path.Join(dir, f), be64(1), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := fsys.MkdirAll(path.Join(dir, "sub"+CheckpointExt)); err != nil {
		t.Fatal(err)
	}
	names, err := l.Checkpoints()
	if want := []string{"alpha", "mid.dle", "zeta"}; err != nil || !slices.Equal(names, want) {
		t.Fatalf("Checkpoints = %q, %v; want %q", names, err, want)
	}
	l.Close()
	if _, err := l.Checkpoints(); !errors.Is(err, contract.ErrClosed) {
		t.Fatalf("after Close: %v, want contract.ErrClosed", err)
	}
}
