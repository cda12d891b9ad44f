//go:build !linux

package vfs

// Datasync implements File: fdatasync(2) is not used outside Linux, so it
// is Sync (fsync), which makes at least as much durable.
func (f osFile) Datasync() error { return f.Sync() }
