//go:build unix

package contract

import "syscall"

// OpenFileLimit is this process's open-file limit (RLIMIT_NOFILE, the soft
// limit, which the Go runtime raises to the hard one at start on Linux),
// and false when it cannot be read.
func OpenFileLimit() (uint64, bool) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, false
	}
	return uint64(lim.Cur), true
}
