package admin

import (
	"reflect"
	"testing"

	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestStoreSavePowerLoss: a power loss (vfs.MemFS.Crash, which keeps only
// what was fsynced and directory entries made durable by SyncDir) at any
// point of a Save leaves dispatchers.json loadable with the old set or the
// new one, never an error or an empty list where there was one; a power
// loss after Save returned finds the new set. Each case crashes before
// every file-system operation Save makes, and once after it returned. It
// fails without the temporary file's fsync (the rename is made durable
// over an empty file) and without the directory fsync (the old set comes
// back after Save returned).
func TestStoreSavePowerLoss(t *testing.T) {
	a := []Spec{{Settings: dispatcher.Settings{Name: "a", Host: "http://localhost:8081", Patterns: []string{"t.*"}}}}
	b := []Spec{{Settings: dispatcher.Settings{Name: "a", Host: "http://localhost:8081", Patterns: []string{"t.*"}}},
		{Settings: dispatcher.Settings{Name: "b", Host: "http://localhost:8082", Patterns: []string{"**"}}}}
	for _, tc := range []struct {
		name     string
		old, new []Spec // old nil: no file before the save
	}{
		{"first save", nil, a},
		{"replace", a, b},
		{"shrink", b, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := memDataRoot(t)
			s := NewStore(mem, "/data")
			if tc.old != nil {
				if err := s.Save(tc.old); err != nil {
					t.Fatal(err)
				}
			}
			crashes, ops := crashPoints(t, mem, func() error { return s.Save(tc.new) })
			check := func(c *vfs.MemFS, when string, want ...[]Spec) {
				t.Helper()
				got, err := NewStore(c, "/data").Load()
				if err != nil {
					t.Fatalf("power loss %s: Load: %v", when, err)
				}
				for _, w := range want {
					if reflect.DeepEqual(got, w) {
						return
					}
				}
				t.Fatalf("power loss %s: loaded %+v, want one of %+v", when, got, want)
			}
			for i, c := range crashes {
				check(c, ops[i], tc.old, tc.new)
			}
			check(mem.Crash(vfs.CrashOptions{}), "after Save returned", tc.new)
		})
	}
}
