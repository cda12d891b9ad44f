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
	id, _ := MessageIDKey(body)
	return id
}

// MessageKey returns the top-level "key" string member of the stored
// message JSON body (the ordering key, KeyMember), or "" when there is
// none, it is not a string or not a valid key (ValidateKey: a log written
// by another tool may hold anything), or when body is not valid JSON. It
// reads body as MessageID does (the last "key" wins; one inside content
// or headers is never taken).
func MessageKey(body []byte) string {
	_, key := MessageIDKey(body)
	return key
}

// MessageIDKey returns MessageID(body) and MessageKey(body) from one pass
// over body.
func MessageIDKey(body []byte) (id, key string) {
	id, key, _ = MessageMeta(body)
	return id, key
}

// MessageMeta returns MessageID(body), MessageKey(body) and
// MessageExpiresAt(body) from one pass over body: what a dispatcher reads
// of every message it pushes.
func MessageMeta(body []byte) (id, key string, expiresAt int64) {
	sc := scanner{b: body, lenient: true}
	sc.ws()
	if sc.i >= len(body) || body[sc.i] != '{' {
		return "", "", 0
	}
	var idRaw, keyRaw, expRaw []byte // raw JSON strings (number) of the last top-level members, or nil
	err := sc.object(func(k []byte, escaped bool, val []byte, _ bool) {
		var dst *[]byte
		switch string(memberName(k, escaped)) {
		case "id":
			dst = &idRaw
		case KeyMember:
			dst = &keyRaw
		case ExpiresAtMember:
			expRaw = val
			return
		default:
			return
		}
		*dst = nil
		if val[0] == '"' {
			*dst = val
		}
	})
	if err != nil {
		return "", "", 0
	}
	expiresAt = parseExpiresAt(expRaw)
	if s, ok := storedString(idRaw); ok && len(s) <= MaxMessageIDBytes && ValidHeaderValue(s) {
		id = s
	}
	if s, ok := storedString(keyRaw); ok && keyProblem(s) == "" {
		key = s
	}
	return id, key, expiresAt
}

// MessageExpiresAt returns the top-level "expiresAt" member of the stored
// message JSON body (ExpiresAtMember, Unix ms), or 0 when there is none,
// it is not a positive integer or body is not valid JSON: such a message
// never expires. It reads body as MessageID does.
func MessageExpiresAt(body []byte) int64 {
	_, _, exp := MessageMeta(body)
	return exp
}

// storedString decodes raw, a JSON string literal of a stored message
// (nil: none), as encoding/json does.
func storedString(raw []byte) (string, bool) {
	if raw == nil {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
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
