// Package vfs is the small filesystem interface every piece of mmmq storage
// code goes through, so that tests can inject write, fsync and rename faults
// and simulate power loss (see MemFS). The shape follows hashicorp/raft-wal's
// types/vfs.go and pebble's vfs package: only the operations the log needs.
//
// Positions and sizes are in bytes. Writes are positional (pwrite): the caller
// tracks where the end of a file is, so a short or failed write never leaves
// a hidden file offset behind.
package vfs

import (
	"errors"
	"io"
	"io/fs"
)

// File is an open file. Implementations: *os.File (via OS) and MemFS files.
type File interface {
	// ReadAt reads len(p) bytes at off; io.EOF when the file is shorter.
	ReadAt(p []byte, off int64) (int, error)
	// WriteAt writes p at off, growing the file as needed.
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes the file's data and size durable (fsync).
	Sync() error
	// Datasync makes the file's data and the metadata needed to read it
	// back, its size, durable (fdatasync(2)), but not necessarily other
	// metadata such as timestamps: cheaper than Sync where the platform
	// has it, the same call elsewhere.
	Datasync() error
	// Truncate sets the file's size to size bytes.
	Truncate(size int64) error
	// Size is the file's current size in bytes.
	Size() (int64, error)
	// Close releases the file. It does not sync.
	Close() error
}

// DirEntry is one name in a directory listing.
type DirEntry struct {
	Name  string
	IsDir bool
}

// FS is the filesystem used by all storage code. The OS implementation is
// OS{}; MemFS is the test implementation with fault injection and crash
// simulation. Names are slash- or OS-separated paths as produced by
// path/filepath.
// FSSyncer is implemented by filesystems that can make everything written
// to them durable in one call: file contents, sizes and directory entries
// alike (syncfs(2) for OS on Linux; every file and directory of a MemFS).
// SyncFS returns an error wrapping errors.ErrUnsupported where that is not
// available or not known to work (OS off Linux; OS on FUSE, whose syncfs
// returns 0 and syncs nothing, or on a filesystem type not known to honour
// it; a CountingFS over an FS without it), and the caller then syncs file
// by file. The broker uses it once at startup, so
// that what a killed process left in the page cache is durable before
// anything of it is served, instead of two fsyncs per topic.
type FSSyncer interface {
	SyncFS(dir string) error
}

type FS interface {
	// Create creates name (truncating it if it exists) for reading and writing.
	// The new directory entry is durable only after SyncDir of its parent.
	Create(name string) (File, error)
	// OpenRW opens an existing file for reading and writing.
	// Errors wrap fs.ErrNotExist when name does not exist.
	OpenRW(name string) (File, error)
	// Open opens an existing file read-only.
	// Errors wrap fs.ErrNotExist when name does not exist.
	Open(name string) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename atomically replaces newname with oldname. Durable after SyncDir.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and any missing parents (mode 0o755).
	MkdirAll(dir string) error
	// List returns the entries of dir sorted by name.
	// Errors wrap fs.ErrNotExist when dir does not exist.
	List(dir string) ([]DirEntry, error)
	// SyncDir fsyncs the directory itself so that created, renamed and
	// removed entries survive a power loss (fsync(2): syncing a file does not
	// sync its directory entry).
	SyncDir(dir string) error
	// Lock takes an exclusive, non-blocking lock on the file name, held
	// until the returned io.Closer is closed (the shape of pebble's
	// vfs.FS.Lock). It fails at once, never waits, when the lock is held:
	// the error is a *LockedError, naming the holder's pid when known.
	// Other errors say which step failed ("open lock file <name>: ...",
	// "lock <name>: ..."). The parent directory must exist. A lock is
	// released by Close or when the process ends, so a crashed holder
	// never blocks its restart. OS locks with flock(2) and writes this
	// process's pid into the file; MemFS keeps the lock in memory only
	// (see MemFS.Lock). Wrappers such as CountingFS forward it.
	Lock(name string) (io.Closer, error)
	// FreeSpace returns the bytes available for new data on the
	// filesystem holding dir (statfs(2): Bavail × Bsize for OS; the
	// capacity left for a MemFS). It is a system call: callers on a hot
	// path sample it (see storage.SpaceGuard). Errors name dir.
	FreeSpace(dir string) (int64, error)
	// TotalSpace returns the size in bytes of the filesystem holding dir
	// (statfs(2): Blocks × Bsize for OS; the capacity for a MemFS), for
	// telling a disk guard that can never be met from one that is met
	// now. Errors name dir.
	TotalSpace(dir string) (int64, error)
}

// IsNotExist reports whether err says a file or directory does not exist.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
