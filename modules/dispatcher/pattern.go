package dispatcher

import "github.com/mmmq/mmmq/modules/contract"

// Pattern is a parsed topic pattern; it is contract.Pattern (the matcher
// moved there so that auth permissions share it without importing this
// package).
type Pattern = contract.Pattern

// ParsePattern parses s (contract.ParsePattern).
func ParsePattern(s string) (Pattern, error) { return contract.ParsePattern(s) }

// MustPattern is ParsePattern that panics on error; for patterns written in
// Go source, e.g. dispatcher.MustPattern("order.**").
func MustPattern(s string) Pattern { return contract.MustPattern(s) }
