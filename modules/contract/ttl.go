package contract

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxTTL is the longest time to live a message may be published with:
// 87600h, ten years of 365 days. Longer is refused rather than capped, so
// that a typo ("87600000h") is an error, not a message kept for ever.
const MaxTTL = 87600 * time.Hour

// ExpiresAtMember is the stored message member that holds the time a
// message expires, "expiresAt":<Unix ms>, after the timestamp and before
// the headers; it is the timestamp plus the ttl the producer gave, and
// absent when the message was published without one (it never expires),
// so such a message is stored exactly as before ttls existed. Only the
// broker writes it: a publish request that sets it is refused. The Java
// mmmq clients ignore it. Wire format, do not change.
const ExpiresAtMember = "expiresAt"

// TTLMember is the publish request member that gives a message its time
// to live (the line protocol's PUBX attribute ttl= takes the same value).
const TTLMember = "ttl"

// TTLRule is the rule every ttl follows, as the error for an invalid one
// states it (followed by what that ttl breaks).
const TTLRule = `ttl: a duration such as "30s", "15m" or "1h30m" (units ms, s, m, h), at least 1ms and at most 87600h (10 years)`

// ParseTTL parses a message's time to live: a Go duration string
// (time.ParseDuration: "1500ms", "30s", "1h30m") of at least 1ms and at
// most MaxTTL. Sub-millisecond parts are dropped (expiresAt is in Unix
// milliseconds). The error is an *InputError (400 BAD_REQUEST) that
// states TTLRule and what s breaks.
func ParseTTL(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case s == "":
		return 0, BadRequest("%s; this one is empty (leave the ttl out, or send null, for a message that never expires)", TTLRule)
	case err != nil && durationOverflow(s):
		return 0, BadRequest("%s; %q is over 87600h", TTLRule, truncateRunes(s, 64))
	case err != nil:
		return 0, BadRequest("%s; %q is not a duration", TTLRule, truncateRunes(s, 64))
	case d < time.Millisecond:
		return 0, BadRequest("%s; %q is under 1ms", TTLRule, s)
	case d > MaxTTL:
		return 0, BadRequest("%s; %q is over 87600h", TTLRule, s)
	}
	return d.Truncate(time.Millisecond), nil
}

// parseTTL returns the ttl of a publish request's "ttl" member, raw as the
// scanner found it (nil when absent): 0 for an absent or null ttl, else
// the string, which must pass ParseTTL. Any other JSON value is an error
// stating TTLRule.
func parseTTL(raw []byte) (time.Duration, error) {
	if raw == nil || string(raw) == "null" {
		return 0, nil
	}
	if raw[0] != '"' {
		return 0, BadRequest("%s; this one is a JSON %s, not a string", TTLRule, jsonKind(raw[0]))
	}
	s, ok := storedString(raw)
	if !ok {
		return 0, BadRequest("%s; this one is not a valid JSON string", TTLRule) // unreachable: the scanner checked it
	}
	return ParseTTL(s)
}

// expiresAt is the expiresAt of a message taken at now with ttl (0: none).
func expiresAt(now time.Time, ttl time.Duration) int64 {
	if ttl <= 0 {
		return 0
	}
	return now.UnixMilli() + ttl.Milliseconds()
}

// Expired reports whether a message whose expiresAt member is expiresAt
// (Unix ms; 0 for none, as MessageMeta gives it) has expired at now: now is
// at or past it. Readers compare when they would hand the message out (a
// dispatcher before a push, a consumer group before a fetch returns it).
func Expired(expiresAt int64, now time.Time) bool {
	return expiresAt > 0 && now.UnixMilli() >= expiresAt
}

// parseExpiresAt reads a stored expiresAt member (raw JSON, nil when
// absent): a positive integer, else 0 (none: a log written by another
// tool may hold anything, and a message is never dropped for a member it
// cannot read).
func parseExpiresAt(raw []byte) int64 {
	if raw == nil {
		return 0
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil || n <= 0 {
		return 0
	}
	return n
}

// truncateRunes cuts s to at most n runes, marking a cut with "…".
func truncateRunes(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return fmt.Sprintf("%s…", string(r[:n]))
}

// durationOverflow reports whether s is written as a Go duration (numbers
// with units: "9999999h", "1.5h30m") that time.ParseDuration refused for
// its size (past about 2562047h), so that the error can say "too large"
// rather than "not a duration".
func durationOverflow(s string) bool {
	s = strings.TrimLeft(s, "+-")
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == 0 {
			return false
		}
		s = s[i:]
		j := 0
		for j < len(s) && !(s[j] >= '0' && s[j] <= '9' || s[j] == '.') {
			j++
		}
		switch s[:j] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[j:]
	}
	return true
}
