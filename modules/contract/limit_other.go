//go:build !unix

package contract

// OpenFileLimit is unknown on this system: 0, false.
func OpenFileLimit() (uint64, bool) { return 0, false }
