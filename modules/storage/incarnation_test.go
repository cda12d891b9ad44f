package storage

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestIncarnation: a new topic's id is durable as soon as Open returns
// (before any append), stays the same across reopens, a topic without the
// file (older data) gets one, and a garbled file refuses the topic with
// every file untouched.
func TestIncarnation(t *testing.T) {
	fsys := vfs.NewMem()
	l := openMem(t, fsys, Options{})
	id := l.Incarnation()
	if !validIncarnation(id) {
		t.Fatalf("incarnation %q: want 32 hex digits", id)
	}
	// Power loss right after creation: the id survives.
	crashed := fsys.Crash(vfs.CrashOptions{})
	if got, err := ReadIncarnation(crashed, testDir); err != nil || got != id {
		t.Fatalf("after power loss: %q, %v; want %q", got, err, id)
	}
	if _, err := l.Append(context.Background(), []byte(`{"a":1}`), contract.Durable); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openMem(t, fsys, Options{})
	if l.Incarnation() != id {
		t.Fatalf("reopen: incarnation %s, want %s", l.Incarnation(), id)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	// Data from before incarnation ids: one is made, and kept.
	if err := fsys.Remove(filepath.Join(testDir, IncarnationFile)); err != nil {
		t.Fatal(err)
	}
	l = openMem(t, fsys, Options{})
	legacy := l.Incarnation()
	if !validIncarnation(legacy) || legacy == id || l.HighWatermark() != 1 {
		t.Fatalf("legacy topic: incarnation %q (old %q), high watermark %d", legacy, id, l.HighWatermark())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadIncarnation(fsys.Crash(vfs.CrashOptions{}), testDir); got != legacy {
		t.Fatalf("legacy id not durable: %q, want %q", got, legacy)
	}

	// A garbled file: refused, nothing rewritten.
	bad := []byte("not an id\n")
	if err := fsys.WriteFile(filepath.Join(testDir, IncarnationFile), bad, true); err != nil {
		t.Fatal(err)
	}
	_, err := Open(testDir, Options{FS: fsys})
	var ce *contract.CorruptionError
	if !errors.As(err, &ce) || ce.File != filepath.Join(testDir, IncarnationFile) {
		t.Fatalf("garbled incarnation: %v, want a contract.CorruptionError naming the file", err)
	}
	if got, _ := fsys.ReadFile(filepath.Join(testDir, IncarnationFile)); string(got) != string(bad) {
		t.Fatalf("refused topic's incarnation file was rewritten: %q", got)
	}
}

// TestVerifyRefusesBadIncarnation: an incarnation file that Open refuses
// (empty, garbled, no newline) is CORRUPT for Verify too, naming the file,
// and the error says no offset, since none applies.
func TestVerifyRefusesBadIncarnation(t *testing.T) {
	for name, content := range map[string]string{
		"empty":      "",
		"garbled":    "zzzz\n",
		"no newline": "0123456789abcdef0123456789abcdef",
		"upper case": "0123456789ABCDEF0123456789ABCDEF\n",
	} {
		t.Run(name, func(t *testing.T) {
			fsys := vfs.NewMem()
			l := openMem(t, fsys, Options{})
			if _, err := l.Append(context.Background(), []byte(`{"a":1}`), contract.Durable); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(testDir, IncarnationFile)
			if err := fsys.WriteFile(path, []byte(content), true); err != nil {
				t.Fatal(err)
			}
			_, openErr := Open(testDir, Options{FS: fsys})
			var ce *contract.CorruptionError
			if !errors.As(openErr, &ce) {
				t.Fatalf("open: %v, want a contract.CorruptionError", openErr)
			}
			if msg := openErr.Error(); strings.Contains(msg, "offset") || !strings.Contains(msg, path+" byte 0") {
				t.Errorf("open error %q: want the file and byte, no offset (none applies)", msg)
			}
			rep, err := Verify(testDir, Options{FS: fsys}, nil)
			if err != nil || rep.Status != StatusCorrupt || rep.Corruption == nil || rep.Corruption.File != path {
				t.Fatalf("verify: %+v, %v; want CORRUPT naming %s, as Open refuses it", rep, err, path)
			}
		})
	}
}

// TestCorruptionErrorWhere: the offset and byte position are printed only
// when they apply.
func TestCorruptionErrorWhere(t *testing.T) {
	for _, tc := range []struct {
		pos, off int64
		want     string
	}{
		{7, 3, `storage: corruption in topic "t": bad at f byte 7 (offset 3)`},
		{0, -1, `storage: corruption in topic "t": bad at f byte 0`},
		{-1, -1, `storage: corruption in topic "t": bad at f`},
	} {
		e := &contract.CorruptionError{Topic: "t", File: "f", Pos: tc.pos, Offset: tc.off, Reason: "bad"}
		if got := e.Error(); got != tc.want {
			t.Errorf("pos %d offset %d: %q, want %q", tc.pos, tc.off, got, tc.want)
		}
	}
}
