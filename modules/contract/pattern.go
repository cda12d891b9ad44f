package contract

import (
	"fmt"
	"strings"
)

// ValidatePattern checks the syntax of a topic pattern (a dispatcher's
// patterns, retention's topic overrides): segments separated by '.', each
// either one or more of [A-Za-z0-9_-], or exactly "*" (one topic segment)
// or "**" (zero or more), at most MaxTopicBytes bytes in all. So the empty
// pattern, an empty segment (leading, trailing or doubled '.'), "a*", "*a",
// "***" and any other byte are refused. The error starts with "invalid
// topic pattern", quotes the pattern and says why. It is the one syntax
// check: the dispatcher's parser and configuration validation both use
// it.
func ValidatePattern(s string) error {
	if s == "" {
		return fmt.Errorf("invalid topic pattern %q: empty", s)
	}
	if len(s) > MaxTopicBytes {
		return fmt.Errorf("invalid topic pattern %.40q...: %d bytes, at most %d", s, len(s), MaxTopicBytes)
	}
	pos := 0
	for _, p := range strings.Split(s, ".") {
		switch {
		case p == "":
			return fmt.Errorf("invalid topic pattern %q: %s", s, emptySegment(s, pos))
		case p == "*", p == "**":
		default:
			for i := 0; i < len(p); i++ {
				if p[i] == '*' {
					return fmt.Errorf("invalid topic pattern %q: segment %q: '*' and '**' must be a whole segment", s, p)
				}
				if !segmentByte(p[i]) {
					return fmt.Errorf("invalid topic pattern %q: byte %d is %q; segments may hold only [A-Za-z0-9_-], '*' or '**'", s, pos+i, p[i])
				}
			}
		}
		pos += len(p) + 1
	}
	return nil
}

// segmentByte reports whether c may appear in a literal pattern segment
// ([A-Za-z0-9_-], the same characters as a topic name segment).
func segmentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// emptySegment says where the empty segment starting at byte pos of s is.
func emptySegment(s string, pos int) string {
	switch {
	case pos == 0:
		return "leading '.'"
	case pos >= len(s):
		return "trailing '.'"
	}
	return fmt.Sprintf("'..' at byte %d", pos-1)
}
