package contract

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"unicode/utf8"
)

// MaxKeyBytes caps a message's ordering key, in bytes.
const MaxKeyBytes = 256

// KeyMember is the stored message member that holds the ordering key,
// "key":"<key>", after the id and before the timestamp; it is absent when
// the message has no key, so a message without one is stored exactly as
// before keys existed. The Java mmmq clients ignore it, as they ignore
// id, timestamp and headers. Wire format, do not change.
const KeyMember = "key"

// KeyRule is the rule every ordering key follows, as the error for an
// invalid one states it (followed by what that key breaks).
const KeyRule = "key: 1–256 bytes of UTF-8 without control characters or leading/trailing spaces"

// ValidateKey reports whether key may be a message's ordering key: 1 to
// MaxKeyBytes bytes of valid UTF-8, without control characters (Unicode
// category Cc: U+0000–U+001F, U+007F and U+0080–U+009F) and without a
// space (U+0020) at either end. Such a key is a valid HTTP header value
// that no receiver trims, so a push carries it unchanged in its mmmq-key
// header. "" is "no key" to every caller, and is not a key: the error
// says it is empty. The error is an *InputError (400 BAD_REQUEST) that
// states KeyRule and what key breaks.
func ValidateKey(key string) error {
	if why := keyProblem(key); why != "" {
		return BadRequest("%s; %s", KeyRule, why)
	}
	return nil
}

// keyProblem says what key breaks of KeyRule, "" when nothing. It
// allocates only for an invalid key.
func keyProblem(key string) string {
	switch {
	case key == "":
		return "this one is empty (leave the key out, or send null, for a message without one)"
	case len(key) > MaxKeyBytes:
		return fmt.Sprintf("this one is %d bytes", len(key))
	case key[0] == ' ':
		return "this one starts with a space"
	case key[len(key)-1] == ' ':
		return "this one ends with a space"
	}
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return fmt.Sprintf("this one has the control character %U at byte %d", rune(c), i)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(key[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			return fmt.Sprintf("this one is not valid UTF-8 at byte %d", i)
		case r >= 0x80 && r <= 0x9f:
			return fmt.Sprintf("this one has the control character %U at byte %d", r, i)
		}
		i += n
	}
	return ""
}

// parseKey returns the key of a publish request's "key" member, raw as
// the scanner found it (nil when absent): "" for an absent or null key,
// else the string, which must pass ValidateKey. Any other JSON value is
// an error stating KeyRule. A string without escapes is taken as it
// stands (the scanner checked its UTF-8); one with escapes is decoded by
// encoding/json, after a check for escaped lone surrogates, which
// encoding/json would turn into U+FFFD.
func parseKey(raw []byte) (string, error) {
	if raw == nil || string(raw) == "null" {
		return "", nil
	}
	if raw[0] != '"' {
		return "", BadRequest("%s; this one is a JSON %s, not a string", KeyRule, jsonKind(raw[0]))
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		key := string(raw[1 : len(raw)-1])
		return key, ValidateKey(key)
	}
	if loneSurrogate(raw) {
		return "", BadRequest(`%s; this one has an escaped lone UTF-16 surrogate (\ud800-\udfff without its pair)`, KeyRule)
	}
	var key string
	if err := json.Unmarshal(raw, &key); err != nil {
		return "", BadRequest("%s; %s", KeyRule, jsonErrText(err)) // unreachable: the scanner checked the string
	}
	return key, ValidateKey(key)
}

// jsonKind names the kind of the JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case '"':
		return "string"
	default:
		return "number"
	}
}

// JSONKindOf names the JSON type that decodes into a Go value of kind k
// ("string", "array", "object", "boolean", else "number"), for errors
// such as `field "offset" must be a JSON number`.
func JSONKindOf(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "string"
	case reflect.Slice, reflect.Array:
		return "array"
	case reflect.Struct, reflect.Pointer, reflect.Map:
		return "object"
	case reflect.Bool:
		return "boolean"
	}
	return "number"
}
