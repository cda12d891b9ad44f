//go:build linux

package vfs

// SyncFSTrusted exposes syncfsTrusted to the external tests.
var SyncFSTrusted = syncfsTrusted
