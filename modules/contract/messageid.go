package contract

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// MaxMessageIDBytes is the longest producer message id sent in the
// mmmq-message-id header; a longer id is left out (the header is omitted)
// rather than risk a consumer rejecting the headers forever.
const MaxMessageIDBytes = 1024

// MessageID returns the top-level "id" string member of the stored message
// JSON body ({"topic":{"name":"t"},"content":...,"id":"...",...}),
// or "" when there is none, it is not a string, it is longer than
// MaxMessageIDBytes or it holds bytes not allowed in an HTTP header value
// (control characters), or when body is not valid JSON (invalid UTF-8 is
// read as U+FFFD, as encoding/json reads it). As with
// encoding/json, the last "id" wins. It is one pass of the package's JSON
// scanner without allocation for the usual shape: nested values (content,
// headers) are validated and skipped, not decoded, so an "id" inside them is
// never taken.
func MessageID(body []byte) string {
	sc := scanner{b: body, lenient: true}
	sc.ws()
	if sc.i >= len(body) || body[sc.i] != '{' {
		return ""
	}
	var id []byte // raw JSON string of the last top-level "id", or nil
	err := sc.object(func(key []byte, escaped bool, val []byte, _ bool) {
		if string(memberName(key, escaped)) == "id" {
			id = nil
			if val[0] == '"' {
				id = val
			}
		}
	})
	if err != nil || id == nil {
		return ""
	}
	var s string
	if bytes.IndexByte(id, '\\') < 0 && utf8.Valid(id) {
		s = string(id[1 : len(id)-1])
	} else if err := json.Unmarshal(id, &s); err != nil {
		return ""
	}
	if len(s) > MaxMessageIDBytes || !ValidHeaderValue(s) {
		return ""
	}
	return s
}

// ValidHeaderValue reports whether v may be sent as an HTTP header value:
// no control bytes other than horizontal tab (RFC 9110 field-value; the rule
// net/http enforces before sending).
func ValidHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// MessageTimestamp returns the top-level "timestamp" member of a stored
// message JSON (Unix milliseconds) and true, or false when there is none,
// it is not an integer, or body is not valid JSON.
func MessageTimestamp(body []byte) (int64, bool) {
	sc := scanner{b: body, lenient: true}
	sc.ws()
	if sc.i >= len(body) || body[sc.i] != '{' {
		return 0, false
	}
	var raw []byte
	err := sc.object(func(key []byte, escaped bool, val []byte, _ bool) {
		if string(memberName(key, escaped)) == "timestamp" {
			raw = val
		}
	})
	if err != nil || raw == nil {
		return 0, false
	}
	ts, err := strconv.ParseInt(string(raw), 10, 64)
	return ts, err == nil
}
