package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// Dead letters.
//
// A message a consumer NACKs on every attempt (the original Java mmmq: 4
// attempts, then "log and move on"), or that is past the dispatcher's
// AbnormalLimit, is appended durably to the dispatcher's dead-letter topic
// (DeadLetterPrefix + its name unless WithDeadLetter says otherwise), and
// only then does the checkpoint move past it: a crash in between
// dead-letters it again after the restart (at least once), it is never
// lost. The dead letter is an ordinary message of that topic: the original
// content, the original headers plus the HeaderDL* headers below, a fresh
// id and the time it was dead-lettered. Redrive publishes dead letters to
// their original topics again, with fresh ids.

// Headers of a dead letter (message headers of the stored message, not
// HTTP headers). Wire format, do not change.
const (
	// HeaderDLTopic is the topic the message was read from.
	HeaderDLTopic = "mmmq-dl-topic"
	// HeaderDLOffset is its offset there, in decimal.
	HeaderDLOffset = "mmmq-dl-offset"
	// HeaderDLAttempts is how many times it was sent, in decimal.
	HeaderDLAttempts = "mmmq-dl-attempts"
	// HeaderDLReason is ReasonNACKs, ReasonAbnormal, ReasonDeliveries or
	// ReasonExpired.
	HeaderDLReason = "mmmq-dl-reason"
	// HeaderDLLastStatus is the HTTP status of the last answer ("0" when
	// it had none: a connection error or a timeout).
	HeaderDLLastStatus = "mmmq-dl-last-status"
	// HeaderDLOriginalID is the message's id in its original topic.
	HeaderDLOriginalID = "mmmq-dl-original-id"
	// HeaderDLDispatcher is the dispatcher that gave up on it.
	HeaderDLDispatcher = "mmmq-dl-dispatcher"
	// HeaderDLGroup is the shared consumer group that gave up on it (its
	// dead letters carry this one instead of HeaderDLDispatcher).
	HeaderDLGroup = "mmmq-dl-group"
	// HeaderDLLastError is the last abnormal answer (at most 256 bytes),
	// when there was one.
	HeaderDLLastError = "mmmq-dl-last-error"
	// HeaderDLContentOmitted is set ("record too large") when the dead
	// letter with its content would exceed the record size limit: it then
	// carries null, and the content is only in the original topic.
	HeaderDLContentOmitted = "mmmq-dl-content-omitted"
	// HeaderDLPrevious is set on a dead letter made from a dead letter
	// (a dispatcher watching dead-letter.** gave up on one):
	// "<dead-letter topic>/<offset>" of the dead letter it was made from,
	// which still holds that earlier dispatcher's mmmq-dl-* headers. Its
	// mmmq-dl-topic, -offset and -original-id stay those of the first
	// dead letter: the original message.
	HeaderDLPrevious = "mmmq-dl-previous"
	// HeaderDLHops is how many times the message was dead-lettered, in
	// decimal, set from the second time on (absent means 1).
	HeaderDLHops = "mmmq-dl-hops"
	// HeaderRedrivenFrom is set on a redriven message:
	// "<dead-letter topic>/<offset>".
	HeaderRedrivenFrom = "mmmq-redriven-from"
)

// Values of HeaderDLReason.
const (
	// ReasonNACKs: NACKed on every attempt (MaxResends + 1).
	ReasonNACKs = "nack-exhausted"
	// ReasonAbnormal: answered abnormally past the dispatcher's
	// AbnormalLimit.
	ReasonAbnormal = "abnormal-limit"
	// ReasonDeliveries: handed out by a shared consumer group
	// mmmq.broker.groups.max-deliveries times without being acknowledged.
	ReasonDeliveries = "max-deliveries"
	// ReasonExpired: past its expiresAt (the ttl it was published with)
	// when it would have been pushed or handed out, under expired:
	// dead-letter (a dispatcher's) or mmmq.broker.groups.expired:
	// dead-letter (a shared consumer group's).
	ReasonExpired = "expired"
)

// Publisher appends one stored message JSON durably (fsynced before it
// returns) to a topic, creating the topic if needed, and returns its
// offsets. The Fx module adapts *topicqueue.Registry; a Manager without one
// logs and skips exhausted messages as if dead letters were off.
type Publisher interface {
	PublishDurable(ctx context.Context, topic string, stored [][]byte) (first int64, err error)
}

// SetPublisher gives the Manager the Publisher its workers append dead
// letters with, and Redrive republishes with. Call it before Start.
func (m *Manager) SetPublisher(p Publisher) {
	m.mu.Lock()
	m.pub = p
	m.mu.Unlock()
}

func (m *Manager) publisher() Publisher {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pub
}

// exhaust finishes m, which will not be delivered: it is appended to the
// dead-letter topic (retried with backoff until it is, or until the worker
// stops: then m stays unfinished and is delivered again after a restart),
// or logged and skipped when dead letters are off.
func (w *worker) exhaust(m *msg, reason string) error {
	topic, pub := w.d.DeadLetter(), w.m.publisher()
	fields := []zap.Field{zap.Int64("offset", m.e.Offset), zap.Int("attempts", m.attempts),
		zap.String("reason", reason), zap.String("message-id", m.id)}
	if topic == "" || pub == nil {
		w.log.Warn("message not delivered and dead letters are off; moving on without delivery", fields...)
		if reason != ReasonExpired {
			w.exhausted.Add(1)
		}
		w.finish(m)
		return nil
	}
	stored := deadLetter(m, w.d.name, w.topicName, topic, reason, false)
	b := w.m.newBackoff()
	for {
		off, err := pub.PublishDurable(w.ctx, topic, [][]byte{stored})
		if errors.Is(err, contract.ErrRecordTooLarge) {
			stored = deadLetter(m, w.d.name, w.topicName, topic, reason, true)
			off, err = pub.PublishDurable(w.ctx, topic, [][]byte{stored})
		}
		if err == nil {
			if reason != ReasonExpired {
				w.exhausted.Add(1) // counted once finished: a stop during the retries leaves it unfinished
			}
			w.deadLettered.Add(1)
			w.log.Warn("message dead-lettered", append(fields, zap.String("dead-letter-topic", topic), zap.Int64("dead-letter-offset", off))...)
			if h := w.m.opts.Hooks; h != nil && h.AfterDeadLetter != nil {
				h.AfterDeadLetter(w.d.name, w.topicName, m.e.Offset) // test-only crash point
			}
			w.finish(m)
			return nil
		}
		if w.ctx.Err() != nil {
			return errStopped
		}
		delay := b.NextBackOff()
		w.noteErr(fmt.Sprintf("offset %d: append to dead-letter topic %s: %v", m.e.Offset, topic, err))
		w.log.Error("append to the dead-letter topic failed; delivery waits and retries (nothing is skipped)",
			append(fields, zap.String("dead-letter-topic", topic), zap.Duration("retry-in", delay), zap.Error(err))...)
		w.backingOff.Store(true)
		ok := sleep(w.ctx, delay)
		w.backingOff.Store(false)
		if !ok {
			return errStopped
		}
	}
}

// storedParts is what a dead letter and a redrive take from a stored
// message.
type storedParts struct {
	Content json.RawMessage   `json:"content"`
	ID      string            `json:"id"`
	Headers map[string]string `json:"headers"`
}

// parseStored decodes a stored message JSON; one that is not (it passed its
// CRC, so it is what was written) keeps its bytes as a JSON string content.
func parseStored(b []byte) storedParts {
	var p storedParts
	if err := json.Unmarshal(b, &p); err != nil || p.Content == nil {
		s := string(b)
		if !utf8.ValidString(s) {
			s = strings.ToValidUTF8(s, "\uFFFD")
		}
		raw, _ := json.Marshal(s)
		return storedParts{Content: raw}
	}
	return p
}

// deadLetter returns the stored JSON of m, read from topic, as a dead
// letter in dlTopic (content null when omitContent), with m's ordering
// key. When m is itself a dead letter (chainedFrom), the new one keeps
// its original topic, offset and id and points back to it
// (HeaderDLPrevious, HeaderDLHops), so that redrive goes to the original
// topic and nothing of the first dead letter is lost: it stays where it
// is, with its own headers.
func deadLetter(m *msg, dispatcher, topic, dlTopic, reason string, omitContent bool) []byte {
	return deadLetterBy(m, HeaderDLDispatcher, dispatcher, topic, dlTopic, reason, omitContent)
}

// GroupDeadLetter returns the stored JSON of entry e, read from topic, as
// a dead letter of the shared consumer group named group in dlTopic after
// deliveries deliveries (reason ReasonDeliveries): the headers of a
// dispatcher's dead letter, with HeaderDLGroup instead of
// HeaderDLDispatcher and last status "0" (a pull consumer answers no
// status). omitContent stores null content, as for a dispatcher.
func GroupDeadLetter(e contract.Entry, topic, group, dlTopic string, deliveries int, omitContent bool) []byte {
	return GroupDeadLetterFor(e, topic, group, dlTopic, deliveries, ReasonDeliveries, omitContent)
}

// GroupDeadLetterFor is GroupDeadLetter with another reason (ReasonExpired).
func GroupDeadLetterFor(e contract.Entry, topic, group, dlTopic string, deliveries int, reason string, omitContent bool) []byte {
	return deadLetterBy(&msg{e: e, attempts: deliveries}, HeaderDLGroup, group, topic, dlTopic, reason, omitContent)
}

// deadLetterBy is deadLetter with the header naming who gave up
// (HeaderDLDispatcher or HeaderDLGroup) set to by.
func deadLetterBy(m *msg, byHeader, by, topic, dlTopic, reason string, omitContent bool) []byte {
	p := parseStored(m.e.Payload)
	h := make(map[string]string, len(p.Headers)+11)
	for k, v := range p.Headers {
		h[k] = v
	}
	if hops, ok := chainedFrom(topic, p.Headers); ok {
		// The earlier dispatcher's per-attempt headers are at
		// HeaderDLPrevious; this dead letter carries this one's.
		delete(h, HeaderDLLastError)
		h[HeaderDLPrevious] = topic + "/" + strconv.FormatInt(m.e.Offset, 10)
		h[HeaderDLHops] = strconv.Itoa(hops + 1)
	} else {
		h[HeaderDLTopic] = topic
		h[HeaderDLOffset] = strconv.FormatInt(m.e.Offset, 10)
		h[HeaderDLOriginalID] = p.ID
	}
	h[HeaderDLAttempts] = strconv.Itoa(m.attempts)
	h[HeaderDLReason] = reason
	h[HeaderDLLastStatus] = strconv.Itoa(m.lastStatus)
	h[byHeader] = by
	if m.lastErr != "" {
		// The consumer controls part of this text (a 3xx's Location, a
		// custom Sender's error): EncodeMessage refuses invalid UTF-8.
		h[HeaderDLLastError] = truncateUTF8(strings.ToValidUTF8(m.lastErr, "\uFFFD"), 256)
	}
	content := p.Content
	if omitContent {
		content = json.RawMessage("null")
		h[HeaderDLContentOmitted] = "record too large"
	}
	// The content came from a stored message (valid JSON), the topic
	// passed Validate and MessageKey gives only valid keys (one that is
	// not, written by another tool, is left out): encoding cannot fail.
	b, err := contract.EncodeKeyedMessage(dlTopic, content, "", contract.MessageKey(m.e.Payload), h, time.Now())
	if err != nil {
		panic(fmt.Sprintf("dispatcher: encode dead letter: %v", err))
	}
	return b
}

// chainedFrom reports whether a message read from topic with headers h is
// a dead letter, and how many times it was dead-lettered: topic is under
// DeadLetterPrefix (reserved: only tokens naming it may publish there) and
// h names a valid original topic and offset. A message of a dead-letter
// topic without them (published there by hand) is dead-lettered as any.
func chainedFrom(topic string, h map[string]string) (hops int, ok bool) {
	if contract.ReservedPrefix(topic) != DeadLetterPrefix || contract.ValidateTopic(h[HeaderDLTopic]) != nil {
		return 0, false
	}
	if off, err := strconv.ParseInt(h[HeaderDLOffset], 10, 64); err != nil || off < 0 {
		return 0, false
	}
	hops, err := strconv.Atoi(h[HeaderDLHops])
	if err != nil || hops < 1 {
		hops = 1
	}
	return hops, true
}

// truncateUTF8 cuts s to at most n bytes on a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
