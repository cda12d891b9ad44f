package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// seekable is what a seek needs of a topic beyond dispatcher.Topic
// (*topicqueue.TopicQueue has it).
type seekable interface {
	StartOffset() int64
	OffsetAt(t time.Time) (int64, error)
}

// parseTarget reads a seek's "to": "earliest", "latest", an offset, or
// {"timestamp": <unix ms>}. The returned func computes the offset on one
// topic: an offset below the topic's log start offset is 410
// OFFSET_EXPIRED, one above its high watermark 400.
func parseTarget(raw json.RawMessage) (func(dispatcher.Topic) (int64, error), error) {
	raw = bytes.TrimSpace(raw)
	var word string
	var off int64
	var ts struct {
		Timestamp *int64 `json:"timestamp"`
	}
	switch {
	case len(raw) == 0 || string(raw) == "null":
		// An explicit null is a missing "to": it decodes into an offset
		// without error (as 0), which would rewind every topic.
		return nil, contract.BadRequest(`invalid seek: field "to" is required: "earliest", "latest", an offset or {"timestamp": <unix ms>}`)
	case json.Unmarshal(raw, &word) == nil && (word == "earliest" || word == "latest"):
		return func(t dispatcher.Topic) (int64, error) {
			if word == "latest" {
				return t.HighWatermark(), nil
			}
			return startOf(t), nil
		}, nil
	case json.Unmarshal(raw, &off) == nil && off >= 0:
		return func(t dispatcher.Topic) (int64, error) {
			if start := startOf(t); off < start {
				return 0, &contract.OffsetExpiredError{Topic: t.Name(), Offset: off, StartOffset: start}
			}
			if hw := t.HighWatermark(); off > hw {
				return 0, contract.BadRequest("offset %d is beyond the high watermark %d of topic %s", off, hw, t.Name())
			}
			return off, nil
		}, nil
	case raw[0] == '{' && strictDecode(raw, &ts) == nil && ts.Timestamp != nil:
		at := time.UnixMilli(*ts.Timestamp)
		return func(t dispatcher.Topic) (int64, error) {
			s, ok := t.(seekable)
			if !ok {
				return 0, fmt.Errorf("topic %s cannot seek by time", t.Name())
			}
			return s.OffsetAt(at)
		}, nil
	}
	return nil, contract.BadRequest(`invalid seek: "to" must be "earliest", "latest", an offset >= 0 or {"timestamp": <unix ms>}; got %s`, raw)
}

func strictDecode(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func startOf(t dispatcher.Topic) int64 {
	if s, ok := t.(seekable); ok {
		return s.StartOffset()
	}
	return 0
}

// topicMatcher reads a seek's "topic": a topic name or pattern; "" is
// every topic ("**").
func topicMatcher(s string) (func(string) bool, error) {
	if s == "" {
		s = "**"
	}
	p, err := dispatcher.ParsePattern(s)
	if err != nil {
		return nil, contract.BadRequest("invalid seek: field \"topic\": %v", err)
	}
	return p.Match, nil
}
