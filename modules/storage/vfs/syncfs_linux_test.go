//go:build linux

package vfs_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestOSSyncFS: syncfs(2) on a real directory succeeds, a missing one is an
// error naming it, and CountingFS forwards it (or says it is unsupported).
func TestOSSyncFS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (vfs.OS{}).SyncFS(dir); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	if err := (vfs.OS{}).SyncFS(missing); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
	if err := vfs.NewCounting(vfs.OS{}).SyncFS(dir); err != nil {
		t.Fatalf("counting over OS: %v", err)
	}
	type plain struct{ vfs.FS } // hides OS's SyncFS
	if err := vfs.NewCounting(plain{vfs.OS{}}).SyncFS(dir); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("counting over an FS without SyncFS: %v", err)
	}
}

// TestSyncFSTrustedTypes: syncfs is trusted on the listed local
// filesystems and refused, as unsupported, on FUSE (where it returns 0 and
// syncs nothing) and on any type not known to be durable.
func TestSyncFSTrustedTypes(t *testing.T) {
	for _, tc := range []struct {
		magic int64
		ok    bool
		says  string
	}{
		{0xEF53, true, ""},
		{0x58465342, true, ""},
		{0x65735546, false, "no-op on FUSE"},
		{0x6969, false, "not known to be durable"}, // NFS
	} {
		err := vfs.SyncFSTrusted(tc.magic)
		if tc.ok != (err == nil) || (!tc.ok && (!errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), tc.says))) {
			t.Errorf("type %#x: %v, want ok=%v (%q)", tc.magic, err, tc.ok, tc.says)
		}
	}
}
