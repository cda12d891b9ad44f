package admin

import (
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

// parseTarget reads a seek's "to" (contract.ParseSeekTo: "earliest",
// "latest", an offset, or {"timestamp": <unix ms>}). The returned func
// computes the offset on one topic: an offset below the topic's log start
// offset is 410 OFFSET_EXPIRED, one above its high watermark 400.
func parseTarget(raw json.RawMessage) (func(dispatcher.Topic) (int64, error), error) {
	to, err := contract.ParseSeekTo(raw)
	if err != nil {
		return nil, err
	}
	switch to.Kind {
	case contract.SeekEarliest:
		return func(t dispatcher.Topic) (int64, error) { return startOf(t), nil }, nil
	case contract.SeekLatest:
		return func(t dispatcher.Topic) (int64, error) { return t.HighWatermark(), nil }, nil
	case contract.SeekTimestamp:
		return func(t dispatcher.Topic) (int64, error) {
			s, ok := t.(seekable)
			if !ok {
				return 0, fmt.Errorf("topic %s cannot seek by time", t.Name())
			}
			return s.OffsetAt(to.Time)
		}, nil
	}
	off := to.Offset
	return func(t dispatcher.Topic) (int64, error) {
		if start := startOf(t); off < start {
			return 0, &contract.OffsetExpiredError{Topic: t.Name(), Offset: off, StartOffset: start}
		}
		if hw := t.HighWatermark(); off > hw {
			return 0, contract.BadRequest("offset %d is beyond the high watermark %d of topic %s", off, hw, t.Name())
		}
		return off, nil
	}, nil
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
