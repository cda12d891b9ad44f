package vfs

import (
	"bytes"
	"testing"
)

// TestReplaceFilePowerLoss: after ReplaceFile returns, a power loss keeps
// the new content (the file fsync and the directory fsync both count: a
// scratch copy without either fails here); a crash before the rename
// keeps the old content whole.
func TestReplaceFilePowerLoss(t *testing.T) {
	for _, model := range []CrashOptions{{}, {SectorSize: 512}} {
		m := NewMem()
		if err := m.MkdirAll("/d"); err != nil {
			t.Fatal(err)
		}
		if err := m.SyncDir("/"); err != nil { // /d itself durable
			t.Fatal(err)
		}
		if err := ReplaceFile(m, "/d/f", []byte("old content\n"), ReplaceOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := ReplaceFile(m, "/d/f", []byte("new content, longer\n"), ReplaceOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := m.Crash(model).ReadFile("/d/f")
		if err != nil || !bytes.Equal(got, []byte("new content, longer\n")) {
			t.Fatalf("after a power loss (%+v): %q, %v; want the new content", model, got, err)
		}

		var crashed *MemFS
		err = ReplaceFile(m, "/d/f", []byte("third\n"), ReplaceOptions{BeforeRename: func() { crashed = m.Crash(model) }})
		if err != nil {
			t.Fatal(err)
		}
		got, err = crashed.ReadFile("/d/f")
		if err != nil || !bytes.Equal(got, []byte("new content, longer\n")) {
			t.Fatalf("power loss before the rename (%+v): %q, %v; want the previous content whole", model, got, err)
		}
	}
}
