package dispatcher

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// MaxMessageIDBytes is the longest producer message id sent in the
// mmmq-message-id header; a longer id is left out (the header is omitted)
// rather than risk a consumer rejecting the headers forever.
const MaxMessageIDBytes = 1024

// MessageID returns the top-level "id" string member of the stored message
// JSON body ({"topic":{"name":"t"},"content":...,"id":"...",...}, DESIGN §2),
// or "" when there is none, it is not a string, it is longer than
// MaxMessageIDBytes or it holds bytes not allowed in an HTTP header value
// (control characters). As with encoding/json, the last "id" wins. It is a
// single pass over the bytes without allocation for the usual shape: nested
// values (content, headers) are skipped, not decoded, so an "id" inside them
// is never taken.
func MessageID(body []byte) string {
	i := skipWS(body, 0)
	if i >= len(body) || body[i] != '{' {
		return ""
	}
	i = skipWS(body, i+1)
	if i < len(body) && body[i] == '}' {
		return ""
	}
	var id []byte // raw JSON string of the last top-level "id", or nil
	for {
		if i >= len(body) || body[i] != '"' {
			return ""
		}
		kEnd, ok := skipString(body, i)
		if !ok {
			return ""
		}
		key := body[i:kEnd]
		i = skipWS(body, kEnd)
		if i >= len(body) || body[i] != ':' {
			return ""
		}
		i = skipWS(body, i+1)
		vEnd, ok := skipValue(body, i)
		if !ok {
			return ""
		}
		if keyIsID(key) {
			id = nil
			if body[i] == '"' {
				id = body[i:vEnd]
			}
		}
		i = skipWS(body, vEnd)
		if i < len(body) && body[i] == ',' {
			i = skipWS(body, i+1)
			continue
		}
		if i < len(body) && body[i] == '}' {
			break
		}
		return ""
	}
	if id == nil {
		return ""
	}
	var s string
	if bytes.IndexByte(id, '\\') < 0 && utf8.Valid(id) {
		s = string(id[1 : len(id)-1])
	} else if err := json.Unmarshal(id, &s); err != nil {
		return ""
	}
	if len(s) > MaxMessageIDBytes || !validHeaderValue(s) {
		return ""
	}
	return s
}

func keyIsID(key []byte) bool {
	if bytes.Equal(key, []byte(`"id"`)) {
		return true
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return false
	}
	var k string
	return json.Unmarshal(key, &k) == nil && k == "id"
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the JSON string starting at b[i] == '"'.
func skipString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the JSON value starting at b[i]. It
// checks bracket nesting and string ends, not the full grammar.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, true
				}
			}
		}
		return 0, false
	case ',', '}', ']', ':':
		return 0, false
	}
	start := i
	for i < len(b) {
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i, i > start
		}
		i++
	}
	return i, true
}

// validHeaderValue reports whether v may be sent as an HTTP header value:
// no control bytes other than horizontal tab (RFC 9110 field-value; the rule
// net/http enforces before sending).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
