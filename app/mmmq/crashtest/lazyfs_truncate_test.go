package crashtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLazyFSStaleTruncateAnswerIsRecognised: the LazyFS rounds start the
// broker again (instead of reporting a refused topic) only when every
// refusal is an ftruncate of an open, existing file answered ENOENT — the
// stale answer of LazyFS's truncate handler (lazyTruncateENOENT) — worded
// as the storage engine's repair and preallocation trim word it. A
// missing file, an open that failed, another errno, or one other refusal
// among them is the broker's, and stays a refusal. Runs without LazyFS.
func TestLazyFSStaleTruncateAnswerIsRecognised(t *testing.T) {
	dir := t.TempDir()
	there := filepath.Join(dir, "lz.a", "0000000000000000000.mmm")
	if err := os.MkdirAll(filepath.Dir(there), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(there, make([]byte, 64), 0o644); err != nil {
		t.Fatal(err)
	}
	gone := filepath.Join(dir, "lz.b", "0000000000000000000.mmm")
	// What os.(*File).Truncate returns for an ftruncate answered errno.
	ftrunc := func(path string, errno syscall.Errno) error {
		return &os.PathError{Op: "truncate", Path: path, Err: errno}
	}
	_, openErr := os.OpenFile(gone, os.O_RDWR, 0)
	if !errors.Is(openErr, os.ErrNotExist) {
		t.Fatalf("opening a missing file: %v", openErr)
	}
	repair := func(path string, err error) string {
		return "quarantined: " + fmt.Errorf("open topic: %w", fmt.Errorf("truncate segment %s: %w", path, err)).Error()
	}
	trim := "failed: " + fmt.Errorf("cut preallocated tail of %s: %w", there, ftrunc(there, syscall.ENOENT)).Error()
	for _, tc := range []struct {
		name    string
		refused map[string]string
		want    bool
	}{
		{"repair's cut of an existing file", map[string]string{"lz.a": repair(there, ftrunc(there, syscall.ENOENT))}, true},
		{"a trim's cut of an existing file", map[string]string{"lz.a": trim}, true},
		{"the file is missing", map[string]string{"lz.b": repair(gone, ftrunc(gone, syscall.ENOENT))}, false},
		{"the open failed", map[string]string{"lz.b": repair(gone, openErr)}, false},
		{"another errno", map[string]string{"lz.a": repair(there, ftrunc(there, syscall.EIO))}, false},
		{"one other refusal among them", map[string]string{
			"lz.a": repair(there, ftrunc(there, syscall.ENOENT)),
			"lz.c": "quarantined: corrupt entry at lz.c/0000000000000000000.mmm byte 40 (offset 2)",
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &lzRun{t: t}
			if got := k.spuriousTruncates(tc.refused); got != tc.want {
				t.Fatalf("spuriousTruncates(%v) = %t, want %t", tc.refused, got, tc.want)
			}
			if want := map[bool]int{true: len(tc.refused)}[tc.want]; k.st.Spurious != want {
				t.Fatalf("counted %d stale answers, want %d", k.st.Spurious, want)
			}
		})
	}
}
