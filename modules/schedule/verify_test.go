package schedule

import (
	"bytes"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

const verifyName = "data/.scheduled/00000001800000000000.sched"

// storeWith is a MemFS holding one bucket file with the bytes b.
func storeWith(t *testing.T, b []byte) *vfs.MemFS {
	t.Helper()
	fs := vfs.NewMem()
	if err := fs.MkdirAll("data/.scheduled"); err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile(verifyName, b, true); err != nil {
		t.Fatal(err)
	}
	return fs
}

// threeRecords is a small bucket file of 3 pending scheduled records and
// the start of each.
func threeRecords() ([]byte, []int) { return bigFile(3) }

// TestVerifyStatuses: Verify reads a bucket file as startup would and
// changes nothing. Intact: OK with its records and pending messages. A
// flipped byte in the first of 3 records: TORN_TAIL, the whole file cut
// (startup's rule: within the window of the end), 2 records passing their
// CRC in the cut, both pending messages. A cut-short last record:
// TORN_TAIL with no valid record in the cut. Damage with a valid record
// beyond the window: CORRUPT, naming both places.
func TestVerifyStatuses(t *testing.T) {
	small, at := threeRecords()
	big, bigAt := bigFile(60000)
	for _, tc := range []struct {
		name    string
		file    []byte
		status  string
		records int64
		pending int64
		cut     *Tail
	}{
		{"intact", small, StatusOK, 3, 3, nil},
		{"flipped byte 20", flip(small, at[0]+20), StatusTornTail, 0, 0,
			&Tail{At: 0, Bytes: int64(len(small)), Records: 3, Valid: 2, Pending: 2, Damaged: 1}},
		{"flipped byte in the second record", flip(small, at[1]+20), StatusTornTail, 1, 1,
			&Tail{At: int64(at[1]), Bytes: int64(len(small) - at[1]), Records: 2, Valid: 1, Pending: 1, Damaged: 1}},
		{"last record cut short", small[:len(small)-5], StatusTornTail, 2, 2,
			&Tail{At: int64(at[2]), Bytes: int64(len(small) - 5 - at[2]), Records: 1, Valid: 0, Pending: 0, Damaged: 1}},
		{"flipped byte in the first of 60000", flip(big, bigAt[0]+20), StatusCorrupt, 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := storeWith(t, tc.file)
			rep, err := Verify(fs, "data/.scheduled", 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Files) != 1 || rep.Status != tc.status {
				t.Fatalf("report %+v, want one file, status %s", rep, tc.status)
			}
			fr := rep.Files[0]
			if fr.File != verifyName || fr.Status != tc.status || fr.Bytes != int64(len(tc.file)) || fr.Records != tc.records || fr.Pending != tc.pending {
				t.Errorf("file report %+v, want %s records=%d pending=%d bytes=%d", fr, tc.status, tc.records, tc.pending, len(tc.file))
			}
			switch {
			case tc.cut != nil && (fr.Cut == nil || *fr.Cut != *tc.cut):
				t.Errorf("cut %+v, want %+v", fr.Cut, *tc.cut)
			case tc.cut == nil && fr.Cut != nil:
				t.Errorf("cut %+v, want none", *fr.Cut)
			}
			if tc.status == StatusCorrupt {
				if c := fr.Corruption; c == nil || c.File != verifyName || c.Pos != 0 || c.ValidAt < damageWindow {
					t.Errorf("corruption %+v, want at byte 0 with a valid record beyond %d", c, damageWindow)
				}
			} else if fr.Corruption != nil {
				t.Errorf("corruption %+v, want none", fr.Corruption)
			}
			if after, _ := fs.ReadFile(verifyName); !bytes.Equal(after, tc.file) {
				t.Error("Verify changed the file")
			}
		})
	}
}

// TestVerifyEmptyAndDrops: no directory is an empty store (OK, no file);
// a deletion marker is reported; done records count as records, not as
// pending messages.
func TestVerifyEmptyAndDrops(t *testing.T) {
	rep, err := Verify(vfs.NewMem(), "data/.scheduled", 0)
	if err != nil || rep.Status != StatusOK || len(rep.Files) != 0 {
		t.Fatalf("no directory: %+v, %v", rep, err)
	}
	b, _ := threeRecords()
	b = appendDone(b, kindCancelled, scheduleID(1800000000000, 1))
	fs := storeWith(t, b)
	if err := fs.WriteFile("data/.scheduled/x"+dropExt, nil, true); err != nil {
		t.Fatal(err)
	}
	rep, err = Verify(fs, "data/.scheduled", 0)
	if err != nil || rep.Status != StatusOK || len(rep.Files) != 1 || rep.Files[0].Records != 4 || rep.Files[0].Pending != 2 ||
		len(rep.Drops) != 1 || rep.Drops[0] != "x" {
		t.Fatalf("%+v, %v; want OK, records=4 pending=2, drops [x]", rep, err)
	}
}

// TestVerifyWindowed: a file of more pending entries than one window is
// counted whole (read a window at a time, as at startup).
func TestVerifyWindowed(t *testing.T) {
	b, _ := bigFile(100)
	// The smallest budget gives a window of 16 entries.
	rep, err := Verify(storeWith(t, b), "data/.scheduled", 1)
	if err != nil || rep.Files[0].Pending != 100 || rep.Files[0].Records != 100 {
		t.Fatalf("%+v, %v; want 100 records, 100 pending", rep, err)
	}
}

// TestStartupCutLogsCounts: the startup cut logs how many records it cut
// and how many pass their CRC: ERROR when some do (the 3 records of a
// file with a flipped byte in the first: 2 valid, both pending, dropped),
// WARN for a cut-short record (no valid record cut).
func TestStartupCutLogsCounts(t *testing.T) {
	small, at := threeRecords()
	for _, tc := range []struct {
		name                   string
		file                   []byte
		level                  zapcore.Level
		cutAt, bytes           int64
		records, valid, pendng int64
		left                   int
	}{
		{"flipped byte 20", flip(small, at[0]+20), zapcore.ErrorLevel, 0, int64(len(small)), 3, 2, 2, 0},
		{"last record cut short", small[:len(small)-5], zapcore.WarnLevel, int64(at[2]), int64(len(small) - 5 - at[2]), 1, 0, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := storeWith(t, tc.file)
			core, logs := observer.New(zapcore.DebugLevel)
			s := New(Options{FS: fs, Dir: "data/.scheduled", Logger: zap.New(core)}, &recTarget{})
			if err := s.Open(); err != nil {
				t.Fatal(err)
			}
			stopAtEnd(t, s)
			cuts := logs.FilterMessageSnippet("cut a torn tail").All()
			if len(cuts) != 1 {
				t.Fatalf("%d cut lines, want 1: %v", len(cuts), logs.All())
			}
			c := cuts[0]
			f := c.ContextMap()
			if c.Level != tc.level || f["file"] != verifyName || f["at"] != tc.cutAt || f["bytes"] != tc.bytes ||
				f["records"] != tc.records || f["valid-records"] != tc.valid || f["pending-messages"] != tc.pendng {
				t.Errorf("cut logged at %s: %q %v; want %s at=%d bytes=%d records=%d valid-records=%d pending-messages=%d",
					c.Level, c.Message, f, tc.level, tc.cutAt, tc.bytes, tc.records, tc.valid, tc.pendng)
			}
			if p := s.Pending("t"); p != tc.left {
				t.Errorf("pending %d after the cut, want %d", p, tc.left)
			}
		})
	}
}

// flip returns a copy of b with the byte at i flipped.
func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 1
	return c
}
