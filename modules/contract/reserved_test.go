package contract

import "testing"

func TestReservedPrefixRule(t *testing.T) {
	for _, tc := range []struct {
		pattern, topic string
		match, reach   bool
	}{
		{"**", "dead-letter.d", true, false},
		{"*.d", "dead-letter.d", true, false},
		{"*.*", "dead-letter.d", true, false},
		{"dead-letter.**", "dead-letter.d", true, true},
		{"dead-letter.*", "dead-letter.d", true, true},
		{"dead-letter.d", "dead-letter.d", true, true},
		{"dead-letter.**", "dead-letter.d.x", true, true},
		{"**", "dead-letterx.d", true, true},
		{"**", "dead-letter", true, true},
		{"**", "order.dead-letter.d", true, true},
		{"order.**", "order.new", true, true},
	} {
		p := MustPattern(tc.pattern)
		if got := p.Match(tc.topic); got != tc.match {
			t.Errorf("%q.Match(%q) = %v, want %v", tc.pattern, tc.topic, got, tc.match)
		}
		if got := p.Reaches(tc.topic); got != tc.reach {
			t.Errorf("%q.Reaches(%q) = %v, want %v", tc.pattern, tc.topic, got, tc.reach)
		}
	}
	if got := ReservedPrefix("dead-letter.x"); got != DeadLetterPrefix {
		t.Errorf("ReservedPrefix(dead-letter.x) = %q", got)
	}
	if got := ReservedPrefix("dead-letter"); got != "" {
		t.Errorf("ReservedPrefix(dead-letter) = %q, want none", got)
	}
	l := ReservedPrefixes()
	l[0] = "changed."
	if ReservedPrefixes()[0] != DeadLetterPrefix {
		t.Error("ReservedPrefixes returned the list itself")
	}
}

func TestMatchesUnder(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"**", true},
		{"*.*", true},
		{"*.billing", true},
		{"**.billing", true},
		{"*.**", true},
		{"**.*", true},
		{"dead-letter.**", true},
		{"dead-letter.x.y", true},
		{"**.dead-letter.**", true},
		{"*", false},
		{"dead-letter", false},
		{"**.dead-letter", true}, // dead-letter.dead-letter
		{"order.**", false},
		{"dead-letterx.**", false},
		{"*.*.*", true},
	} {
		if got := MustPattern(tc.pattern).MatchesUnder(DeadLetterPrefix); got != tc.want {
			t.Errorf("%q.MatchesUnder(%q) = %v, want %v", tc.pattern, DeadLetterPrefix, got, tc.want)
		}
	}
	if MustPattern("a.*.c").MatchesUnder("a.b.") != true || MustPattern("a.c.**").MatchesUnder("a.b.") != false {
		t.Error("two-segment prefix")
	}
}
