package contract

import "strings"

// The one topic-pattern matcher: dispatchers (dispatcher.Pattern is an
// alias), retention overrides and the topics of auth permissions all use it.

// segKind is the kind of one pattern segment.
type segKind uint8

const (
	segLiteral segKind = iota // [A-Za-z0-9_-]+, matches itself
	segOne                    // "*": exactly one segment
	segAny                    // "**": zero or more segments
)

type segment struct {
	kind segKind
	lit  string // segLiteral only
}

// Pattern is a parsed topic pattern (TopicPattern in the original Java mmmq):
// segments separated by '.', each either a literal of [A-Za-z0-9_-]+, a whole
// segment "*" matching exactly one topic segment, or a whole segment "**"
// matching zero or more topic segments:
//
//	news.**   matches news, news.world, news.world.europe
//	order.*   matches order.new; not order, not order.new.x
//	a.**.b    matches a.b, a.x.b, a.x.y.b
//
// Build one with ParsePattern or MustPattern. The zero Pattern matches
// nothing. A Pattern is immutable and safe for concurrent use.
type Pattern struct {
	raw  string
	segs []segment
}

// ParsePattern parses s. It fails, with an error quoting s and saying why,
// when s is empty, longer than MaxTopicBytes (249) bytes, has an empty
// segment (leading, trailing or doubled '.'), or has a segment that is
// neither [A-Za-z0-9_-]+ nor exactly "*" or "**" (so "a*", "*a", "***" are
// errors: wildcards are whole segments only). The syntax check is
// ValidatePattern, which configuration validation runs too.
func ParsePattern(s string) (Pattern, error) {
	if err := ValidatePattern(s); err != nil {
		return Pattern{}, err
	}
	parts := strings.Split(s, ".")
	segs := make([]segment, 0, len(parts))
	for _, p := range parts {
		switch p {
		case "*":
			segs = append(segs, segment{kind: segOne})
		case "**":
			segs = append(segs, segment{kind: segAny})
		default:
			segs = append(segs, segment{kind: segLiteral, lit: p})
		}
	}
	return Pattern{raw: s, segs: segs}, nil
}

// MustPattern is ParsePattern that panics on error; for patterns written in
// Go source, e.g. contract.MustPattern("order.**").
func MustPattern(s string) Pattern {
	p, err := ParsePattern(s)
	if err != nil {
		panic(err)
	}
	return p
}

// IsZero reports whether p is the zero Pattern (which matches nothing).
func (p Pattern) IsZero() bool { return len(p.segs) == 0 }

// String returns the pattern as it was parsed ("" for the zero Pattern).
func (p Pattern) String() string { return p.raw }

// Match reports whether topic matches p. A topic that is not a valid topic
// name (ValidateTopic) matches nothing. The cost is O(segments(p) ×
// segments(topic)) time and O(segments(topic)) space, whatever the number of
// "**" (dynamic programming, no backtracking).
func (p Pattern) Match(topic string) bool {
	if len(p.segs) == 0 || ValidateTopic(topic) != nil {
		return false
	}
	t := strings.Split(topic, ".")
	m := len(t)
	// next[j] reports whether p.segs[i+1:] matches t[j:]; cur is row i.
	next := make([]bool, m+1)
	cur := make([]bool, m+1)
	next[m] = true // the empty pattern matches the empty rest
	for i := len(p.segs) - 1; i >= 0; i-- {
		s := p.segs[i]
		switch s.kind {
		case segAny:
			// "**" consumes nothing (next[j]) or one segment and stays (cur[j+1]).
			cur[m] = next[m]
			for j := m - 1; j >= 0; j-- {
				cur[j] = next[j] || cur[j+1]
			}
		case segOne:
			cur[m] = false
			for j := m - 1; j >= 0; j-- {
				cur[j] = next[j+1]
			}
		default:
			cur[m] = false
			for j := m - 1; j >= 0; j-- {
				cur[j] = next[j+1] && t[j] == s.lit
			}
		}
		next, cur = cur, next
	}
	return next[0]
}
