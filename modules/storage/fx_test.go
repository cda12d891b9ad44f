package storage

import (
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestFxModule: Module provides the operating system's filesystem, and
// fx.Replace swaps it for another as its doc says (what the crash tests
// do with an in-memory one).
func TestFxModule(t *testing.T) {
	var fsys vfs.FS
	fxtest.New(t, Module, fx.Populate(&fsys)).RequireStart().RequireStop()
	if _, ok := fsys.(vfs.OS); !ok {
		t.Fatalf("Module's filesystem is %T, want vfs.OS", fsys)
	}
	mem := vfs.NewMem()
	fxtest.New(t, Module, fx.Replace(fx.Annotate(mem, fx.As(new(vfs.FS)))), fx.Populate(&fsys)).RequireStart().RequireStop()
	if fsys != vfs.FS(mem) {
		t.Fatalf("after fx.Replace the filesystem is %T, want the *vfs.MemFS", fsys)
	}
}
