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
// broker again (instead of failing) only when its startup failed on an
// ftruncate of an open, existing file answered ENOENT — the stale answer
// of LazyFS's truncate handler (lazyTruncateENOENT) — worded as the
// binary prints a startup failure of the storage engine's repair. A
// missing file, an open that failed, another errno, a mismatched path or
// the words outside a startup failure are the broker's, and still fail
// the round. Runs without LazyFS.
func TestLazyFSStaleTruncateAnswerIsRecognised(t *testing.T) {
	dir := t.TempDir()
	seg := filepath.Join(dir, "lz.a", "0000000000000000000.mmm")
	idx := filepath.Join(dir, "lz.a", "0000000000000000000.idx")
	if err := os.MkdirAll(filepath.Dir(seg), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{seg, idx} {
		if err := os.WriteFile(p, make([]byte, 64), 0o644); err != nil {
			t.Fatal(err)
		}
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
	// startup is the binary's stderr line for a repair step that failed.
	startup := func(step, path string, err error) string {
		err = fmt.Errorf("recovery: open topic lz.a: %w", fmt.Errorf("%s %s: %w", step, path, err))
		return `{"level":"info","msg":"recovery started"}` + "\nmmmq: startup failed: " + err.Error() + "\n"
	}
	for _, tc := range []struct {
		name, log string
		want      bool
	}{
		{"the segment's cut, file there", startup("truncate segment", seg, ftrunc(seg, syscall.ENOENT)), true},
		{"the index's cut, file there", startup("truncate index", idx, ftrunc(idx, syscall.ENOENT)), true},
		{"the file is missing", startup("truncate segment", gone, ftrunc(gone, syscall.ENOENT)), false},
		{"the open failed", startup("truncate segment", gone, openErr), false},
		{"another errno", startup("truncate segment", seg, ftrunc(seg, syscall.EIO)), false},
		{"another file truncated", startup("truncate segment", seg, ftrunc(idx, syscall.ENOENT)), false},
		{"not a startup failure", fmt.Errorf("truncate segment %s: %w", seg, ftrunc(seg, syscall.ENOENT)).Error(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &lzRun{t: t}
			if got := k.staleTruncate(tc.log); got != tc.want {
				t.Fatalf("staleTruncate(%q) = %t, want %t", tc.log, got, tc.want)
			}
			if want := map[bool]int{true: 1}[tc.want]; k.st.Spurious != want {
				t.Fatalf("counted %d stale answers, want %d", k.st.Spurious, want)
			}
		})
	}
}
