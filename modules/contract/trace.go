package contract

import (
	"net/http"
	"strings"
	"sync/atomic"
)

// W3C Trace Context (the W3C recommendation "Trace Context", level 1):
// a message's trace context travels as two of its stored headers, under
// the names the recommendation gives its HTTP headers. Wire format, do not
// change.
const (
	// TraceparentHeader is the stored header (and HTTP header) that holds
	// a message's traceparent: version-traceid-parentid-flags.
	TraceparentHeader = "traceparent"
	// TracestateHeader is the stored header (and HTTP header) that holds
	// the vendors' state that goes with the traceparent.
	TracestateHeader = "tracestate"
)

// Limits of a tracestate (the recommendation's list rules): at most
// MaxTracestateMembers list members and MaxTracestateBytes bytes in all.
const (
	MaxTracestateMembers = 32
	MaxTracestateBytes   = 512
)

// TraceContext is the trace context a publish request carries outside its
// JSON body: the traceparent and tracestate HTTP headers of POST
// /messages and of the batch route (TraceFromHTTP), or the line
// protocol's PUBX attributes traceparent= and tracestate=. Has* tell that
// the value was given at all: a value given empty is given, and invalid.
type TraceContext struct {
	Parent, State       string
	HasParent, HasState bool
	// Fallback makes the context apply only to a message whose JSON
	// headers have no traceparent (a batch: each member's own wins over
	// the request's); without it the context replaces the JSON headers'
	// traceparent and tracestate (a single publish: the HTTP header wins).
	Fallback bool
	// Root, when set, is asked for the traceparent to store with a
	// message that is left without one (none given, or the one given was
	// dropped as invalid), from the message's topic, id and timestamp (Unix
	// ms, as stored): a tracer makes the publish span the start of the
	// message's trace (modules/tracing). "" stores none. Nil (tracing off)
	// stores only what the producer sent.
	Root func(topic, id string, timestamp int64) string
}

// Given reports whether tc carries a traceparent or a tracestate.
func (tc TraceContext) Given() bool { return tc.HasParent || tc.HasState }

// TraceFromHTTP returns the traceparent and tracestate headers of h
// (any case of the names). Several tracestate fields are joined with ","
// (one list, as HTTP combines repeated fields); several traceparent
// fields are joined likewise, which makes the value invalid (the
// recommendation: a request with more than one traceparent has none
// usable). It does not validate: ApplyTrace and the publish decoders do,
// dropping and counting what is invalid.
func TraceFromHTTP(h http.Header) TraceContext {
	var tc TraceContext
	if v, ok := h["Traceparent"]; ok {
		tc.Parent, tc.HasParent = strings.Join(v, ","), true
	}
	if v, ok := h["Tracestate"]; ok {
		tc.State, tc.HasState = strings.Join(v, ","), true
	}
	return tc
}

// traceDropped counts the trace values dropped at publish, process-wide
// (as the Prometheus default registry is): [0] traceparent, [1] tracestate.
var traceDropped [2]atomic.Uint64

// TraceDropped returns how many traceparent and tracestate values the
// publish paths dropped (not stored) since the process started: invalid
// ones, and tracestates without a valid traceparent. One count per
// message and value (a batch's invalid HTTP traceparent counts once for
// each member it would have applied to). The metrics plugin exports it as
// mmmq_trace_context_dropped_total{header}.
func TraceDropped() (traceparent, tracestate uint64) {
	return traceDropped[0].Load(), traceDropped[1].Load()
}

// ApplyTrace merges tc into a message's decoded JSON headers h (nil: none)
// and validates the result, returning the headers to store (h itself,
// changed, or a new map when h is nil and something is to be stored). A
// value that is not valid counts as not given (the recommendation: a
// receiver ignores a traceparent it cannot parse), so it never displaces
// a valid one:
//
//   - tc with a valid traceparent, without Fallback: its traceparent and
//     tracestate replace those of h (the request's HTTP headers win over
//     the JSON body's).
//   - tc with a valid traceparent and Fallback: it applies only when h
//     has no valid traceparent (a batch member's own wins; an invalid own
//     one is dropped and counted, and its tracestate with it).
//   - tc with an invalid traceparent: dropped and counted, and its
//     tracestate with it; h's pair stays. A tracestate given alone (no
//     traceparent) is dropped and counted; h's pair stays. Neither is
//     counted for a batch member with a valid traceparent of its own,
//     to which the request's values would not have applied.
//   - then a traceparent of h that is not valid W3C (ValidTraceparent) is
//     deleted and counted; a tracestate that is invalid
//     (ValidTracestate), or left without a valid traceparent, is deleted
//     and counted (TraceDropped).
//
// Nothing else is refused: the message is stored without what was
// dropped. h without either name and tc not given cost nothing.
func ApplyTrace(h map[string]string, tc TraceContext) map[string]string {
	if tc.Given() {
		own, hasOwn := h[TraceparentHeader]
		ownValid := hasOwn && ValidTraceparent(own)
		switch {
		case tc.Fallback && ownValid:
		case !tc.HasParent:
			traceDropped[1].Add(1) // a tracestate without its traceparent
		case !ValidTraceparent(tc.Parent):
			traceDropped[0].Add(1)
			if tc.HasState {
				traceDropped[1].Add(1)
			}
		default:
			if h == nil {
				h = make(map[string]string, 2)
			}
			if tc.Fallback && hasOwn { // invalid: dropped, with its tracestate
				traceDropped[0].Add(1)
				if _, ok := h[TracestateHeader]; ok {
					traceDropped[1].Add(1)
				}
			}
			delete(h, TracestateHeader)
			h[TraceparentHeader] = tc.Parent
			if tc.HasState {
				h[TracestateHeader] = tc.State
			}
		}
	}
	if h == nil {
		return nil
	}
	p, hasP := h[TraceparentHeader]
	s, hasS := h[TracestateHeader]
	if hasP && !ValidTraceparent(p) {
		delete(h, TraceparentHeader)
		traceDropped[0].Add(1)
		hasP = false
	}
	if hasS && (!hasP || !ValidTracestate(s)) {
		delete(h, TracestateHeader)
		traceDropped[1].Add(1)
	}
	return h
}

// ValidTraceparent reports whether v is a traceparent the recommendation's
// parsing rules accept:
//
//	version "-" trace-id "-" parent-id "-" trace-flags
//	2 hex      32 hex       16 hex        2 hex        (lower-case hex only)
//
// version ff is invalid; trace-id and parent-id must not be all zeros.
// Version 00 is exactly those 55 characters. A higher version is read by
// the version 00 rules on its first 55 characters and may go on only
// after a "-" (fields a later version adds, kept as they are).
func ValidTraceparent(v string) bool {
	if len(v) < 55 || !lowerHex(v[0:2]) || v[0:2] == "ff" {
		return false
	}
	if v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	trace, parent, flags := v[3:35], v[36:52], v[53:55]
	if !lowerHex(trace) || !lowerHex(parent) || !lowerHex(flags) || allZero(trace) || allZero(parent) {
		return false
	}
	if v[0:2] == "00" {
		return len(v) == 55
	}
	return len(v) == 55 || v[55] == '-'
}

// ValidTracestate reports whether v is a tracestate the recommendation
// accepts: at most MaxTracestateBytes bytes, a comma-separated list of at
// most MaxTracestateMembers members (empty members and spaces or tabs
// around members allowed), each key "=" value with keys unique:
//
//	key   = lcalpha 0*255(lcalpha / DIGIT / "_" / "-" / "*" / "/")
//	      / (lcalpha / DIGIT) 0*240(same) "@" lcalpha 0*13(same)
//	value = 0*255(chr) nblk-chr     ; nblk-chr: 0x21-0x7E but "," and "="; chr: nblk-chr or space
func ValidTracestate(v string) bool {
	if len(v) > MaxTracestateBytes {
		return false
	}
	n := 0
	var seen []string
	for m := range strings.SplitSeq(v, ",") {
		m = strings.Trim(m, " \t")
		if m == "" {
			continue
		}
		if n++; n > MaxTracestateMembers {
			return false
		}
		k, val, ok := strings.Cut(m, "=")
		if !ok || !tracestateKey(k) || !tracestateValue(val) {
			return false
		}
		for _, s := range seen {
			if s == k {
				return false
			}
		}
		seen = append(seen, k)
	}
	return true
}

func tracestateKey(k string) bool {
	tenant, system, multi := strings.Cut(k, "@")
	if !multi {
		return len(k) <= 256 && k != "" && lcalpha(k[0]) && keyChars(k[1:])
	}
	return len(tenant) >= 1 && len(tenant) <= 241 && (lcalpha(tenant[0]) || digit(tenant[0])) && keyChars(tenant[1:]) &&
		len(system) >= 1 && len(system) <= 14 && lcalpha(system[0]) && keyChars(system[1:])
}

func keyChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !lcalpha(c) && !digit(c) && c != '_' && c != '-' && c != '*' && c != '/' {
			return false
		}
	}
	return true
}

func tracestateValue(v string) bool {
	if v == "" || len(v) > 256 || v[len(v)-1] == ' ' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != ' ' && (c < 0x21 || c > 0x7e || c == ',' || c == '=') {
			return false
		}
	}
	return true
}

func lcalpha(c byte) bool { return c >= 'a' && c <= 'z' }
func digit(c byte) bool   { return c >= '0' && c <= '9' }

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !digit(c) && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }

// MessageTrace returns the traceparent and tracestate stored in the
// top-level "headers" member of the stored message JSON body, as they
// were published (decoded from their JSON strings), or "" for each that is
// absent, not a string, or not valid (ValidTraceparent, ValidTracestate;
// a tracestate needs a valid traceparent): a log written by another tool
// may hold anything, and a push never sends what the publish paths would
// have dropped. It reads body as MessageID does (the last "headers"
// wins; one inside content is never taken).
func MessageTrace(body []byte) (traceparent, tracestate string) {
	sc := scanner{b: body, lenient: true}
	sc.ws()
	if sc.i >= len(body) || body[sc.i] != '{' {
		return "", ""
	}
	var headers []byte
	if err := sc.object(func(k []byte, escaped bool, val []byte, _ bool) {
		if string(memberName(k, escaped)) == "headers" {
			headers = val
		}
	}); err != nil || len(headers) == 0 || headers[0] != '{' {
		return "", ""
	}
	var pRaw, sRaw []byte
	hs := scanner{b: headers, lenient: true}
	if err := hs.object(func(k []byte, escaped bool, val []byte, _ bool) {
		switch string(memberName(k, escaped)) {
		case TraceparentHeader:
			pRaw = val
		case TracestateHeader:
			sRaw = val
		}
	}); err != nil {
		return "", ""
	}
	if len(pRaw) == 0 || pRaw[0] != '"' {
		return "", ""
	}
	p, ok := storedString(pRaw)
	if !ok || !ValidTraceparent(p) {
		return "", ""
	}
	if len(sRaw) == 0 || sRaw[0] != '"' {
		return p, ""
	}
	if s, ok := storedString(sRaw); ok && ValidTracestate(s) {
		tracestate = s
	}
	return p, tracestate
}
