package schedule

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// bigFile is a bucket file of n scheduled records (about 130 bytes each)
// starting at 1800000000000 ms, and the start of each record.
func bigFile(n int) ([]byte, []int) {
	var b []byte
	var at []int
	for i := range n {
		at = append(at, len(b))
		b = appendScheduled(b, 1800000000000+int64(i), scheduleID(1800000000000, uint64(i)), "t",
			[]byte(fmt.Sprintf(`{"topic":{"name":"t"},"content":%d,"id":"m%d","timestamp":1}`, i, i)))
	}
	return b, at
}

// TestCrashDamageOrCorruption: damage after which a valid record lies
// beyond what a crash can tear (damageWindow from the end of the valid
// records) is corruption: Open refuses, naming the file and both places,
// and changes nothing; damage closer to the end, zeros or a cut record
// are a torn tail: cut, the records before kept.
func TestCrashDamageOrCorruption(t *testing.T) {
	b, at := bigFile(60000) // about 7.7 MiB
	const name = "data/.scheduled/00000001800000000000.sched"
	for _, tc := range []struct {
		name    string
		corrupt func([]byte) []byte
		pending int // after the cut; -1: refused
	}{
		{"intact", func(b []byte) []byte { return b }, 60000},
		{"flipped byte in the first record", func(b []byte) []byte { b[at[0]+20] ^= 1; return b }, -1},
		{"flipped byte in the middle", func(b []byte) []byte { b[at[30000]+20] ^= 1; return b }, -1},
		{"flipped byte 100 records before the end", func(b []byte) []byte { b[at[59900]+20] ^= 1; return b }, 59900},
		{"last record cut short", func(b []byte) []byte { return b[:len(b)-5] }, 59999},
		{"3 MiB of zeros after the records", func(b []byte) []byte { return append(b, make([]byte, 3<<20)...) }, 60000},
		{"zeroed 4 KiB inside the last MiB", func(b []byte) []byte { clear(b[at[59000] : at[59000]+4096]); return b }, 59000},
		{"zeroed 4 KiB at the start", func(b []byte) []byte { clear(b[:4096]); return b }, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			if err := fs.MkdirAll("data/.scheduled"); err != nil {
				t.Fatal(err)
			}
			file := tc.corrupt(bytes.Clone(b))
			if err := fs.WriteFile(name, file, true); err != nil {
				t.Fatal(err)
			}
			s := New(Options{FS: fs, Dir: "data/.scheduled", Logger: zaptest.NewLogger(t)}, &recTarget{})
			err := s.Open()
			if err == nil {
				stopAtEnd(t, s)
			}
			after, _ := fs.ReadFile(name)
			if tc.pending < 0 {
				var ce *CorruptionError
				if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.File != name || ce.ValidAt < ce.Pos+damageWindow {
					t.Fatalf("Open: %v, want a CorruptionError of %s", err, name)
				}
				if !bytes.Equal(after, file) {
					t.Error("a refused file was changed")
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			if p := s.Pending("t"); p != tc.pending {
				t.Errorf("pending %d, want %d", p, tc.pending)
			}
			if tc.pending < len(at) && len(after) != at[tc.pending] || tc.pending == len(at) && len(after) != len(b) {
				t.Errorf("file is %d bytes after the cut", len(after))
			}
		})
	}
}

// TestGroupBytesBounded: however many schedules wait, one batch writes at
// most maxGroupBytes to a file before its fsync (what recovery's
// damageWindow relies on): records of 300 KiB, 32 at once behind a slow
// fsync, go at most 3 to a batch.
func TestGroupBytesBounded(t *testing.T) {
	fs := vfs.NewMem()
	clk := &fakeClock{t: base()}
	s, _ := newTest(t, fs, clk, func(o *Options) { o.BucketWidth = time.Hour })
	ctx := context.Background()
	if _, err := s.Schedule(ctx, "t", msg(0), base().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	writes, most := 0, 0
	fs.SetHook(func(op vfs.Op, name string) error {
		if !strings.HasSuffix(name, fileExt) {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		switch op {
		case vfs.OpWrite:
			writes++
			most = max(most, writes)
		case vfs.OpSync:
			writes = 0
			mu.Unlock()
			time.Sleep(3 * time.Millisecond)
			mu.Lock()
		}
		return nil
	})
	big := []byte(`{"x":"` + strings.Repeat("a", 300<<10) + `"}`)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Schedule(ctx, "t", big, base().Add(time.Minute)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	fs.SetHook(nil)
	if most > 3 || most == 0 {
		t.Fatalf("%d records of 300 KiB written to one file between fsyncs, want 1..3 (maxGroupBytes %d)", most, maxGroupBytes)
	}
}
