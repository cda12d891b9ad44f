package contract

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// PublishRequest is the body of POST /messages, for Go clients
// (the server itself scans the body without decoding it into this type):
//
//	{"topic": "order.created", "content": {...}, "headers": {"k": "v"}, "id": "...", "key": "...", "ttl": "30s"}
//
// topic may also be the object form {"name": "order.created"} of the Java
// mmmq clients. content is any JSON value and is required (null allowed).
// key is the message's ordering key (ValidateKey), absent or null for
// none. ttl is the message's time to live (ParseTTL), absent or null for
// one that never expires; the broker stores the time it expires as
// expiresAt (a request that sets expiresAt itself is refused).
type PublishRequest struct {
	Topic   json.RawMessage   `json:"topic"`
	Content json.RawMessage   `json:"content"`
	Headers map[string]string `json:"headers"`
	ID      *string           `json:"id"`
	Key     *string           `json:"key,omitempty"`
	TTL     *string           `json:"ttl,omitempty"`
}

// MaxIDBytes caps a producer message id, in bytes (the HTTP "id" field,
// the line protocol's PUBID).
const MaxIDBytes = 256

// Decoded is one validated publish request.
type Decoded struct {
	Topic string
	// ID is the producer's message id, or a generated one when the request
	// has none.
	ID string
	// FromProducer tells that ID is the producer's: only such ids are
	// deduplicated by the idempotent-publish window. The stored message
	// records it as "idFromProducer":true.
	FromProducer bool
	// Key is the message's ordering key, "" when it has none.
	Key string
	// TTL is the message's time to live, 0 when it has none; ExpiresAt
	// is the stored expiresAt (Unix ms: timestamp + TTL), 0 for none.
	TTL       time.Duration
	ExpiresAt int64
	// Scheduled tells that the request had "deliverAt" or "delay";
	// DeliverAt is then the due time in Unix ms, or 0 when it is not in
	// the future (an ordinary publish). Stored is the same either way.
	// ScheduledBy is which of the two it had, for the errors that name
	// it (CheckSchedule, Schedule).
	Scheduled   bool
	DeliverAt   int64
	ScheduledBy ScheduleBy
	// Stored is the stored message JSON.
	Stored []byte
}

// IDFromProducerMember is the stored message member that marks an id the
// producer supplied, "idFromProducer":true; it is absent when the broker
// generated the id. The Java mmmq clients ignore it, as they ignore id,
// timestamp and headers. Wire format, do not change.
const IDFromProducerMember = "idFromProducer"

// DecodeMessage validates one publish request given as raw JSON and returns
// its topic, its id, its key and the stored message JSON (Java mmmq shape
// plus our fields), appended to dst[:0]:
//
//	{"topic":{"name":"t"},"content":<as sent, compacted>,"id":"...","idFromProducer":true,"key":"...","timestamp":<unix ms>,"expiresAt":<unix ms>,"headers":{...}}
//
// The body is scanned once (grammar, UTF-8, depth); only the small fields
// (topic, id, key, ttl, headers) are decoded further. The id is the producer's
// (idFromProducer is then stored), or a generated one when the request has
// none. The key is stored only when the request has one (a string that
// passes ValidateKey; absent or null is none, any other value an error).
// A ttl (a string that passes ParseTTL; absent or null is none) is stored
// as expiresAt = timestamp + ttl; a request member "expiresAt" is refused
// (the broker computes it). A "deliverAt" or "delay" (ScheduleRule) sets
// Scheduled and DeliverAt; the caller hands such a message to a Scheduler.
// On error nothing is returned to store and the error is an *InputError
// (400 BAD_REQUEST) saying what was wrong. The headers' traceparent and
// tracestate are validated as ApplyTrace does (an invalid one is dropped
// and counted, never refused).
func DecodeMessage(raw []byte, now time.Time, dst []byte) (d Decoded, err error) {
	return DecodeMessageTrace(raw, now, dst, TraceContext{})
}

// DecodeMessageTrace is DecodeMessage with the trace context the request
// carries outside its body (TraceFromHTTP), merged into the message's
// headers by ApplyTrace before they are stored.
func DecodeMessageTrace(raw []byte, now time.Time, dst []byte, tc TraceContext) (d Decoded, err error) {
	var f fields
	sc := scanner{b: raw}
	sc.ws()
	if sc.i >= len(raw) || raw[sc.i] != '{' {
		if err := validJSON(raw); err != nil {
			return d, BadRequest("body is not valid JSON: %v", err)
		}
		return d, BadRequest(`body must be a JSON object {"topic": ..., "content": ...}`)
	}
	var twice string    // a member given more than once (the first such)
	var misnamed string // an unknown member spelled like a known one (the first such)
	if err := sc.object(func(key []byte, escaped bool, val []byte, ws bool) {
		var dst *[]byte
		switch string(memberName(key, escaped)) {
		case "topic":
			dst = &f.topic
		case "content":
			dst, f.contentWS = &f.content, ws
		case "headers":
			dst = &f.headers
		case "id":
			dst = &f.id
		case KeyMember:
			dst = &f.key
		case TTLMember:
			dst = &f.ttl
		case ExpiresAtMember:
			dst = &f.expiresAt
		case DeliverAtMember:
			dst = &f.deliverAt
		case DelayMember:
			dst = &f.delay
		default:
			if misnamed == "" && looksLikeMember(key) {
				misnamed = string(memberName(key, escaped))
			}
			return
		}
		if *dst != nil && twice == "" {
			twice = string(memberName(key, escaped))
		}
		*dst = val
	}); err != nil {
		return d, BadRequest("body is not valid JSON: %v", err)
	}
	if twice != "" {
		// encoding/json would take the last one and a proxy that checks
		// the first would see another topic: refuse the ambiguity.
		return d, BadRequest(`field %q is given more than once`, twice)
	}
	if misnamed != "" {
		// Unknown members are ignored, so "Delay" or "deliver_at" would
		// publish at once what was meant for later: refuse the near miss.
		return d, BadRequest(`field %q is not a member of a message; did you mean %q? (member names must match exactly; an unknown member is ignored, so this one would have no effect)`, misnamed, knownMember(misnamed))
	}
	sc.ws()
	if sc.i != len(raw) {
		return d, BadRequest("body is not valid JSON: %v", sc.fail("data after the JSON object"))
	}
	if d.Topic, err = parseTopic(f.topic); err != nil {
		return d, err
	}
	if f.id != nil && string(f.id) != "null" { // null: absent, as for the other optional members
		if err := json.Unmarshal(f.id, &d.ID); err != nil || f.id[0] != '"' {
			return d, BadRequest(`field "id" must be a string`)
		}
		if loneSurrogate(f.id) {
			// encoding/json would turn it into U+FFFD, so two different
			// ids would become one (and be deduplicated as one).
			return d, BadRequest(`field "id" has an escaped lone UTF-16 surrogate (\ud800-\udfff without its pair); ids must be valid Unicode`)
		}
		if d.ID == "" || len(d.ID) > MaxIDBytes {
			return d, BadRequest(`field "id" must be 1-%d bytes when given`, MaxIDBytes)
		}
	}
	if d.Key, err = parseKey(f.key); err != nil {
		return d, err
	}
	if f.expiresAt != nil {
		return d, BadRequest(`field %q is set by the broker (publish time + ttl); send "ttl" (%s) instead`, ExpiresAtMember, TTLRule)
	}
	if d.TTL, err = parseTTL(f.ttl); err != nil {
		return d, err
	}
	d.ExpiresAt = expiresAt(now, d.TTL)
	if d.DeliverAt, d.ScheduledBy, err = parseSchedule(f.deliverAt, f.delay, now, HTTPSchedule); err != nil {
		return d, err
	}
	d.Scheduled = d.ScheduledBy.Name != ""
	var headers map[string]string
	if f.headers != nil && string(f.headers) != "null" {
		if f.headers[0] != '{' || json.Unmarshal(f.headers, &headers) != nil {
			return d, BadRequest(`field "headers" must be an object of strings {"k": "v"}`)
		}
		if objectMembers(f.headers) != len(headers) {
			p, _ := FindRepeatedMember(f.headers)
			return d, BadRequest(`field "headers": the header %q is given more than once`, p)
		}
	}
	if headers != nil || tc.Given() {
		headers = ApplyTrace(headers, tc)
	}
	if f.content == nil {
		return d, BadRequest(`field "content" is required (use null for a message without content)`)
	}
	d.FromProducer = d.ID != ""
	if !d.FromProducer {
		d.ID = newID()
	}
	if tc.Root != nil && headers[TraceparentHeader] == "" {
		if tp := tc.Root(d.Topic, d.ID, now.UnixMilli()); tp != "" {
			if headers == nil {
				headers = make(map[string]string, 1)
			}
			delete(headers, TracestateHeader) // none without a traceparent (ApplyTrace)
			headers[TraceparentHeader] = tp
		}
	}
	d.Stored = encodeStored(dst, d.Topic, f.content, f.contentWS, d.ID, d.FromProducer, d.Key, d.ExpiresAt, headers, now)
	return d, nil
}

// fields are the spans of a publish request's top-level members.
type fields struct {
	topic, content, headers, id, key, ttl, expiresAt, deliverAt, delay []byte
	contentWS                                                          bool // content has whitespace outside strings
}

// EncodeMessage returns the stored message JSON for topic and
// content, exactly as POST /messages stores it, so that every producer path
// (HTTP, the TCP line protocol) stores the same shape and dispatchers and
// consumer groups deliver it unchanged:
//
//	{"topic":{"name":"t"},"content":<content, compacted>,"id":"...","timestamp":<unix ms>,"headers":{...}}
//
// id "" generates a process-unique id; any other id is the producer's
// (stored with "idFromProducer":true, deduplicated); headers may be nil
// (a traceparent or tracestate in them that ApplyTrace finds invalid is
// deleted from the map and counted, not stored); now gives the
// timestamp (Unix milliseconds). The message has no ordering key
// (EncodeKeyedMessage gives it one). content must be valid UTF-8 JSON (any
// value, null allowed); topic must pass ValidateTopic. An invalid
// argument returns an error meant for the client (HTTP 400 / ERR BAD_REQUEST)
// and nothing else; the size limit is checked by the storage engine on
// append (ErrRecordTooLarge). The stored JSON never contains a raw
// newline (content is compacted), so it can be framed by lines.
func EncodeMessage(topic string, content json.RawMessage, id string, headers map[string]string, now time.Time) ([]byte, error) {
	return AppendKeyedMessage(nil, topic, content, id, "", headers, now)
}

// EncodeKeyedMessage is EncodeMessage with the message's ordering key:
// stored as "key" when not "" (it must then pass ValidateKey, or the
// error is ValidateKey's), left out when "" (no key, the bytes
// EncodeMessage gives):
//
//	{"topic":{"name":"t"},"content":<content, compacted>,"id":"...","key":"...","timestamp":<unix ms>,"headers":{...}}
func EncodeKeyedMessage(topic string, content json.RawMessage, id, key string, headers map[string]string, now time.Time) ([]byte, error) {
	return AppendKeyedMessage(nil, topic, content, id, key, headers, now)
}

// AppendMessage is EncodeMessage writing the stored message JSON over
// dst[:0], reusing its memory (a producer path that encodes one message
// after another, the line protocol's PUB), and returning it; the errors
// are EncodeMessage's. A generated id is written in place, without a
// string of its own.
func AppendMessage(dst []byte, topic string, content json.RawMessage, id string, headers map[string]string, now time.Time) ([]byte, error) {
	return AppendKeyedMessage(dst, topic, content, id, "", headers, now)
}

// AppendKeyedMessage is AppendMessage with the message's ordering key, as
// EncodeKeyedMessage takes it.
func AppendKeyedMessage(dst []byte, topic string, content json.RawMessage, id, key string, headers map[string]string, now time.Time) ([]byte, error) {
	return AppendTTLMessage(dst, topic, content, id, key, 0, headers, now)
}

// AppendTTLMessage is AppendKeyedMessage with the message's time to live:
// ttl 0 is none (no "expiresAt", the bytes AppendKeyedMessage gives);
// any other ttl must be within ParseTTL's bounds (1ms to MaxTTL, or the
// error states TTLRule) and is stored as "expiresAt" = now + ttl, in Unix
// milliseconds:
//
//	{"topic":{"name":"t"},"content":<content, compacted>,"id":"...","key":"...","timestamp":<unix ms>,"expiresAt":<unix ms>,"headers":{...}}
func AppendTTLMessage(dst []byte, topic string, content json.RawMessage, id, key string, ttl time.Duration, headers map[string]string, now time.Time) ([]byte, error) {
	if content == nil {
		return nil, BadRequest(`field "content" is required (use null for a message without content)`)
	}
	sc := scanner{b: content}
	if err := sc.value(); err != nil {
		return nil, BadRequest("content is not valid JSON: %v", err)
	}
	ws := sc.wsSeen > 0
	sc.ws()
	if sc.i != len(content) {
		return nil, BadRequest("content is not valid JSON: %v", sc.fail("data after the JSON value"))
	}
	if err := ValidateTopic(topic); err != nil {
		return nil, BadRequest("%s", err.Error())
	}
	if !utf8.ValidString(id) || len(id) > MaxIDBytes {
		return nil, BadRequest(`field "id" must be valid UTF-8 of at most %d bytes`, MaxIDBytes)
	}
	if key != "" {
		if err := ValidateKey(key); err != nil {
			return nil, err
		}
	}
	if ttl != 0 && (ttl < time.Millisecond || ttl > MaxTTL) {
		return nil, BadRequest("%s; this one is %v", TTLRule, ttl)
	}
	for k, v := range headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, BadRequest("headers are not valid UTF-8")
		}
	}
	headers = ApplyTrace(headers, TraceContext{})
	// id "" (not from the producer): encodeStored generates one.
	return encodeStored(dst, topic, content, ws || len(bytes.TrimSpace(content)) != len(content), id, id != "", key, expiresAt(now, ttl), headers, now), nil
}

// JSONDecodeText is a request body's decode error (encoding/json's) in
// words for an API answer: "unknown field", "not valid JSON at byte N",
// what a field must be; no Go type names. Callers prefix the body's name.
func JSONDecodeText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "the body is empty: send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the body ends inside its JSON value"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d (%s)", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.As(err, &te) && te.Field == "":
		return fmt.Sprintf("the body must be a JSON object, not a JSON %s", te.Value)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be a JSON %s, not a JSON %s", te.Field, JSONKindOf(te.Type.Kind()), te.Value)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

func jsonErrText(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d: %s", se.Offset, se.Error())
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %q must not be a JSON %s", te.Field, te.Value)
		}
		return fmt.Sprintf("expected a JSON object, got a JSON %s", te.Value)
	}
	return err.Error()
}

// encodeStored appends the stored message JSON to dst[:0]. content is valid
// JSON; compact says it has whitespace to remove; id "" of a message not
// from the producer is generated here (newID); key is valid, or "" for
// none (no "key" member); expires is the expiresAt member, 0 for none.
func encodeStored(dst []byte, topic string, content []byte, compact bool, id string, fromProducer bool, key string, expires int64, headers map[string]string, now time.Time) []byte {
	b := append(dst[:0], `{"topic":{"name":"`...)
	b = append(b, topic...) // validated: [A-Za-z0-9_.-] only, no escaping needed
	b = append(b, `"},"content":`...)
	if compact {
		b = appendCompact(b, content)
	} else {
		b = append(b, content...)
	}
	b = append(b, `,"id":`...)
	if id == "" && !fromProducer {
		b = append(appendNewID(append(b, '"')), '"') // hex digits and '-': nothing to escape
	} else {
		b = AppendJSONString(b, id)
	}
	if fromProducer {
		b = append(b, `,"`+IDFromProducerMember+`":true`...)
	}
	if key != "" {
		b = AppendJSONString(append(b, `,"`+KeyMember+`":`...), key)
	}
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	if expires > 0 {
		b = strconv.AppendInt(append(b, `,"`+ExpiresAtMember+`":`...), expires, 10)
	}
	if len(headers) > 0 {
		b = append(b, `,"headers":{`...)
		keys := make([]string, 0, len(headers))
		for k := range headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendJSONString(b, k)
			b = append(b, ':')
			b = AppendJSONString(b, headers[k])
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

func parseTopic(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	var name string
	switch {
	case len(raw) == 0:
		return "", BadRequest(`field "topic" is required`)
	case raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0:
		name = string(raw[1 : len(raw)-1]) // validated string without escapes
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &name); err != nil {
			return "", BadRequest(`field "topic": %s`, jsonErrText(err))
		}
	case raw[0] == '{':
		// Exactly one member, spelt "name" (encoding/json alone would take
		// "Name", and the last of two).
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil || len(obj) != 1 || obj["name"] == nil || objectMembers(raw) != 1 ||
			json.Unmarshal(obj["name"], &name) != nil {
			return "", BadRequest(`field "topic" as an object must be {"name": "<topic>"}, with that one member`)
		}
	default:
		return "", BadRequest(`field "topic" must be a string or {"name": "<topic>"}`)
	}
	if err := ValidateTopic(name); err != nil {
		return "", BadRequest("%s", err.Error())
	}
	return name, nil
}

// appendCompact appends raw JSON without insignificant whitespace; raw is
// already validated. Compact output keeps stored messages small.
func appendCompact(b []byte, raw []byte) []byte {
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return append(b, raw...) // unreachable: raw came from the decoder
	}
	return buf.Bytes()
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string (s is valid UTF-8).
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

var (
	idPrefix  = newIDPrefix()
	idCounter atomic.Uint64
)

func newIDPrefix() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return strconv.FormatInt(time.Now().UnixNano(), 16)
	}
	return hex.EncodeToString(b[:])
}

// newID returns a message id unique within this process and, with
// overwhelming probability, across restarts: a random per-process prefix and
// a counter.
func newID() string {
	var b [40]byte
	return string(appendNewID(b[:0]))
}

// appendNewID appends a new id (newID) to b.
func appendNewID(b []byte) []byte {
	b = append(append(b, idPrefix...), '-')
	return strconv.AppendUint(b, idCounter.Add(1), 16)
}

// SplitBatch returns the raw messages of a batch body: a JSON array of
// publish requests, or NDJSON (one request per line, blank lines skipped)
// when ndjson is set. Array elements are validated by the scanner; NDJSON
// lines are validated when each is decoded. More than max messages, an
// empty batch or a malformed array is an *InputError (400). The messages
// are sub-slices of body.
func SplitBatch(body []byte, ndjson bool, max int) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if ndjson {
		// Lines are sub-slices of body (no copy, no reused scanner buffer).
		for rest := body; len(rest) > 0; {
			line := rest
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				line, rest = rest[:i], rest[i+1:]
			} else {
				rest = nil
			}
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			if len(out) >= max {
				return nil, BadRequest("batch has more than %d messages", max)
			}
			out = append(out, json.RawMessage(line))
		}
		if len(out) == 0 {
			return nil, BadRequest("batch is empty")
		}
		return out, nil
	}
	// A JSON array: one scanner pass finds (and validates) every element;
	// each is decoded again by DecodeMessage, without reflection.
	sc := scanner{b: body}
	sc.ws()
	if sc.i >= len(body) || body[sc.i] != '[' {
		return nil, BadRequest("batch body must be a JSON array of messages (or NDJSON with Content-Type: application/x-ndjson)")
	}
	sc.i++
	sc.depth = 1
	sc.ws()
	if sc.i < len(body) && body[sc.i] == ']' {
		sc.i++
	} else {
		for {
			if len(out) >= max {
				return nil, BadRequest("batch has more than %d messages", max)
			}
			sc.ws()
			start := sc.i
			if err := sc.value(); err != nil {
				return nil, BadRequest("batch message %d: %v", len(out), err)
			}
			out = append(out, json.RawMessage(body[start:sc.i]))
			sc.ws()
			if sc.i < len(body) && body[sc.i] == ',' {
				sc.i++
				continue
			}
			if sc.i < len(body) && body[sc.i] == ']' {
				sc.i++
				break
			}
			return nil, BadRequest("batch body: %v", sc.fail("expected ',' or ']' after message %d", len(out)-1))
		}
	}
	sc.ws()
	if sc.i != len(body) {
		return nil, BadRequest("batch body has data after the closing ']'")
	}
	if len(out) == 0 {
		return nil, BadRequest("batch is empty")
	}
	return out, nil
}

// StoredMeta returns the members of a stored message JSON that the
// idempotent-publish window rebuilds itself from after a restart: its id,
// whether the producer supplied it ("idFromProducer":true) and its
// timestamp (Unix ms, 0 when absent). ok is false when stored is not a
// JSON object or its id is not a string.
func StoredMeta(stored []byte) (id string, fromProducer bool, timestamp int64, ok bool) {
	var idRaw, fpRaw, tsRaw []byte
	sc := scanner{b: stored, lenient: true}
	sc.ws()
	if sc.i >= len(stored) || stored[sc.i] != '{' {
		return "", false, 0, false
	}
	if sc.object(func(key []byte, escaped bool, val []byte, _ bool) {
		switch string(memberName(key, escaped)) {
		case "id":
			idRaw = val
		case IDFromProducerMember:
			fpRaw = val
		case "timestamp":
			tsRaw = val
		}
	}) != nil {
		return "", false, 0, false
	}
	if len(idRaw) == 0 || idRaw[0] != '"' || json.Unmarshal(idRaw, &id) != nil {
		return "", false, 0, false
	}
	timestamp, _ = strconv.ParseInt(string(tsRaw), 10, 64)
	return id, string(fpRaw) == "true", timestamp, true
}

// loneSurrogate reports whether the JSON string literal raw has a \uXXXX
// escape of a UTF-16 surrogate that is not a high surrogate followed by a
// low one.
func loneSurrogate(raw []byte) bool {
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 16)
		return rune(v), err == nil
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		r, ok := hex4(i)
		switch {
		case !ok:
			i++ // another escape: skip its second byte (it may be a backslash)
		case r >= 0xDC00 && r <= 0xDFFF:
			return true // a low surrogate first
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// publishMembers are the members DecodeMessageTrace reads.
var publishMembers = []string{"topic", "content", "headers", "id", KeyMember, TTLMember, ExpiresAtMember, DeliverAtMember, DelayMember}

// foldMember is name lower-cased without '-' and '_' ("Deliver_At" and
// "deliverAt" fold alike).
func foldMember(name []byte) string {
	out := make([]byte, 0, len(name))
	for _, c := range name {
		switch {
		case c == '-' || c == '_':
		case 'A' <= c && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, c)
		}
	}
	return string(out)
}

// looksLikeMember reports whether key (an unknown member's raw name) is a
// near miss of one of publishMembers (knownMember). Only unknown members
// are looked at, so an ordinary publish pays nothing.
func looksLikeMember(key []byte) bool {
	return knownMember(string(key)) != ""
}

// knownMember is the member of publishMembers that name is a near miss
// of, "" for none: the same once folded (foldMember: "Delay", "TTL",
// "deliver-at"), or, for an optional member of 5 letters or more
// (headers, deliverAt, delay, expiresAt), one typing slip away once
// folded (a letter added, dropped, changed or two neighbours swapped:
// "header", "dealy"). Shorter members (id, key, ttl) take only the folded
// form, and so do topic and content: they are required, so a misspelt one
// is refused as missing anyway, and a slip from them is often a member of
// its own ("context", "topics").
func knownMember(name string) string {
	if len(name) > 16 {
		return ""
	}
	f := foldMember([]byte(name))
	for _, m := range publishMembers {
		fm := foldMember([]byte(m))
		if fm == f || m != "topic" && m != "content" && len(fm) >= 5 && oneSlip(f, fm) {
			return m
		}
	}
	return ""
}

// oneSlip reports whether a and b differ by exactly one insertion,
// deletion, substitution or swap of two adjacent bytes.
func oneSlip(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	switch len(b) - len(a) {
	case 0:
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		if i == len(a) {
			return false // equal
		}
		if a[i+1:] == b[i+1:] {
			return true // one changed
		}
		return i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:] // two swapped
	case 1:
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		return a[i:] == b[i+1:] // one added to a
	}
	return false
}
