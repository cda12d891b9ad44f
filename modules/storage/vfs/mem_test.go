package vfs_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// mustCreate creates dir/name with data written at 0, optionally synced.
func mustCreate(t *testing.T, m vfs.FS, name string, data string, sync bool) vfs.File {
	t.Helper()
	f, err := m.Create(name)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	if _, err := f.WriteAt([]byte(data), 0); err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatalf("sync %s: %v", name, err)
		}
	}
	return f
}

func mustSyncDir(t *testing.T, m vfs.FS, dir string) {
	t.Helper()
	if err := m.SyncDir(dir); err != nil {
		t.Fatalf("syncdir %s: %v", dir, err)
	}
}

// durableDir returns a MemFS with directory "d" durably created.
func durableDir(t *testing.T) *vfs.MemFS {
	t.Helper()
	m := vfs.NewMem()
	if err := m.MkdirAll("d"); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, m, ".")
	return m
}

// content returns the file's contents or "<absent>".
func content(t *testing.T, m *vfs.MemFS, name string) string {
	t.Helper()
	b, err := m.ReadFile(name)
	if vfs.IsNotExist(err) {
		return "<absent>"
	}
	if err != nil {
		t.Fatalf("readfile %s: %v", name, err)
	}
	return string(b)
}

func TestCrashDurability(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, m *vfs.MemFS)
		want map[string]string // path -> contents after Crash
	}{{
		name: "unsynced data dropped",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/f", "hello", false)
			mustSyncDir(t, m, "d")
		},
		want: map[string]string{"d/f": ""},
	}, {
		name: "synced data kept, later writes dropped",
		run: func(t *testing.T, m *vfs.MemFS) {
			f := mustCreate(t, m, "d/f", "hello", true)
			mustSyncDir(t, m, "d")
			if _, err := f.WriteAt([]byte("HELLO world"), 0); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/f": "hello"},
	}, {
		name: "unsynced truncate undone",
		run: func(t *testing.T, m *vfs.MemFS) {
			f := mustCreate(t, m, "d/f", "hello", true)
			mustSyncDir(t, m, "d")
			if err := f.Truncate(2); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/f": "hello"},
	}, {
		name: "synced truncate kept",
		run: func(t *testing.T, m *vfs.MemFS) {
			f := mustCreate(t, m, "d/f", "hello", true)
			mustSyncDir(t, m, "d")
			if err := f.Truncate(2); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/f": "he"},
	}, {
		name: "overwrite inside synced region then sync",
		run: func(t *testing.T, m *vfs.MemFS) {
			f := mustCreate(t, m, "d/f", "hello", true)
			mustSyncDir(t, m, "d")
			if _, err := f.WriteAt([]byte("J"), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt([]byte("!"), 5); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/f": "Jello!"},
	}, {
		name: "created, data synced, dir not synced: vanishes",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/f", "hello", true)
		},
		want: map[string]string{"d/f": "<absent>"},
	}, {
		name: "mkdir without parent sync vanishes with its files",
		run: func(t *testing.T, m *vfs.MemFS) {
			if err := m.MkdirAll("d/sub"); err != nil {
				t.Fatal(err)
			}
			mustCreate(t, m, "d/sub/f", "x", true)
			mustSyncDir(t, m, "d/sub")
		},
		want: map[string]string{"d/sub/f": "<absent>"},
	}, {
		name: "mkdir with parent sync survives",
		run: func(t *testing.T, m *vfs.MemFS) {
			if err := m.MkdirAll("d/sub"); err != nil {
				t.Fatal(err)
			}
			mustCreate(t, m, "d/sub/f", "x", true)
			mustSyncDir(t, m, "d/sub")
			mustSyncDir(t, m, "d")
		},
		want: map[string]string{"d/sub/f": "x"},
	}, {
		name: "rename without dir sync: old name",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/tmp", "new", true)
			mustSyncDir(t, m, "d")
			if err := m.Rename("d/tmp", "d/f"); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/tmp": "new", "d/f": "<absent>"},
	}, {
		name: "rename after dir sync: new name",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/tmp", "new", true)
			mustSyncDir(t, m, "d")
			if err := m.Rename("d/tmp", "d/f"); err != nil {
				t.Fatal(err)
			}
			mustSyncDir(t, m, "d")
		},
		want: map[string]string{"d/tmp": "<absent>", "d/f": "new"},
	}, {
		name: "rename over existing without dir sync keeps old file",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/f", "old", true)
			mustCreate(t, m, "d/tmp", "new", true)
			mustSyncDir(t, m, "d")
			if err := m.Rename("d/tmp", "d/f"); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/tmp": "new", "d/f": "old"},
	}, {
		name: "remove without dir sync comes back",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/f", "x", true)
			mustSyncDir(t, m, "d")
			if err := m.Remove("d/f"); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"d/f": "x"},
	}, {
		name: "remove with dir sync is gone",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/f", "x", true)
			mustSyncDir(t, m, "d")
			if err := m.Remove("d/f"); err != nil {
				t.Fatal(err)
			}
			mustSyncDir(t, m, "d")
		},
		want: map[string]string{"d/f": "<absent>"},
	}, {
		name: "create over durable file truncates only until sync",
		run: func(t *testing.T, m *vfs.MemFS) {
			mustCreate(t, m, "d/f", "old", true)
			mustSyncDir(t, m, "d")
			mustCreate(t, m, "d/f", "n", false)
		},
		want: map[string]string{"d/f": "old"},
	}, {
		name: "WriteFile synced survives, unsynced new file does not",
		run: func(t *testing.T, m *vfs.MemFS) {
			if err := m.WriteFile("a/b/s", []byte("s"), true); err != nil {
				t.Fatal(err)
			}
			if err := m.WriteFile("a/b/u", []byte("u"), false); err != nil {
				t.Fatal(err)
			}
		},
		want: map[string]string{"a/b/s": "s", "a/b/u": "<absent>"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := durableDir(t)
			tt.run(t, m)
			c := m.Crash(vfs.CrashOptions{})
			for name, want := range tt.want {
				if got := content(t, c, name); got != want {
					t.Errorf("after crash %s = %q, want %q", name, got, want)
				}
			}
		})
	}
}

func TestCrashKeepsOldFSUsable(t *testing.T) {
	m := durableDir(t)
	f := mustCreate(t, m, "d/f", "abc", true)
	mustSyncDir(t, m, "d")
	c := m.Crash(vfs.CrashOptions{})
	if _, err := f.WriteAt([]byte("def"), 3); err != nil {
		t.Fatal(err)
	}
	if got := content(t, m, "d/f"); got != "abcdef" {
		t.Errorf("old FS d/f = %q, want abcdef", got)
	}
	if got := content(t, c, "d/f"); got != "abc" {
		t.Errorf("crashed FS d/f = %q, want abc (old handles must not reach it)", got)
	}
	// The crashed FS is fully durable: crashing it again changes nothing.
	if got := content(t, c.Crash(vfs.CrashOptions{}), "d/f"); got != "abc" {
		t.Errorf("second crash d/f = %q, want abc", got)
	}
}

func TestCrashTornTail(t *testing.T) {
	const synced, unsynced = "0123456789", "abcdefghijklmnopqrstuvwxyz"
	for _, zero := range []bool{false, true} {
		t.Run(fmt.Sprintf("zero=%v", zero), func(t *testing.T) {
			m := durableDir(t)
			f := mustCreate(t, m, "d/f", synced, true)
			mustSyncDir(t, m, "d")
			if _, err := f.WriteAt([]byte(unsynced), int64(len(synced))); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(7, 7))
			lens := map[int]bool{}
			for range 200 {
				got := content(t, m.Crash(vfs.CrashOptions{TornTail: true, ZeroFillTail: zero, Rand: rng}), "d/f")
				if len(got) < len(synced) || len(got) > len(synced)+len(unsynced) {
					t.Fatalf("len %d outside [%d, %d]", len(got), len(synced), len(synced)+len(unsynced))
				}
				if got[:len(synced)] != synced {
					t.Fatalf("synced prefix = %q, want %q", got[:len(synced)], synced)
				}
				tail := got[len(synced):]
				want := unsynced[:len(tail)]
				if zero {
					want = string(make([]byte, len(tail)))
				}
				if tail != want {
					t.Fatalf("tail = %q, want %q", tail, want)
				}
				lens[len(tail)] = true
			}
			if !lens[0] || len(lens) < 10 {
				t.Errorf("tail lengths not spread over the range: %v", lens)
			}
		})
	}
}

func TestCrashTornTailReproducible(t *testing.T) {
	m := durableDir(t)
	for i := range 5 {
		mustCreate(t, m, fmt.Sprintf("d/f%d", i), "some unsynced bytes", false)
	}
	mustSyncDir(t, m, "d")
	snap := func() []string {
		c := m.Crash(vfs.CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(3, 4))})
		var out []string
		for i := range 5 {
			out = append(out, content(t, c, fmt.Sprintf("d/f%d", i)))
		}
		return out
	}
	if a, b := snap(), snap(); !reflect.DeepEqual(a, b) {
		t.Errorf("same seed, different crashes:\n%q\n%q", a, b)
	}
}

func TestCrashZeroFillTailWithoutTorn(t *testing.T) {
	m := durableDir(t)
	f := mustCreate(t, m, "d/f", "ab", true)
	mustSyncDir(t, m, "d")
	if _, err := f.WriteAt([]byte("cd"), 2); err != nil {
		t.Fatal(err)
	}
	if got := content(t, m.Crash(vfs.CrashOptions{ZeroFillTail: true}), "d/f"); got != "ab\x00\x00" {
		t.Errorf("d/f = %q, want %q", got, "ab\x00\x00")
	}
}

func TestHookErrors(t *testing.T) {
	errInjected := errors.New("injected")
	tests := []struct {
		op  vfs.Op
		run func(m *vfs.MemFS, f vfs.File) error
	}{
		{vfs.OpCreate, func(m *vfs.MemFS, _ vfs.File) error { _, err := m.Create("d/new"); return err }},
		{vfs.OpOpen, func(m *vfs.MemFS, _ vfs.File) error { _, err := m.Open("d/f"); return err }},
		{vfs.OpOpen, func(m *vfs.MemFS, _ vfs.File) error { _, err := m.OpenRW("d/f"); return err }},
		{vfs.OpWrite, func(_ *vfs.MemFS, f vfs.File) error { _, err := f.WriteAt([]byte("zz"), 0); return err }},
		{vfs.OpSync, func(_ *vfs.MemFS, f vfs.File) error { return f.Sync() }},
		{vfs.OpDatasync, func(_ *vfs.MemFS, f vfs.File) error { return f.Datasync() }},
		{vfs.OpTruncate, func(_ *vfs.MemFS, f vfs.File) error { return f.Truncate(0) }},
		{vfs.OpRename, func(m *vfs.MemFS, _ vfs.File) error { return m.Rename("d/f", "d/g") }},
		{vfs.OpRemove, func(m *vfs.MemFS, _ vfs.File) error { return m.Remove("d/f") }},
		{vfs.OpMkdir, func(m *vfs.MemFS, _ vfs.File) error { return m.MkdirAll("d/sub") }},
		{vfs.OpSyncDir, func(m *vfs.MemFS, _ vfs.File) error { return m.SyncDir("d") }},
		{vfs.OpRead, func(_ *vfs.MemFS, f vfs.File) error { _, err := f.ReadAt(make([]byte, 1), 0); return err }},
		{vfs.OpList, func(m *vfs.MemFS, _ vfs.File) error { _, err := m.List("d"); return err }},
		{vfs.OpFreeSpace, func(m *vfs.MemFS, _ vfs.File) error { _, err := m.FreeSpace("d"); return err }},
		{vfs.OpTotalSpace, func(m *vfs.MemFS, _ vfs.File) error { _, err := m.TotalSpace("d"); return err }},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%d-%s", i, tt.op), func(t *testing.T) {
			m := durableDir(t)
			f := mustCreate(t, m, "d/f", "data", true)
			mustSyncDir(t, m, "d")
			var seen []vfs.Op
			m.SetHook(func(op vfs.Op, name string) error {
				seen = append(seen, op)
				if op == tt.op {
					return fmt.Errorf("%s %s: %w", op, name, errInjected)
				}
				return nil
			})
			if err := tt.run(m, f); !errors.Is(err, errInjected) {
				t.Fatalf("err = %v, want the injected error", err)
			}
			if !reflect.DeepEqual(seen, []vfs.Op{tt.op}) {
				t.Errorf("hook saw %v, want [%v]", seen, tt.op)
			}
			m.SetHook(nil)
			// The failed operation changed nothing.
			if got := content(t, m, "d/f"); got != "data" {
				t.Errorf("d/f = %q, want data", got)
			}
			ents, err := m.List("d")
			if err != nil {
				t.Fatal(err)
			}
			if want := []vfs.DirEntry{{Name: "f"}}; !reflect.DeepEqual(ents, want) {
				t.Errorf("List(d) = %v, want %v", ents, want)
			}
			if (tt.op == vfs.OpSync || tt.op == vfs.OpDatasync) && m.SyncCount() != 2 {
				t.Errorf("SyncCount = %d, want 2 (failed calls count)", m.SyncCount())
			}
		})
	}
}

func TestHookFailedSyncKeepsUnsyncedData(t *testing.T) {
	m := durableDir(t)
	f := mustCreate(t, m, "d/f", "abc", false)
	mustSyncDir(t, m, "d")
	m.SetHook(func(op vfs.Op, _ string) error {
		if op == vfs.OpSync {
			return syscall.EIO
		}
		return nil
	})
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync = %v, want EIO", err)
	}
	if got := content(t, m.Crash(vfs.CrashOptions{}), "d/f"); got != "" {
		t.Errorf("after failed sync and crash d/f = %q, want empty", got)
	}
}

func TestShortWrite(t *testing.T) {
	tests := []struct {
		name    string
		hookErr error
		wantN   int
		wantErr error
	}{
		{"value", vfs.ShortWrite{N: 3, Err: syscall.EIO}, 3, syscall.EIO},
		{"pointer", &vfs.ShortWrite{N: 2, Err: syscall.EIO}, 2, syscall.EIO},
		{"nil err", vfs.ShortWrite{N: 1}, 1, io.ErrShortWrite},
		{"N beyond len", vfs.ShortWrite{N: 99, Err: syscall.EIO}, 6, syscall.EIO},
		{"N negative", vfs.ShortWrite{N: -1, Err: syscall.EIO}, 0, syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := durableDir(t)
			f := mustCreate(t, m, "d/f", "", false)
			m.SetHook(func(op vfs.Op, _ string) error {
				if op == vfs.OpWrite {
					return tt.hookErr
				}
				return nil
			})
			n, err := f.WriteAt([]byte("abcdef"), 0)
			if n != tt.wantN || !errors.Is(err, tt.wantErr) {
				t.Fatalf("WriteAt = %d, %v; want %d, %v", n, err, tt.wantN, tt.wantErr)
			}
			if got, want := content(t, m, "d/f"), "abcdef"[:tt.wantN]; got != want {
				t.Errorf("d/f = %q, want %q", got, want)
			}
		})
	}
}

func TestCapacity(t *testing.T) {
	m := durableDir(t)
	m.SetCapacity(10)
	f := mustCreate(t, m, "d/f", "123456", false)
	g, err := m.Create("d/g")
	if err != nil {
		t.Fatal(err)
	}
	n, err := g.WriteAt([]byte("abcdefgh"), 0)
	var pe *fs.PathError
	if n != 4 || !errors.Is(err, syscall.ENOSPC) || !errors.As(err, &pe) || pe.Op != "write" {
		t.Fatalf("WriteAt = %d, %#v; want 4, *fs.PathError{write, ENOSPC}", n, err)
	}
	if got := content(t, m, "d/g"); got != "abcd" {
		t.Errorf("d/g = %q, want abcd", got)
	}
	// Overwriting in place needs no space.
	if _, err := g.WriteAt([]byte("AB"), 0); err != nil {
		t.Errorf("overwrite at full capacity: %v", err)
	}
	if err := g.Truncate(20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Truncate grow = %v, want ENOSPC", err)
	}
	// A write starting beyond what fits writes nothing and does not extend.
	if n, err := f.WriteAt([]byte("x"), 50); n != 0 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("WriteAt(50) = %d, %v; want 0, ENOSPC", n, err)
	}
	if sz, _ := f.Size(); sz != 6 {
		t.Errorf("f size = %d, want 6", sz)
	}

	// Truncate frees space.
	if err := f.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if n, err := g.WriteAt([]byte("efgh"), 4); n != 4 || err != nil {
		t.Errorf("after Truncate WriteAt = %d, %v; want 4, nil", n, err)
	}
	// Remove frees space.
	if err := m.Remove("d/g"); err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt([]byte("12345678"), 2); n != 8 || err != nil {
		t.Errorf("after Remove WriteAt = %d, %v; want 8, nil", n, err)
	}
	// Rename over a file frees the replaced file.
	if err := m.WriteFile("d/h", nil, false); err != nil {
		t.Fatal(err)
	}
	if err := m.Rename("d/h", "d/f"); err != nil {
		t.Fatal(err)
	}
	h, err := m.OpenRW("d/f")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := h.WriteAt(make([]byte, 10), 0); n != 10 || err != nil {
		t.Errorf("after Rename WriteAt = %d, %v; want 10, nil", n, err)
	}
	// Capacity 0 is unlimited.
	m.SetCapacity(0)
	if _, err := h.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Errorf("unlimited WriteAt: %v", err)
	}
}

func TestConcurrentReadWrite(t *testing.T) {
	m := durableDir(t)
	w := mustCreate(t, m, "d/log", "", false)
	const recs, size = 2000, 16
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex // publishes the written length, like the storage writer
		published int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		rec := make([]byte, size)
		for i := range recs {
			for j := range rec {
				rec[j] = byte(i)
			}
			binary.BigEndian.PutUint64(rec, uint64(i))
			if _, err := w.WriteAt(rec, int64(i*size)); err != nil {
				t.Error(err)
				return
			}
			if i%50 == 0 {
				if err := w.Sync(); err != nil {
					t.Error(err)
					return
				}
			}
			mu.Lock()
			published = int64(i+1) * size
			mu.Unlock()
		}
	}()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := m.Open("d/log")
			if err != nil {
				t.Error(err)
				return
			}
			defer r.Close()
			buf := make([]byte, size)
			for {
				mu.Lock()
				end := published
				mu.Unlock()
				for off := int64(0); off < end; off += size * 37 {
					if _, err := r.ReadAt(buf, off); err != nil {
						t.Errorf("ReadAt %d: %v", off, err)
						return
					}
					if got := binary.BigEndian.Uint64(buf); got != uint64(off/size) {
						t.Errorf("record at %d = %d, want %d", off, got, off/size)
						return
					}
				}
				if _, err := r.Size(); err != nil {
					t.Error(err)
					return
				}
				_ = m.Crash(vfs.CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(1, 1))})
				if end == recs*size {
					return
				}
			}
		}()
	}
	wg.Wait()
	if m.SyncCount() != recs/50 {
		t.Errorf("SyncCount = %d, want %d", m.SyncCount(), recs/50)
	}
}

func TestReadOnlyRejectsWrites(t *testing.T) {
	m := durableDir(t)
	mustCreate(t, m, "d/f", "abc", true).Close()
	f, err := m.Open("d/f")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt([]byte("x"), 0); n != 0 || !errors.Is(err, syscall.EBADF) {
		t.Errorf("WriteAt = %d, %v; want 0, EBADF", n, err)
	}
	if err := f.Truncate(0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Truncate = %v, want EINVAL", err)
	}
	if got := content(t, m, "d/f"); got != "abc" {
		t.Errorf("d/f = %q, want abc", got)
	}
	buf := make([]byte, 3)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "abc" {
		t.Errorf("ReadAt = %q, %v", buf, err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("Sync of read-only file: %v (fsync of O_RDONLY is allowed)", err)
	}
}

func TestErrors(t *testing.T) {
	m := durableDir(t)
	mustCreate(t, m, "d/f", "x", false)
	if err := m.MkdirAll("d/sub/x"); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"Open missing", second(m.Open("d/missing")), fs.ErrNotExist},
		{"OpenRW missing", second(m.OpenRW("d/missing")), fs.ErrNotExist},
		{"Create missing parent", second(m.Create("nope/f")), fs.ErrNotExist},
		{"Create under file", second(m.Create("d/f/g")), syscall.ENOTDIR},
		{"Create dir", second(m.Create("d")), syscall.EISDIR},
		{"Open dir", second(m.Open("d")), syscall.EISDIR},
		{"List missing", second(m.List("nope")), fs.ErrNotExist},
		{"List file", second(m.List("d/f")), syscall.ENOTDIR},
		{"ReadFile missing", second(m.ReadFile("d/missing")), fs.ErrNotExist},
		{"Remove missing", m.Remove("d/missing"), fs.ErrNotExist},
		{"Remove non-empty", m.Remove("d/sub"), syscall.ENOTEMPTY},
		{"Rename missing", m.Rename("d/missing", "d/x"), fs.ErrNotExist},
		{"Rename into missing dir", m.Rename("d/f", "nope/f"), fs.ErrNotExist},
		{"Rename dir into itself", m.Rename("d/sub", "d/sub/x/y"), syscall.EINVAL},
		{"Rename file over dir", m.Rename("d/f", "d/sub"), syscall.EISDIR},
		{"Rename dir over non-empty dir", m.Rename("d/sub/x", "d"), syscall.ENOTEMPTY},
		{"MkdirAll over file", m.MkdirAll("d/f"), syscall.ENOTDIR},
		{"SyncDir missing", m.SyncDir("nope"), fs.ErrNotExist},
		{"SyncDir file", m.SyncDir("d/f"), syscall.ENOTDIR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, tt.want) {
				t.Errorf("err = %v, want %v", tt.err, tt.want)
			}
			if got, want := vfs.IsNotExist(tt.err), tt.want == fs.ErrNotExist; got != want {
				t.Errorf("IsNotExist(%v) = %v, want %v", tt.err, got, want)
			}
			var pe *fs.PathError
			var le *os.LinkError
			if !errors.As(tt.err, &pe) && !errors.As(tt.err, &le) {
				t.Errorf("err %#v is neither *fs.PathError nor *os.LinkError", tt.err)
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

func TestPathsAndList(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("/a/b/"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a/b/z", "./a/b/y", "/a/b/../b/x"} {
		mustCreate(t, m, name, name, false).Close()
	}
	if err := m.MkdirAll("a/b/c"); err != nil {
		t.Fatal(err)
	}
	ents, err := m.List("a//b")
	if err != nil {
		t.Fatal(err)
	}
	want := []vfs.DirEntry{{Name: "c", IsDir: true}, {Name: "x"}, {Name: "y"}, {Name: "z"}}
	if !reflect.DeepEqual(ents, want) {
		t.Errorf("List = %v, want %v", ents, want)
	}
	if got := content(t, m, "/a/b/x"); got != "/a/b/../b/x" {
		t.Errorf("a/b/x = %q", got)
	}
}

func TestCountingFS(t *testing.T) {
	for _, inner := range []struct {
		name string
		fs   vfs.FS
		dir  string
	}{{"os", vfs.OS{}, t.TempDir()}, {"mem", vfs.NewMem(), "/"}} {
		t.Run(inner.name, func(t *testing.T) {
			c := vfs.NewCounting(inner.fs)
			name := filepath.Join(inner.dir, "f")
			f := mustCreate(t, c, name, "a", true)
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()
			r, err := c.OpenRW(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Sync(); err != nil {
				t.Fatal(err)
			}
			if err := r.Datasync(); err != nil {
				t.Fatal(err)
			}
			if err := c.SyncDir(inner.dir); err != nil {
				t.Fatal(err)
			}
			if got := c.Syncs.Load(); got != 4 {
				t.Errorf("Syncs = %d, want 4 (Datasync counts)", got)
			}
			if m, ok := inner.fs.(*vfs.MemFS); ok && m.SyncCount() != 4 {
				t.Errorf("inner SyncCount = %d, want 4 (files must wrap the inner files)", m.SyncCount())
			}
			if got := c.OpenFiles.Load(); got != 1 {
				t.Errorf("OpenFiles = %d, want 1 (the OpenRW file)", got)
			}
			r.Close()
			r.Close()
			if got, peak := c.OpenFiles.Load(), c.MaxOpenFiles.Load(); got != 0 || peak != 1 {
				t.Errorf("after Close: OpenFiles = %d, MaxOpenFiles = %d, want 0 and 1", got, peak)
			}
		})
	}
}

// TestConformance runs one scenario against OS and MemFS and compares
// transcripts.
func TestConformance(t *testing.T) {
	run := func(t *testing.T, fsys vfs.FS, root string) []string {
		var log []string
		p := func(parts ...string) string { return filepath.Join(append([]string{root}, parts...)...) }
		rec := func(what string, err error) {
			class := "ok"
			switch {
			case err == nil:
			case vfs.IsNotExist(err):
				class = "not-exist"
			case errors.Is(err, fs.ErrExist):
				class = "exist"
			case errors.Is(err, fs.ErrClosed):
				class = "closed"
			case errors.Is(err, io.EOF):
				class = "eof"
			default:
				var errno syscall.Errno
				if errors.As(err, &errno) {
					class = errno.Error()
				} else {
					class = "error: " + err.Error()
				}
			}
			log = append(log, what+" -> "+class)
		}
		must := func(f vfs.File, err error) vfs.File {
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		rec("mkdir", fsys.MkdirAll(p("a", "b")))
		rec("mkdir again", fsys.MkdirAll(p("a", "b")))
		f, err := fsys.Create(p("a", "b", "f"))
		rec("create", err)
		n, err := f.WriteAt([]byte("hello"), 0)
		rec(fmt.Sprintf("write %d", n), err)
		n, err = f.WriteAt([]byte("XY"), 10)
		rec(fmt.Sprintf("write hole %d", n), err)
		sz, err := f.Size()
		rec(fmt.Sprintf("size %d", sz), err)
		buf := make([]byte, 12)
		n, err = f.ReadAt(buf, 0)
		rec(fmt.Sprintf("read %d %q", n, buf[:n]), err)
		n, err = f.ReadAt(buf, 8)
		rec(fmt.Sprintf("read tail %d %q", n, buf[:n]), err)
		n, err = f.ReadAt(buf, 100)
		rec(fmt.Sprintf("read past end %d", n), err)
		n, err = f.ReadAt(nil, 100)
		rec(fmt.Sprintf("read empty past end %d", n), err)
		rec("truncate", f.Truncate(3))
		rec("truncate grow", f.Truncate(6))
		n, err = f.ReadAt(buf[:6], 0)
		rec(fmt.Sprintf("read %d %q", n, buf[:n]), err)
		rec("sync", f.Sync())
		rec("datasync", f.Datasync())
		rec("close", f.Close())
		rec("close again", f.Close())
		_, err = f.WriteAt([]byte("x"), 0)
		rec("write closed", err)
		rec("sync closed", f.Sync())
		rec("datasync closed", f.Datasync())

		_, err = fsys.Open(p("a", "b", "missing"))
		rec("open missing", err)
		_, err = fsys.OpenRW(p("a", "b", "missing"))
		rec("openrw missing", err)
		_, err = fsys.Create(p("a", "missing", "f"))
		rec("create missing dir", err)

		r := must(fsys.Open(p("a", "b", "f")))
		_, err = r.WriteAt([]byte("x"), 0)
		rec("ro write", err)
		rec("ro truncate", r.Truncate(0))
		rec("ro sync", r.Sync())
		rec("ro datasync", r.Datasync())
		rec("ro close", r.Close())

		rec("rename", fsys.Rename(p("a", "b", "f"), p("a", "b", "g")))
		rec("rename missing", fsys.Rename(p("a", "b", "f"), p("a", "b", "h")))
		g := must(fsys.Create(p("a", "h")))
		_, err = g.WriteAt([]byte("hh"), 0)
		rec("write h", err)
		rec("close h", g.Close())
		rec("rename over file", fsys.Rename(p("a", "h"), p("a", "b", "g")))
		ents, err := fsys.List(p("a", "b"))
		rec(fmt.Sprint("list ", ents), err)
		ents, err = fsys.List(p("a"))
		rec(fmt.Sprint("list ", ents), err)
		ents, err = fsys.List(p("a", "missing"))
		rec(fmt.Sprint("list missing ", ents), err)
		_, err = fsys.List(p("a", "b", "g"))
		rec("list file", err)

		g = must(fsys.OpenRW(p("a", "b", "g")))
		buf = make([]byte, 2)
		n, err = g.ReadAt(buf, 0)
		rec(fmt.Sprintf("read g %q", buf[:n]), err)
		c := must(fsys.Create(p("a", "b", "g")))
		sz, err = g.Size()
		rec(fmt.Sprintf("size after re-create %d", sz), err)
		rec("close", c.Close())
		rec("close", g.Close())

		rec("mkdir over file", fsys.MkdirAll(p("a", "b", "g", "x")))
		rec("syncdir", fsys.SyncDir(p("a", "b")))
		rec("syncdir missing", fsys.SyncDir(p("a", "missing")))
		rec("remove non-empty", fsys.Remove(p("a")))
		rec("remove", fsys.Remove(p("a", "b", "g")))
		rec("remove again", fsys.Remove(p("a", "b", "g")))
		rec("remove dir", fsys.Remove(p("a", "b")))
		ents, err = fsys.List(p("a"))
		rec(fmt.Sprint("list ", ents), err)
		return log
	}
	osLog := run(t, vfs.OS{}, t.TempDir())
	memLog := run(t, vfs.NewMem(), "/tmp/conformance")
	if !reflect.DeepEqual(osLog, memLog) {
		for i := range max(len(osLog), len(memLog)) {
			var o, m string
			if i < len(osLog) {
				o = osLog[i]
			}
			if i < len(memLog) {
				m = memLog[i]
			}
			mark := "  "
			if o != m {
				mark = "!="
			}
			t.Logf("%s os: %-40s mem: %s", mark, o, m)
		}
		t.Fatal("MemFS differs from OS")
	}
}

// TestSyncAfterOverwrite checks that the incremental Sync copy is exact after
// mixed appends, overwrites and truncates.
func TestSyncAfterOverwrite(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	m := durableDir(t)
	f := mustCreate(t, m, "d/f", "", false)
	mustSyncDir(t, m, "d")
	for i := range 500 {
		sz, _ := f.Size()
		switch rng.IntN(4) {
		case 0:
			if err := f.Truncate(rng.Int64N(sz + 10)); err != nil {
				t.Fatal(err)
			}
		default:
			b := make([]byte, rng.IntN(20))
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
			if _, err := f.WriteAt(b, rng.Int64N(sz+5)); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(3) == 0 {
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			cur, _ := m.ReadFile("d/f")
			got, _ := m.Crash(vfs.CrashOptions{}).ReadFile("d/f")
			if !bytes.Equal(got, cur) {
				t.Fatalf("step %d: crashed contents after Sync differ from current:\n%x\n%x", i, got, cur)
			}
		}
	}
}

// TestMemFreeSpace: a MemFS without capacity reports unlimited space; with
// one, the capacity minus the bytes of every file, never below 0, freed by
// truncating or removing; a missing directory or a file is an error.
func TestMemFreeSpace(t *testing.T) {
	m := durableDir(t)
	if free, err := m.FreeSpace("d"); err != nil || free != math.MaxInt64 {
		t.Fatalf("no capacity: free %d (%v), want MaxInt64", free, err)
	}
	f := mustCreate(t, m, "d/f", "0123456789", false)
	m.SetCapacity(100)
	if free, err := m.FreeSpace("d"); err != nil || free != 90 {
		t.Fatalf("free %d (%v), want 90", free, err)
	}
	m.SetCapacity(5) // below usage: nothing removed, nothing free
	if free, err := m.FreeSpace("/"); err != nil || free != 0 {
		t.Fatalf("over capacity: free %d (%v), want 0", free, err)
	}
	m.SetCapacity(100)
	if err := f.Truncate(4); err != nil {
		t.Fatal(err)
	}
	if free, _ := m.FreeSpace("d"); free != 96 {
		t.Fatalf("after truncate: free %d, want 96", free)
	}
	if err := m.Remove("d/f"); err != nil {
		t.Fatal(err)
	}
	if free, _ := m.FreeSpace("d"); free != 100 {
		t.Fatalf("after remove: free %d, want 100", free)
	}
	if _, err := m.FreeSpace("nope"); !vfs.IsNotExist(err) {
		t.Errorf("missing dir: %v", err)
	}
	mustCreate(t, m, "d/g", "x", false)
	if _, err := m.FreeSpace("d/g"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a file: %v", err)
	}
}

// TestMemTotalSpace: the capacity, whatever is used; unlimited without
// one; a missing directory or a file is an error.
func TestMemTotalSpace(t *testing.T) {
	m := durableDir(t)
	if total, err := m.TotalSpace("d"); err != nil || total != math.MaxInt64 {
		t.Fatalf("no capacity: total %d (%v), want MaxInt64", total, err)
	}
	mustCreate(t, m, "d/f", "0123456789", false)
	m.SetCapacity(100)
	if total, err := m.TotalSpace("d"); err != nil || total != 100 {
		t.Fatalf("total %d (%v), want 100", total, err)
	}
	if _, err := m.TotalSpace("nope"); !vfs.IsNotExist(err) {
		t.Errorf("missing dir: %v", err)
	}
	if _, err := m.TotalSpace("d/f"); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("a file: %v", err)
	}
}

// TestKillKeepsPageCacheThenCrashDropsIt: Kill keeps every write (a
// process crash keeps the page cache), synced or not, file contents and
// directory entries; what was unsynced stays unsynced, so a Crash of the
// killed FS drops it; the killed FS is independent of the old one.
func TestKillKeepsPageCacheThenCrashDropsIt(t *testing.T) {
	m := durableDir(t)
	f := mustCreate(t, m, "d/f", "abc", true)
	mustSyncDir(t, m, "d")
	if _, err := f.WriteAt([]byte("def"), 3); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, m, "d/new", "x", true) // its directory entry not synced
	k := m.Kill()
	if got := content(t, k, "d/f"); got != "abcdef" {
		t.Errorf("killed d/f = %q, want abcdef (unsynced bytes kept)", got)
	}
	if got := content(t, k, "d/new"); got != "x" {
		t.Errorf("killed d/new = %q, want x", got)
	}
	if _, err := f.WriteAt([]byte("ghi"), 6); err != nil {
		t.Fatal(err)
	}
	if got := content(t, k, "d/f"); got != "abcdef" {
		t.Errorf("killed d/f = %q after a write to the old FS", got)
	}
	c := k.Crash(vfs.CrashOptions{})
	if got := content(t, c, "d/f"); got != "abc" {
		t.Errorf("crash of the killed FS: d/f = %q, want abc", got)
	}
	if _, err := c.ReadFile("d/new"); !vfs.IsNotExist(err) {
		t.Errorf("crash of the killed FS kept d/new, whose entry was never synced: %v", err)
	}
	// Synced in the killed FS, it survives the crash.
	g, err := k.OpenRW("d/f")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := content(t, k.Crash(vfs.CrashOptions{}), "d/f"); got != "abcdef" {
		t.Errorf("synced after the kill, then crashed: d/f = %q, want abcdef", got)
	}
}

// TestMemSyncFS: SyncFS makes every file's contents and every directory's
// entries durable, as syncfs(2) does; a Crash afterwards keeps them.
func TestMemSyncFS(t *testing.T) {
	m := vfs.NewMem()
	if err := m.MkdirAll("a/b"); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, m, "a/b/f", "hello", false)
	mustCreate(t, m, "a/g", "x", false)
	if got := content(t, m.Crash(vfs.CrashOptions{}), "a/b/f"); got != "<absent>" {
		t.Fatalf("before SyncFS a crash kept a/b/f: %q", got)
	}
	if err := m.SyncFS("a"); err != nil {
		t.Fatal(err)
	}
	c := m.Crash(vfs.CrashOptions{})
	if got := content(t, c, "a/b/f"); got != "hello" {
		t.Errorf("after SyncFS: a/b/f = %q, want hello", got)
	}
	if got := content(t, c, "a/g"); got != "x" {
		t.Errorf("after SyncFS: a/g = %q, want x", got)
	}
	if err := m.SyncFS("missing"); err == nil {
		t.Error("SyncFS of a missing directory succeeded")
	}
}

// TestDatasyncDurableLikeSync: whatever Crash model is used, a file made
// durable with Datasync survives exactly as one made durable with Sync
// after the same writes, overwrites and truncations.
func TestDatasyncDurableLikeSync(t *testing.T) {
	opts := map[string]func() vfs.CrashOptions{
		"default":  func() vfs.CrashOptions { return vfs.CrashOptions{} },
		"torn":     func() vfs.CrashOptions { return vfs.CrashOptions{TornTail: true, Rand: rand.New(rand.NewPCG(1, 9))} },
		"zerofill": func() vfs.CrashOptions { return vfs.CrashOptions{ZeroFillTail: true} },
		"sector512": func() vfs.CrashOptions {
			return vfs.CrashOptions{SectorSize: 512, Rand: rand.New(rand.NewPCG(2, 9))}
		},
		"sector4096": func() vfs.CrashOptions {
			return vfs.CrashOptions{SectorSize: 4096, Rand: rand.New(rand.NewPCG(3, 9))}
		},
	}
	for name, opt := range opts {
		t.Run(name, func(t *testing.T) {
			m := durableDir(t)
			fs := map[string]vfs.File{"sync": mustCreate(t, m, "d/sync", "", false), "datasync": mustCreate(t, m, "d/datasync", "", false)}
			mustSyncDir(t, m, "d")
			step := func(f vfs.File, i int) {
				t.Helper()
				if _, err := f.WriteAt(bytes.Repeat([]byte{byte('a' + i)}, 700), int64(300*i)); err != nil {
					t.Fatal(err)
				}
				if i%3 == 2 {
					if err := f.Truncate(int64(250 * i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i := range 6 {
				for _, f := range fs {
					step(f, i)
				}
				if err := fs["sync"].Sync(); err != nil {
					t.Fatal(err)
				}
				if err := fs["datasync"].Datasync(); err != nil {
					t.Fatal(err)
				}
				want := content(t, m, "d/sync")
				for range 5 {
					c := m.Crash(opt())
					if got := content(t, c, "d/sync"); got != want {
						t.Fatalf("step %d: synced file after crash differs from its contents", i)
					}
					if got := content(t, c, "d/datasync"); got != want {
						t.Fatalf("step %d: datasynced file after crash (%d bytes) differs from its contents (%d bytes)", i, len(got), len(want))
					}
				}
				// Unsynced changes on top, which a crash may or may not keep.
				for _, f := range fs {
					if _, err := f.WriteAt([]byte("unsynced"), int64(100*i)); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
}

// sectorSizes are the SectorSize values the sector model tests run with.
var sectorSizes = []int{512, 4096}

// sectorClasses checks got against the sector model for a file whose
// synced contents were old and whose current contents are cur, and
// returns for each sector of got whether it holds the new bytes ('n'), the
// old ones ('o') or is the same either way ('u'). got's size must lie
// between the two sizes; each sector (cut at len(got)) must equal the old
// image (old, then zeros) or the new one (cur, then beyond len(cur) the
// old image) over the same range.
func sectorClasses(t *testing.T, ss int, old, cur, got []byte) []byte {
	t.Helper()
	lo, hi := min(len(old), len(cur)), max(len(old), len(cur))
	if len(got) < lo || len(got) > hi {
		t.Fatalf("size %d outside [%d, %d]", len(got), lo, hi)
	}
	oldImg := make([]byte, hi)
	copy(oldImg, old)
	newImg := slices.Clone(oldImg)
	copy(newImg, cur)
	var classes []byte
	for k := 0; k*ss < len(got); k++ {
		a, b := k*ss, min((k+1)*ss, len(got))
		isOld, isNew := bytes.Equal(got[a:b], oldImg[a:b]), bytes.Equal(got[a:b], newImg[a:b])
		switch {
		case isOld && isNew:
			classes = append(classes, 'u')
		case isOld:
			classes = append(classes, 'o')
		case isNew:
			classes = append(classes, 'n')
		default:
			t.Fatalf("sector %d [%d, %d) is neither its old nor its new contents:\ngot %q\nold %q\nnew %q", k, a, b, got[a:b], oldImg[a:b], newImg[a:b])
		}
	}
	return classes
}

// sectorPattern returns n bytes whose sector k (of size ss) is all
// byte(first + k%26): nonzero, and different from one sector to the next.
func sectorPattern(n, ss int, first byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = first + byte(i/ss%26)
	}
	return b
}

// TestCrashSectorsShapes: with unsynced data appended to a synced prefix,
// the sector model produces over many crashes a lost (zero) sector
// followed by a later persisted one, everything persisted, and nothing
// persisted (the current size with only zeros beyond the synced size).
func TestCrashSectorsShapes(t *testing.T) {
	for _, ss := range sectorSizes {
		t.Run(fmt.Sprint(ss), func(t *testing.T) {
			m := durableDir(t)
			synced := bytes.Repeat([]byte{'S'}, 2*ss+ss/2)
			f := mustCreate(t, m, "d/f", string(synced), true)
			mustSyncDir(t, m, "d")
			if _, err := f.WriteAt(sectorPattern(8*ss, ss, 'a'), int64(len(synced))); err != nil {
				t.Fatal(err)
			}
			cur, _ := m.ReadFile("d/f")
			firstNew := (len(synced) + ss - 1) / ss // first sector wholly beyond the synced size
			rng := rand.New(rand.NewPCG(11, uint64(ss)))
			var hole, all, none int
			for range 400 {
				got, _ := m.Crash(vfs.CrashOptions{SectorSize: ss, Rand: rng}).ReadFile("d/f")
				classes := sectorClasses(t, ss, synced, cur, got)
				if !bytes.Equal(got[:min(len(got), len(synced))], synced[:min(len(got), len(synced))]) {
					t.Fatalf("synced bytes changed")
				}
				if len(got) != len(cur) {
					continue
				}
				switch {
				case bytes.Equal(got, cur):
					all++
				case !slices.ContainsFunc(got[len(synced):], func(b byte) bool { return b != 0 }):
					none++
				}
				for k := firstNew; k < len(classes); k++ {
					if classes[k] == 'o' && slices.Contains(classes[k+1:], 'n') {
						if z := got[k*ss : (k+1)*ss]; slices.ContainsFunc(z, func(b byte) bool { return b != 0 }) {
							t.Fatalf("lost appended sector %d is not zeros", k)
						}
						hole++
						break
					}
				}
			}
			t.Logf("of 400 crashes: %d hole then data, %d all persisted, %d none persisted", hole, all, none)
			if hole == 0 || all == 0 || none == 0 {
				t.Errorf("shapes missing: %d hole then data, %d all persisted, %d none persisted; want each > 0", hole, all, none)
			}
		})
	}
}

// TestCrashSectorsOverwriteInsideSynced: an unsynced overwrite inside the
// synced size is sometimes kept, sometimes not, sometimes in part, and
// never leaves zeros or changes the size.
func TestCrashSectorsOverwriteInsideSynced(t *testing.T) {
	for _, ss := range sectorSizes {
		t.Run(fmt.Sprint(ss), func(t *testing.T) {
			m := durableDir(t)
			synced := bytes.Repeat([]byte{'o'}, 4*ss)
			f := mustCreate(t, m, "d/f", string(synced), true)
			mustSyncDir(t, m, "d")
			// Unaligned: sectors 0 to 2 change, in part for 0 and 2.
			if _, err := f.WriteAt(bytes.Repeat([]byte{'n'}, 2*ss), int64(ss/2)); err != nil {
				t.Fatal(err)
			}
			cur, _ := m.ReadFile("d/f")
			rng := rand.New(rand.NewPCG(12, uint64(ss)))
			var kept, lost, partial int
			for range 200 {
				got, _ := m.Crash(vfs.CrashOptions{SectorSize: ss, Rand: rng}).ReadFile("d/f")
				if len(got) != len(synced) {
					t.Fatalf("size %d, want %d (the size did not change)", len(got), len(synced))
				}
				if i := bytes.IndexByte(got, 0); i >= 0 {
					t.Fatalf("zero byte at %d inside the synced size", i)
				}
				classes := sectorClasses(t, ss, synced, cur, got)
				switch n := bytes.Count(classes, []byte{'n'}); n {
				case 0:
					lost++
				case 3:
					kept++
				default:
					partial++
				}
			}
			if kept == 0 || lost == 0 || partial == 0 {
				t.Errorf("overwrite kept %d times, lost %d, kept in part %d; want each > 0", kept, lost, partial)
			}
		})
	}
}

// TestCrashSectorsKeepSyncedBytes: after random writes and truncations
// since the last Sync, every byte below the synced size that was neither
// overwritten nor truncated away keeps its synced value, and every sector
// is all old or all new.
func TestCrashSectorsKeepSyncedBytes(t *testing.T) {
	for _, ss := range sectorSizes {
		t.Run(fmt.Sprint(ss), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(13, uint64(ss)))
			for trial := range 60 {
				m := durableDir(t)
				synced := make([]byte, rng.IntN(5*ss))
				for i := range synced {
					synced[i] = byte(rng.Uint32())
				}
				f := mustCreate(t, m, "d/f", string(synced), true)
				mustSyncDir(t, m, "d")
				touched := map[int]bool{}
				touchedFrom := math.MaxInt // everything from here on was truncated away
				size := len(synced)
				for range 1 + rng.IntN(6) {
					if rng.IntN(4) == 0 {
						size = rng.IntN(size + ss)
						if err := f.Truncate(int64(size)); err != nil {
							t.Fatal(err)
						}
						touchedFrom = min(touchedFrom, size)
						continue
					}
					off, n := rng.IntN(size+ss), 1+rng.IntN(2*ss)
					b := make([]byte, n)
					for i := range b {
						b[i] = byte(rng.Uint32())
					}
					if _, err := f.WriteAt(b, int64(off)); err != nil {
						t.Fatal(err)
					}
					for i := off; i < off+n; i++ {
						touched[i] = true
					}
					size = max(size, off+n)
				}
				cur, _ := m.ReadFile("d/f")
				for range 20 {
					got, _ := m.Crash(vfs.CrashOptions{SectorSize: ss, Rand: rng}).ReadFile("d/f")
					sectorClasses(t, ss, synced, cur, got)
					for i := range min(len(got), len(synced), touchedFrom) {
						if !touched[i] && got[i] != synced[i] {
							t.Fatalf("trial %d: byte %d = %#x, want its synced %#x (never overwritten)", trial, i, got[i], synced[i])
						}
					}
				}
			}
		})
	}
}

// TestCrashSectorsBoundaries: where the new contents differ from the old
// in every byte, the crashed file switches between new and old bytes only
// at multiples of SectorSize.
func TestCrashSectorsBoundaries(t *testing.T) {
	for _, ss := range sectorSizes {
		t.Run(fmt.Sprint(ss), func(t *testing.T) {
			m := durableDir(t)
			f := mustCreate(t, m, "d/f", strings.Repeat("o", 2*ss+100), true)
			mustSyncDir(t, m, "d")
			if _, err := f.WriteAt(bytes.Repeat([]byte{'n'}, 6*ss+300), 0); err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(14, uint64(ss)))
			switches := 0
			for range 300 {
				got, _ := m.Crash(vfs.CrashOptions{SectorSize: ss, Rand: rng}).ReadFile("d/f")
				for i := 1; i < len(got); i++ {
					if (got[i] == 'n') != (got[i-1] == 'n') {
						if i%ss != 0 {
							t.Fatalf("new and old bytes meet at %d, not a multiple of %d", i, ss)
						}
						switches++
					}
				}
			}
			if switches == 0 {
				t.Error("no crash mixed new and old sectors")
			}
		})
	}
}

// TestCrashSectorsSize: the size after a crash is the synced one, the
// current one, or one between, for a grown file, a truncated one (whose
// cut-off bytes come back as they were synced) and one truncated and
// rewritten (each rewritten sector old or new).
func TestCrashSectorsSize(t *testing.T) {
	for _, ss := range sectorSizes {
		for _, tc := range []struct {
			name   string
			synced string
			change func(f vfs.File) error
		}{
			{"grow", strings.Repeat("o", 1000), func(f vfs.File) error {
				_, err := f.WriteAt(sectorPattern(5*ss+7, ss, 'a'), 1000)
				return err
			}},
			{"truncate", string(sectorPattern(5*ss+7, ss, 'A')), func(f vfs.File) error { return f.Truncate(1000) }},
			{"truncate-rewrite", strings.Repeat("o", 3*ss), func(f vfs.File) error {
				if err := f.Truncate(0); err != nil {
					return err
				}
				_, err := f.WriteAt(bytes.Repeat([]byte{'n'}, ss+10), 0)
				return err
			}},
		} {
			t.Run(fmt.Sprint(ss, "/", tc.name), func(t *testing.T) {
				m := durableDir(t)
				f := mustCreate(t, m, "d/f", tc.synced, true)
				mustSyncDir(t, m, "d")
				if err := tc.change(f); err != nil {
					t.Fatal(err)
				}
				cur, _ := m.ReadFile("d/f")
				synced := []byte(tc.synced)
				rng := rand.New(rand.NewPCG(15, uint64(ss)))
				var old, now, between, sectorNew, sectorOld int
				for range 300 {
					got, _ := m.Crash(vfs.CrashOptions{SectorSize: ss, Rand: rng}).ReadFile("d/f")
					classes := sectorClasses(t, ss, synced, cur, got)
					switch len(got) {
					case len(synced):
						old++
					case len(cur):
						now++
					default:
						between++
					}
					if tc.name == "truncate" && !bytes.Equal(got, synced[:len(got)]) {
						t.Fatalf("truncated file after crash is not a prefix of its synced contents")
					}
					sectorNew += bytes.Count(classes, []byte{'n'})
					sectorOld += bytes.Count(classes, []byte{'o'})
				}
				if old == 0 || now == 0 || between == 0 {
					t.Errorf("sizes: %d old, %d current, %d between; want each > 0", old, now, between)
				}
				if tc.name != "truncate" && (sectorNew == 0 || sectorOld == 0) {
					t.Errorf("changed sectors: %d kept new, %d kept old; want both > 0", sectorNew, sectorOld)
				}
			})
		}
	}
}

// TestCrashSectorsReproducibleAndIndependent: the same seed gives the same
// crash, and files with the same history fare differently in one crash.
func TestCrashSectorsReproducibleAndIndependent(t *testing.T) {
	m := durableDir(t)
	const files = 6
	for i := range files {
		f := mustCreate(t, m, fmt.Sprintf("d/f%d", i), strings.Repeat("s", 700), true)
		if _, err := f.WriteAt(sectorPattern(6*512, 512, 'a'), 300); err != nil {
			t.Fatal(err)
		}
	}
	mustSyncDir(t, m, "d")
	snap := func(seed uint64) []string {
		c := m.Crash(vfs.CrashOptions{SectorSize: 512, Rand: rand.New(rand.NewPCG(seed, 4))})
		var out []string
		for i := range files {
			out = append(out, content(t, c, fmt.Sprintf("d/f%d", i)))
		}
		return out
	}
	a := snap(3)
	if b := snap(3); !reflect.DeepEqual(a, b) {
		t.Error("same seed, different crashes")
	}
	if slices.Equal(a, snap(5)) {
		t.Error("different seeds, same crash")
	}
	if len(slices.Compact(slices.Sorted(slices.Values(a)))) == 1 {
		t.Errorf("all %d files crashed alike: not independent", files)
	}
}

// TestCrashSectorsNegativePanics: a negative SectorSize is a mistake, not
// a model.
func TestCrashSectorsNegativePanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	vfs.NewMem().Crash(vfs.CrashOptions{SectorSize: -1})
}

// TestCrashSectorsKeepProbabilityVaries: the chance that a changed sector
// persists is drawn per file and per crash, so a file with many changed
// sectors often keeps all or none of them (which a fixed chance would
// make all but impossible), and files in one crash fare differently.
func TestCrashSectorsKeepProbabilityVaries(t *testing.T) {
	const files, sectors, crashes = 8, 64, 60
	for _, ss := range sectorSizes {
		t.Run(fmt.Sprint(ss), func(t *testing.T) {
			m := durableDir(t)
			for i := range files {
				f := mustCreate(t, m, fmt.Sprintf("d/f%d", i), strings.Repeat("o", sectors*ss), true)
				if _, err := f.WriteAt(bytes.Repeat([]byte{'n'}, sectors*ss), 0); err != nil {
					t.Fatal(err)
				}
			}
			mustSyncDir(t, m, "d")
			rng := rand.New(rand.NewPCG(16, uint64(ss)))
			var all, none, spread int
			for range crashes {
				c := m.Crash(vfs.CrashOptions{SectorSize: ss, Rand: rng})
				lo, hi := 1.0, 0.0
				for i := range files {
					got, _ := c.ReadFile(fmt.Sprintf("d/f%d", i))
					frac := float64(bytes.Count(got, []byte{'n'})) / float64(len(got))
					switch frac {
					case 1:
						all++
					case 0:
						none++
					}
					lo, hi = min(lo, frac), max(hi, frac)
				}
				if hi-lo > 0.5 {
					spread++
				}
			}
			t.Logf("of %d file crashes: %d kept every sector, %d none; %d of %d crashes spread over half the range", files*crashes, all, none, spread, crashes)
			if all < files*crashes/20 || none < files*crashes/20 {
				t.Errorf("%d of %d file crashes kept every sector, %d none; want each at least 1/20", all, files*crashes, none)
			}
			if spread < crashes/10 {
				t.Errorf("in only %d of %d crashes did the files' kept fractions spread over half the range; want at least 1/10", spread, crashes)
			}
		})
	}
}
