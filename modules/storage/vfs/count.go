package vfs

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// CountingFS wraps an FS and counts File.Sync and File.Datasync calls on
// the files it opens, for benchmarks that report fsyncs per message on the
// real filesystem (&CountingFS{FS: OS{}}), and the files it has open, for
// tests that bound the descriptors a log holds. Files from Create, OpenRW
// and Open wrap the inner files; every other method, Lock included, is the
// inner FS's (forwarded by embedding). Use it by pointer: the counters must
// not be copied.
type CountingFS struct {
	FS
	// Syncs is the number of File.Sync and File.Datasync calls (durability
	// calls), failed ones included.
	Syncs atomic.Int64
	// OpenFiles is the number of files opened (Create, OpenRW, Open) and not
	// closed yet; a second Close of a file does not count.
	OpenFiles atomic.Int64
	// MaxOpenFiles is the highest value OpenFiles has had.
	MaxOpenFiles atomic.Int64
}

var _ FS = (*CountingFS)(nil)

// NewCounting returns a CountingFS wrapping inner.
func NewCounting(inner FS) *CountingFS { return &CountingFS{FS: inner} }

// SyncFS forwards to the inner FS when it implements FSSyncer; otherwise
// it returns an error wrapping errors.ErrUnsupported.
func (c *CountingFS) SyncFS(dir string) error {
	if s, ok := c.FS.(FSSyncer); ok {
		return s.SyncFS(dir)
	}
	return fmt.Errorf("sync filesystem of %s: %w", dir, errors.ErrUnsupported)
}

// Create implements FS.
func (c *CountingFS) Create(name string) (File, error) { return c.wrap(c.FS.Create(name)) }

// OpenRW implements FS.
func (c *CountingFS) OpenRW(name string) (File, error) { return c.wrap(c.FS.OpenRW(name)) }

// Open implements FS.
func (c *CountingFS) Open(name string) (File, error) { return c.wrap(c.FS.Open(name)) }

func (c *CountingFS) wrap(f File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	n := c.OpenFiles.Add(1)
	for {
		m := c.MaxOpenFiles.Load()
		if n <= m || c.MaxOpenFiles.CompareAndSwap(m, n) {
			break
		}
	}
	return &countingFile{File: f, c: c}, nil
}

// countingFile counts Sync and Datasync calls and its Close into its CountingFS.
type countingFile struct {
	File
	c      *CountingFS
	closed atomic.Bool
}

// Close implements File.
func (f *countingFile) Close() error {
	if !f.closed.Swap(true) {
		f.c.OpenFiles.Add(-1)
	}
	return f.File.Close()
}

// Sync implements File.
func (f *countingFile) Sync() error {
	f.c.Syncs.Add(1)
	return f.File.Sync()
}

// Datasync implements File; it counts in Syncs.
func (f *countingFile) Datasync() error {
	f.c.Syncs.Add(1)
	return f.File.Datasync()
}
