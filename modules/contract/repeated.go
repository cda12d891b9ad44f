package contract

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// FindRepeatedMember returns the first member name given twice in one
// object of the JSON text body, at any depth, dotted under the objects it
// is in ("commit.interval"; "[i]" for an array element), and ok true.
// encoding/json keeps the last of the two silently, so {"offset":0,
// "offset":3} would ack up to 3: request bodies refuse it. Names are
// compared exactly (a name that differs only in case is FindMemberCase's).
// A body that is not valid JSON is not an error here (ok false): the
// decoder reports it.
func FindRepeatedMember(body []byte) (path string, ok bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	path, ok, _ = repeatedIn(dec, "")
	return path, ok
}

// repeatedIn reads one JSON value from dec and looks for a repeated member
// in it; err ends the walk (not valid JSON).
func repeatedIn(dec *json.Decoder, at string) (path string, ok bool, err error) {
	tok, err := dec.Token()
	if err != nil {
		return "", false, err
	}
	switch tok {
	case json.Delim('{'):
		var seen map[string]bool
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return "", false, err
			}
			name, _ := k.(string)
			if seen == nil {
				seen = map[string]bool{}
			}
			if seen[name] {
				return at + name, true, nil
			}
			seen[name] = true
			if path, ok, err := repeatedIn(dec, at+name+"."); ok || err != nil {
				return path, ok, err
			}
		}
		_, err = dec.Token() // '}'
		return "", false, err
	case json.Delim('['):
		for i := 0; dec.More(); i++ {
			if path, ok, err := repeatedIn(dec, trimDot(at)+"["+strconv.Itoa(i)+"]."); ok || err != nil {
				return path, ok, err
			}
		}
		_, err = dec.Token() // ']'
		return "", false, err
	}
	return "", false, nil
}

func trimDot(s string) string {
	if n := len(s); n > 0 && s[n-1] == '.' {
		return s[:n-1]
	}
	return s
}

// objectMembers counts the members of the JSON object raw (valid JSON, as
// the publish decoder has already checked) without decoding it: the
// number of ':' outside strings at its first level. Publish compares it
// with the length of the decoded map to find a repeated header name
// without a second decode.
func objectMembers(raw []byte) int {
	n, depth, inStr := 0, 0, false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		switch {
		case inStr:
			if c == '\\' {
				i++
			} else if c == '"' {
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			n++
		}
	}
	return n
}

// RepeatedQuery refuses (400, naming it) the first of names given more
// than once in the query q: which value the client meant is not ours to
// guess (url.Values.Get would take the first).
func RepeatedQuery(q map[string][]string, names ...string) error {
	for _, n := range names {
		if c := len(q[n]); c > 1 {
			return BadRequest("query parameter %s is given %d times; give it once", n, c)
		}
	}
	return nil
}
