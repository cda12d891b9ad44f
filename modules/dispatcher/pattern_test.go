package dispatcher

import (
	"regexp"
	"strings"
	"testing"

	"github.com/mmmq/mmmq/modules/contract"
)

func TestPatternMatch(t *testing.T) {
	tests := []struct {
		pattern string
		match   []string
		noMatch []string
	}{
		{"news.**", []string{"news", "news.world", "news.world.europe"}, []string{"new", "newsx", "sports.news", "a.news"}},
		{"order.*", []string{"order.new", "order.x-1"}, []string{"order", "order.new.x", "orders.new", "x.order.new"}},
		{"a.**.b", []string{"a.b", "a.x.b", "a.x.y.b", "a.b.b"}, []string{"a", "b", "a.b.c", "x.a.b", "a.bb"}},
		{"**", []string{"a", "a.b", "a.b.c"}, []string{"", ".", "a..b", "a/b"}},
		{"*", []string{"a", "Z_-9"}, []string{"a.b"}},
		{"*.*", []string{"a.b"}, []string{"a", "a.b.c"}},
		{"**.b", []string{"b", "a.b", "a.c.b"}, []string{"a", "b.a"}},
		{"**.**", []string{"a", "a.b"}, nil},
		{"*.**", []string{"a", "a.b.c"}, nil},
		{"order.created", []string{"order.created"}, []string{"order.Created", "order.created.x", "order"}},
		{"a.*.**.c", []string{"a.b.c", "a.b.x.y.c"}, []string{"a.c", "a.b"}},
	}
	for _, tt := range tests {
		p, err := ParsePattern(tt.pattern)
		if err != nil {
			t.Fatalf("ParsePattern(%q): %v", tt.pattern, err)
		}
		if p.String() != tt.pattern {
			t.Errorf("String() = %q, want %q", p.String(), tt.pattern)
		}
		for _, s := range tt.match {
			if !p.Match(s) {
				t.Errorf("%q should match %q", tt.pattern, s)
			}
		}
		for _, s := range tt.noMatch {
			if p.Match(s) {
				t.Errorf("%q should not match %q", tt.pattern, s)
			}
		}
	}
	if (Pattern{}).Match("a") {
		t.Error("zero Pattern matches")
	}
}

func TestParsePatternErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "empty"},
		{"a*", "whole segment"},
		{"*a", "whole segment"},
		{"***", "whole segment"},
		{"a.**b", "whole segment"},
		{"..", "leading"},
		{"a..b", "'..'"},
		{".a", "leading"},
		{"a.", "trailing"},
		{"a/b", "byte 1"},
		{"a b", "byte 1"},
		{"a\x00", "byte 1"},
		{"ä", "byte 0"},
		{strings.Repeat("a", 250), "at most 249"},
	}
	for _, tt := range tests {
		_, err := ParsePattern(tt.in)
		if err == nil {
			t.Errorf("ParsePattern(%q) succeeded", tt.in)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "invalid topic pattern") {
			t.Errorf("ParsePattern(%q) = %v, want it to mention %q", tt.in, err, tt.want)
		}
	}
	if _, err := ParsePattern(strings.Repeat("a", 249)); err != nil {
		t.Errorf("249 bytes: %v", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("MustPattern(\"a*\") did not panic")
			}
		}()
		MustPattern("a*")
	}()
}

func TestPatternMatchIsNotExponential(t *testing.T) {
	// 60 "**" against 120 segments that never match: backtracking would
	// never finish; the DP does 60*120 steps.
	p := MustPattern(strings.Repeat("**.", 60) + "z")
	topic := strings.TrimSuffix(strings.Repeat("a.", 120), ".")
	if p.Match(topic) {
		t.Fatal("matched")
	}
}

// refMatch is the reference matcher: the pattern translated to an RE2
// regexp over "." + topic.
func refMatch(pattern, topic string) bool {
	var b strings.Builder
	b.WriteString(`^`)
	for _, s := range strings.Split(pattern, ".") {
		switch s {
		case "**":
			b.WriteString(`(?:\.[A-Za-z0-9_-]+)*`)
		case "*":
			b.WriteString(`\.[A-Za-z0-9_-]+`)
		default:
			b.WriteString(`\.` + regexp.QuoteMeta(s))
		}
	}
	b.WriteString(`$`)
	return len(topic) <= contract.MaxTopicBytes && regexp.MustCompile(b.String()).MatchString("."+topic)
}

func FuzzPatternMatch(f *testing.F) {
	for _, s := range [][2]string{
		{"news.**", "news"}, {"news.**", "news.world.europe"}, {"order.*", "order.new"}, {"order.*", "order"},
		{"a.**.b", "a.b"}, {"a.**.b", "a.x.y.b"}, {"**", "a..b"}, {"*.**.*", "a.b"}, {"**.a.**", "b.a.c.a"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, topic string) {
		p, err := ParsePattern(pattern)
		if err != nil {
			return
		}
		if got, want := p.Match(topic), refMatch(pattern, topic); got != want {
			t.Fatalf("Match(%q, %q) = %v, reference %v", pattern, topic, got, want)
		}
		// A topic built from the pattern (each * → "x", each ** → nothing
		// or "y.z") must agree too, so that matches are exercised.
		for _, anyRepl := range []string{"", "y.z"} {
			var segs []string
			for _, s := range strings.Split(pattern, ".") {
				switch s {
				case "*":
					segs = append(segs, "x")
				case "**":
					if anyRepl != "" {
						segs = append(segs, anyRepl)
					}
				default:
					segs = append(segs, s)
				}
			}
			built := strings.Join(segs, ".")
			if got, want := p.Match(built), refMatch(pattern, built); got != want {
				t.Fatalf("Match(%q, %q) = %v, reference %v", pattern, built, got, want)
			}
		}
	})
}

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"a", "a.*", "**", "a*", "..", "", ".", "a.**.b", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePattern(s)
		if err != nil {
			if p.String() != "" {
				t.Fatalf("error with a non-zero pattern %q", p.String())
			}
			return
		}
		if p.String() != s {
			t.Fatalf("String() = %q, want %q", p.String(), s)
		}
		// Valid patterns without wildcards are valid topics, and match themselves.
		if !strings.Contains(s, "*") {
			if err := contract.ValidateTopic(s); err != nil {
				t.Fatalf("literal pattern %q is not a valid topic: %v", s, err)
			}
			if !p.Match(s) {
				t.Fatalf("%q does not match itself", s)
			}
		}
	})
}
