package contract

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// maxDepth bounds JSON nesting in a request (encoding/json allows 10000);
// deeper input is refused with 400 before any allocation grows with it.
const maxDepth = 512

// jsonError is a syntax error at a byte offset of the request body.
type jsonError struct {
	off int
	msg string
}

func (e *jsonError) Error() string { return fmt.Sprintf("invalid JSON at byte %d: %s", e.off, e.msg) }

// scanner validates JSON in one pass: grammar (RFC 8259), UTF-8 inside
// strings, and nesting depth. It never allocates. It is the publish path's
// only full pass over the body: the top level is walked here and only the
// small fields (topic, id, headers) are decoded further.
type scanner struct {
	b      []byte
	i      int
	depth  int
	wsSeen int // bytes of whitespace skipped so far (outside strings)
	// lenient reads as encoding/json does: any bytes >= 0x80 inside strings
	// (invalid UTF-8 decodes as U+FFFD) and nesting up to 10000 levels. It
	// is for reading stored messages that another writer may have made;
	// requests are checked strictly.
	lenient bool
}

func (s *scanner) fail(format string, args ...any) error {
	return &jsonError{off: s.i, msg: fmt.Sprintf(format, args...)}
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
			s.wsSeen++
		default:
			return
		}
	}
}

// value validates one JSON value starting at s.i (after whitespace).
func (s *scanner) value() error {
	s.ws()
	if s.i >= len(s.b) {
		return s.fail("unexpected end of input")
	}
	switch c := s.b[s.i]; {
	case c == '{':
		return s.object(nil)
	case c == '[':
		return s.array()
	case c == '"':
		_, err := s.str()
		return err
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	default:
		return s.fail("unexpected character %q", c)
	}
}

func (s *scanner) lit(l string) error {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return s.fail("invalid literal (want %s)", l)
	}
	s.i += len(l)
	return nil
}

func (s *scanner) push() error {
	s.depth++
	if s.depth > maxDepth && (!s.lenient || s.depth > 10000) {
		return s.fail("nested deeper than %d levels", maxDepth)
	}
	return nil
}

// object validates an object; for each member it calls member (when not
// nil) with the key span (without quotes; escaped tells whether it holds
// escapes), the value span, and whether the value holds whitespace outside
// its strings.
func (s *scanner) object(member func(key []byte, escaped bool, val []byte, ws bool)) error {
	if err := s.push(); err != nil {
		return err
	}
	s.i++ // '{'
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return s.fail("expected a string key")
		}
		ks := s.i
		escaped, err := s.str()
		if err != nil {
			return err
		}
		key := s.b[ks+1 : s.i-1]
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return s.fail("expected ':' after object key")
		}
		s.i++
		s.ws()
		vs, ws0 := s.i, s.wsSeen
		if err := s.value(); err != nil {
			return err
		}
		if member != nil {
			member(key, escaped, s.b[vs:s.i], s.wsSeen != ws0)
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unexpected end of input in object")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail("expected ',' or '}' in object")
		}
	}
}

func (s *scanner) array() error {
	if err := s.push(); err != nil {
		return err
	}
	s.i++ // '['
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if err := s.value(); err != nil {
			return err
		}
		s.ws()
		if s.i >= len(s.b) {
			return s.fail("unexpected end of input in array")
		}
		switch s.b[s.i] {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.fail("expected ',' or ']' in array")
		}
	}
}

// str validates a string starting at the opening quote and leaves s.i after
// the closing quote. escaped reports whether it contains a backslash.
func (s *scanner) str() (escaped bool, err error) {
	s.i++ // opening quote
	for s.i < len(s.b) {
		// The common run first: printable ASCII that is neither a quote
		// nor a backslash needs no other check (a table lookup per byte
		// instead of the switch: the payload's long strings dominate).
		for s.i < len(s.b) && plainStringByte[s.b[s.i]] {
			s.i++
		}
		if s.i == len(s.b) {
			break
		}
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return escaped, nil
		case c == '\\':
			escaped = true
			if s.i+1 >= len(s.b) {
				return escaped, s.fail("unexpected end of input in string escape")
			}
			switch s.b[s.i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i += 2
			case 'u':
				if len(s.b)-s.i < 6 || !isHex(s.b[s.i+2]) || !isHex(s.b[s.i+3]) || !isHex(s.b[s.i+4]) || !isHex(s.b[s.i+5]) {
					return escaped, s.fail("invalid \\u escape")
				}
				s.i += 6
			default:
				return escaped, s.fail("invalid escape \\%c", s.b[s.i+1])
			}
		case c < 0x20:
			return escaped, s.fail("control character 0x%02x in string", c)
		case c < utf8.RuneSelf || s.lenient:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && n <= 1 {
				return escaped, s.fail("invalid UTF-8 in string")
			}
			s.i += n
		}
	}
	return escaped, s.fail("unexpected end of input in string")
}

// plainStringByte[c]: c may stand in a JSON string as itself with no
// further check: 0x20..0x7e except '"' and '\\'.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func (s *scanner) digits() int {
	n := 0
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
		n++
	}
	return n
}

func (s *scanner) number() error {
	start := s.i
	if s.b[s.i] == '-' {
		s.i++
	}
	intDigits := 0
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	default:
		if intDigits = s.digits(); intDigits == 0 {
			return s.fail("invalid number")
		}
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return s.fail("invalid number: digits expected after '.'")
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return s.fail("invalid number: digits expected in exponent")
		}
		return s.inRange(start)
	}
	if intDigits > 308 {
		return s.inRange(start)
	}
	return nil
}

// inRange refuses the number b[start:s.i] when it is beyond a 64-bit
// float's range (about ±1.8e308): most JSON readers, Go's encoding/json
// and the generated clients among them, cannot decode it, so one stored
// message would make every page and fetch that holds it unreadable
// (RFC 8259 section 6; I-JSON, RFC 7493, asks for this range). Checked
// only for a number with an exponent or over 308 digits.
func (s *scanner) inRange(start int) error {
	if s.lenient {
		return nil // a stored message is read as it is
	}
	if f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64); err != nil && math.IsInf(f, 0) {
		return s.fail("number %s is beyond the range of a 64-bit float (about ±1.8e308), which most JSON readers cannot decode", truncateRunes(string(s.b[start:s.i]), 32))
	}
	return nil
}

// validJSON reports whether b is exactly one valid JSON value (surrounding
// whitespace allowed) with valid UTF-8 in its strings.
func validJSON(b []byte) error {
	s := scanner{b: b}
	if err := s.value(); err != nil {
		return err
	}
	s.ws()
	if s.i != len(b) {
		return s.fail("data after the JSON value")
	}
	return nil
}

// memberName returns an object member's name from its key span (without
// quotes), unescaped when escaped says it holds escapes.
func memberName(key []byte, escaped bool) []byte {
	if escaped {
		var k string
		if json.Unmarshal(append(append([]byte{'"'}, key...), '"'), &k) == nil {
			return []byte(k)
		}
	}
	return key
}

// ValidStoredJSON reports whether b is exactly one JSON value as
// encoding/json's json.Valid judges it (any bytes >= 0x80 inside strings,
// up to 10000 levels): the check for stored messages, which another writer
// may have made, before they are sent on.
func ValidStoredJSON(b []byte) bool {
	s := scanner{b: b, lenient: true}
	if s.value() != nil {
		return false
	}
	s.ws()
	return s.i == len(b)
}

// ValidJSON reports whether b is exactly one valid JSON value (surrounding
// whitespace allowed) with valid UTF-8 in its strings and at most 512
// levels of nesting; the error says what is wrong and at which byte.
func ValidJSON(b []byte) error { return validJSON(b) }
