package contract

import "strings"

// Reserved topic prefixes: the one rule dispatcher patterns, the topics of
// auth permissions and retention overrides share (see the README's
// "Reserved topics").
//
// A topic under a reserved prefix is reached only by a pattern that names
// the prefix literally, segment for segment: "dead-letter.**" and
// "dead-letter.billing" reach dead-letter.billing; "**", "*.billing" and
// "dead-letter*" (invalid anyway) do not. So a wildcard written for the
// ordinary topics never covers the broker's own: a "**" dispatcher is not
// pushed dead letters back, a "**" token does not read, publish, consume
// or delete them, and broker-wide retention does not delete them.

// DeadLetterPrefix starts every dead-letter topic (a dispatcher's default
// dead-letter topic is DeadLetterPrefix + its name). It is reserved.
const DeadLetterPrefix = "dead-letter."

// reservedPrefixes is the list ReservedPrefixes returns; each ends with
// '.' and is made of whole literal segments.
var reservedPrefixes = []string{DeadLetterPrefix}

// ReservedPrefixes returns the reserved topic prefixes (a copy), each
// ending with '.'.
func ReservedPrefixes() []string { return append([]string(nil), reservedPrefixes...) }

// ReservedPrefix returns the reserved prefix topic is under, "" when it is
// under none.
func ReservedPrefix(topic string) string {
	for _, r := range reservedPrefixes {
		if strings.HasPrefix(topic, r) {
			return r
		}
	}
	return ""
}

// Names reports whether p names prefix literally: its first segments are
// the prefix's, so that it may reach topics under it.
func (p Pattern) Names(prefix string) bool { return strings.HasPrefix(p.raw, prefix) }

// Reaches reports whether p reaches topic under the reserved-prefix rule:
// p matches topic and, when topic is under a reserved prefix, p names that
// prefix. It is the check every user of patterns makes (Match alone
// ignores the rule).
func (p Pattern) Reaches(topic string) bool {
	if r := ReservedPrefix(topic); r != "" && !p.Names(r) {
		return false
	}
	return p.Match(topic)
}

// MatchesUnder reports whether p, ignoring the reserved-prefix rule,
// matches at least one topic under prefix (a '.'-terminated run of
// literal segments): "**", "*.billing" and "dead-letter.**" do for
// "dead-letter.", "order.**" and "*" do not. It tells what the rule takes
// away from a pattern that does not name the prefix.
func (p Pattern) MatchesUnder(prefix string) bool {
	lits := strings.Split(strings.TrimSuffix(prefix, "."), ".")
	// at holds the pattern positions reachable after the literals read so
	// far ("**" may stay on its position or be skipped).
	at := p.closure(map[int]bool{0: true})
	for _, lit := range lits {
		next := map[int]bool{}
		for i := range at {
			if i == len(p.segs) {
				continue
			}
			switch s := p.segs[i]; s.kind {
			case segAny:
				next[i] = true
			case segOne:
				next[i+1] = true
			default:
				if s.lit == lit {
					next[i+1] = true
				}
			}
		}
		at = p.closure(next)
	}
	// A topic under the prefix has at least one more segment; any
	// non-empty rest of the pattern matches some non-empty rest of a topic.
	for i := range at {
		if i < len(p.segs) {
			return true
		}
	}
	return false
}

// closure adds to at every position reached by skipping "**" segments.
func (p Pattern) closure(at map[int]bool) map[int]bool {
	for i := 0; i < len(p.segs); i++ {
		if at[i] && p.segs[i].kind == segAny {
			at[i+1] = true
		}
	}
	return at
}
