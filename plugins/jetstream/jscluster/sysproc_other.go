//go:build !linux

package jscluster

import "syscall"

// sysProcAttr: elsewhere a node outlives a test binary that dies without
// running its cleanups.
func sysProcAttr() *syscall.SysProcAttr { return nil }
