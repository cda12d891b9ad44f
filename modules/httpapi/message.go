package httpapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/mmmq/mmmq/modules/topicqueue"
)

// PublishRequest is the body of POST /messages (DESIGN §2):
//
//	{"topic": "order.created", "content": {...}, "headers": {"k": "v"}, "id": "..."}
//
// topic may also be the object form {"name": "order.created"} of the Java
// mmmq clients. content is any JSON value and is required (null allowed).
type PublishRequest struct {
	Topic   json.RawMessage   `json:"topic"`
	Content json.RawMessage   `json:"content"`
	Headers map[string]string `json:"headers"`
	ID      *string           `json:"id"`
}

// maxIDBytes caps a producer message id.
const maxIDBytes = 256

// inputError is a client error: HTTP 400 (or 413) with a message for the
// client.
type inputError struct {
	status int
	msg    string
}

func (e *inputError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &inputError{status: 400, msg: fmt.Sprintf(format, args...)}
}

// decodeMessage validates one publish request given as raw JSON and returns
// its topic and the stored message JSON (Java mmmq shape plus our fields):
//
//	{"topic":{"name":"t"},"content":<as sent>,"id":"...","timestamp":<unix ms>,"headers":{...}}
//
// Nothing is stored on error; the error is an *inputError.
func decodeMessage(raw []byte, now time.Time, dst []byte) (topic string, stored []byte, err error) {
	if !utf8.Valid(raw) {
		return "", nil, badRequest("body is not valid UTF-8")
	}
	var req PublishRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return "", nil, badRequest("body is not a valid publish request: %s", jsonErrText(err))
	}
	return req.encode(now, dst)
}

// EncodeMessage returns the stored message JSON (DESIGN §2) for topic and
// content, exactly as POST /messages stores it, so that every producer path
// (HTTP, the TCP line protocol) stores the same shape and dispatchers and
// consumer groups deliver it unchanged:
//
//	{"topic":{"name":"t"},"content":<content, compacted>,"id":"...","timestamp":<unix ms>,"headers":{...}}
//
// id "" generates a process-unique id; headers may be nil; now gives the
// timestamp (Unix milliseconds). content must be valid UTF-8 JSON (any
// value, null allowed); topic must pass topicqueue.ValidateName. An invalid
// argument returns an error meant for the client (HTTP 400 / ERR BAD_REQUEST)
// and nothing else; the size limit is checked by the storage engine on
// append (storage.ErrRecordTooLarge).
func EncodeMessage(topic string, content json.RawMessage, id string, headers map[string]string, now time.Time) ([]byte, error) {
	if content == nil {
		return nil, badRequest(`field "content" is required (use null for a message without content)`)
	}
	if !utf8.Valid(content) || !json.Valid(content) {
		return nil, badRequest("content is not valid JSON")
	}
	if !utf8.ValidString(id) {
		return nil, badRequest(`field "id" is not valid UTF-8`)
	}
	for k, v := range headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, badRequest("headers are not valid UTF-8")
		}
	}
	rawTopic, err := json.Marshal(topic)
	if err != nil {
		return nil, badRequest("topic: %v", err)
	}
	req := PublishRequest{Topic: rawTopic, Content: content, Headers: headers}
	if id != "" {
		req.ID = &id
	}
	_, stored, err := req.encode(now, nil)
	return stored, err
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

func (req *PublishRequest) encode(now time.Time, dst []byte) (string, []byte, error) {
	topic, err := parseTopic(req.Topic)
	if err != nil {
		return "", nil, err
	}
	if req.Content == nil {
		return "", nil, badRequest(`field "content" is required (use null for a message without content)`)
	}
	id := ""
	if req.ID != nil {
		id = *req.ID
		if id == "" || len(id) > maxIDBytes {
			return "", nil, badRequest(`field "id" must be 1-%d bytes when given`, maxIDBytes)
		}
	} else {
		id = newID()
	}
	b := append(dst[:0], `{"topic":{"name":"`...)
	b = append(b, topic...) // validated: [A-Za-z0-9_.-] only, no escaping needed
	b = append(b, `"},"content":`...)
	b = appendCompact(b, req.Content)
	b = append(b, `,"id":`...)
	b = appendString(b, id)
	b = append(b, `,"timestamp":`...)
	b = strconv.AppendInt(b, now.UnixMilli(), 10)
	if len(req.Headers) > 0 {
		b = append(b, `,"headers":{`...)
		keys := make([]string, 0, len(req.Headers))
		for k := range req.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, req.Headers[k])
		}
		b = append(b, '}')
	}
	b = append(b, '}')
	return topic, b, nil
}

func parseTopic(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	var name string
	switch {
	case len(raw) == 0:
		return "", badRequest(`field "topic" is required`)
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &name); err != nil {
			return "", badRequest(`field "topic": %s`, jsonErrText(err))
		}
	case raw[0] == '{':
		var obj struct {
			Name *string `json:"name"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil || obj.Name == nil {
			return "", badRequest(`field "topic" as an object must be {"name": "<topic>"}`)
		}
		name = *obj.Name
	default:
		return "", badRequest(`field "topic" must be a string or {"name": "<topic>"}`)
	}
	if err := topicqueue.ValidateName(name); err != nil {
		return "", badRequest("%s", err.Error())
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
func appendString(b []byte, s string) []byte {
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
	return idPrefix + "-" + strconv.FormatUint(idCounter.Add(1), 16)
}
