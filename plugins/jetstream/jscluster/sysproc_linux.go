package jscluster

import "syscall"

// sysProcAttr makes the kernel SIGKILL a node when the test binary dies
// without running its cleanups (a -timeout panic, a kill), so that no
// nats-server outlives it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
