package vfs

import (
	"fmt"
	"os"
	"path/filepath"
)

// TmpExt ends the name of the file ReplaceFile writes before renaming it
// into place; a leftover one is from an interrupted replacement (the
// storage engine's repair removes those of a topic when it opens).
const TmpExt = ".tmp"

// ReplaceOptions tune ReplaceFile.
type ReplaceOptions struct {
	// Mode, when not 0, is set on the new file before it is written, on
	// filesystems whose files have a Chmod (the OS's; MemFS has none).
	Mode os.FileMode
	// BeforeRename, when not nil, runs after the new file is written,
	// fsynced and closed and before it is renamed into place (crash tests
	// stop the process there).
	BeforeRename func()
}

// ReplaceFile replaces the content of path with data durably and
// atomically: it writes path+TmpExt, fsyncs and closes it, renames it over
// path and fsyncs path's directory. A crash at any point leaves path with
// its old content or its new one, never a mix (a leftover path+TmpExt is
// garbage the next ReplaceFile overwrites). The sequence is the classic one
// for small metadata files (the dispatchers file, a topic's incarnation);
// each step's error names the step and the file: "create F: …", "write F:
// …", "sync F: …", "close F: …", "rename F: …", "sync dir D: …".
func ReplaceFile(fsys FS, path string, data []byte, o ReplaceOptions) error {
	tmp := path + TmpExt
	f, err := fsys.Create(tmp)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if c, ok := f.(interface{ Chmod(os.FileMode) error }); ok && o.Mode != 0 {
		if err := c.Chmod(o.Mode); err != nil {
			f.Close()
			return fmt.Errorf("chmod %s: %w", tmp, err)
		}
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if o.BeforeRename != nil {
		o.BeforeRename()
	}
	if err := fsys.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	dir := filepath.Dir(path)
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
