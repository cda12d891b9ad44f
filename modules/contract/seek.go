package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"time"
)

// SeekKind says what a SeekTarget names.
type SeekKind int

// The kinds of SeekTarget.
const (
	// SeekEarliest is the topic's log start offset.
	SeekEarliest SeekKind = iota + 1
	// SeekLatest is the topic's high watermark: nothing stored so far is
	// delivered again.
	SeekLatest
	// SeekOffset is SeekTarget.Offset, which must lie between the log start
	// offset and the high watermark (inclusive).
	SeekOffset
	// SeekTimestamp is the first offset whose stored timestamp (Unix ms)
	// is at or after SeekTarget.Time, or the high watermark when none is.
	SeekTimestamp
)

// SeekTarget is where a seek moves a dispatcher's checkpoint or a
// consumer group's committed offset.
type SeekTarget struct {
	Kind   SeekKind
	Offset int64     // SeekOffset only
	Time   time.Time // SeekTimestamp only
}

// SeekToShape is what a seek's "to" may be, for error messages.
const SeekToShape = `"to" is "earliest", "latest", an offset >= 0 or {"timestamp": <unix ms>}`

// ParseSeekTo reads the "to" of a seek body (raw JSON; the same grammar
// for dispatchers and consumer groups): "earliest", "latest", an integer
// offset >= 0, or {"timestamp": <unix ms>} (an integer >= 0, no other
// member, "timestamp" in lower case: "Timestamp" is refused naming it; a
// positive number under MinUnixMillis is refused as Unix seconds). A
// missing "to" (absent or null) is an error too: it would otherwise read
// as offset 0 and rewind. Errors are 400 *InputError
// starting with SeekToShape, saying what is wrong.
func ParseSeekTo(raw json.RawMessage) (SeekTarget, error) {
	to := bytes.TrimSpace(raw)
	if len(to) == 0 || string(to) == "null" {
		return SeekTarget{}, BadRequest(`%s: "to" is missing`, SeekToShape)
	}
	switch to[0] {
	case '"':
		var s string
		if err := json.Unmarshal(to, &s); err != nil {
			return SeekTarget{}, BadRequest("%s: %v", SeekToShape, err)
		}
		switch s {
		case "earliest":
			return SeekTarget{Kind: SeekEarliest}, nil
		case "latest":
			return SeekTarget{Kind: SeekLatest}, nil
		}
		return SeekTarget{}, BadRequest(`%s: unknown "to" %q`, SeekToShape, truncateRunes(s, 64))
	case '{':
		var ts struct {
			Timestamp json.RawMessage `json:"timestamp"`
		}
		if mc, ok := FindMemberCase(to, reflect.TypeOf(ts)); ok {
			return SeekTarget{}, BadRequest("%s: unknown field %q (the member is %q)", SeekToShape, mc.Sent, mc.Want)
		}
		dec := json.NewDecoder(bytes.NewReader(to))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&ts); err != nil {
			return SeekTarget{}, BadRequest("%s: %s", SeekToShape, JSONDecodeText(err))
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return SeekTarget{}, BadRequest("%s: data after the timestamp object", SeekToShape)
		}
		ms, err := seekInteger(ts.Timestamp, "timestamp")
		if err != nil {
			return SeekTarget{}, err
		}
		if err := CheckUnixMillis("timestamp", ms); err != nil {
			return SeekTarget{}, err
		}
		return SeekTarget{Kind: SeekTimestamp, Time: time.UnixMilli(ms)}, nil
	}
	off, err := seekInteger(to, `"to" offset`)
	if err != nil {
		return SeekTarget{}, err
	}
	return SeekTarget{Kind: SeekOffset, Offset: off}, nil
}

// seekInteger parses raw as a JSON integer >= 0; what names it in errors.
func seekInteger(raw json.RawMessage, what string) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, BadRequest("%s: %s is missing", SeekToShape, what)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, BadRequest("%s: %s must be an integer >= 0; got %s", SeekToShape, what, truncateRunes(s, 64))
	}
	return n, nil
}
