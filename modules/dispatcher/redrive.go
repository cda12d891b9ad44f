package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Errors of Redrive.
var (
	// ErrNoDeadLetters: the dispatcher has dead letters off (409
	// NO_DEAD_LETTERS).
	ErrNoDeadLetters = contract.NewError(contract.CodeNoDeadLetters, "dispatcher: dead letters are off for this dispatcher (dead-letter is \"\")")
	// ErrNoPublisher: the Manager has no Publisher (503).
	ErrNoPublisher = errors.New("dispatcher: no publisher to redrive with")
)

// MaxRedrive is the most dead letters one Redrive call republishes; the
// result's Next says where to go on.
const MaxRedrive = 10000

// RedriveResult is what Redrive did.
type RedriveResult struct {
	// DeadLetterTopic is the topic read.
	DeadLetterTopic string `json:"deadLetterTopic"`
	// From and To are the offsets of DeadLetterTopic covered, [From, To).
	From int64 `json:"from"`
	To   int64 `json:"to"`
	// Next is the offset after the last one handled: To when everything
	// was, less when MaxRedrive stopped the call (call again from Next).
	Next int64 `json:"next"`
	// Redriven lists the messages published again, in order.
	Redriven []Redriven `json:"redriven"`
	// Skipped lists the offsets not published, with why: not a dead letter
	// (no mmmq-dl-topic header, or one naming an invalid topic or the
	// dead-letter topic itself), a dead letter of another dispatcher, one
	// stored without its content (too large: the original is still at
	// mmmq-dl-topic / mmmq-dl-offset unless retention deleted it), or
	// deleted by retention.
	Skipped []RedriveSkip `json:"skipped"`
	// Replay lists, by topic, the replay rate a redrive with a rate set
	// on the dispatcher's worker of each topic it published into (absent
	// without a rate): the pushes of that topic's offsets [from, until)
	// go at most rate per second until its checkpoint reaches until.
	Replay []TopicReplay `json:"replay,omitempty"`
}

// Redriven is one dead letter published again.
type Redriven struct {
	// DeadLetterOffset is its offset in the dead-letter topic.
	DeadLetterOffset int64 `json:"deadLetterOffset"`
	// Topic and Offset are where it was published.
	Topic  string `json:"topic"`
	Offset int64  `json:"offset"`
}

// RedriveSkip is an offset of the dead-letter topic Redrive did not
// publish.
type RedriveSkip struct {
	Offset int64  `json:"offset"`
	Reason string `json:"reason"`
}

// Redrive publishes the dead letters at offsets [from, to) of the named
// dispatcher's dead-letter topic that this dispatcher wrote
// (HeaderDLDispatcher; a topic may be shared) to their original topics (HeaderDLTopic),
// each durably, with a fresh id, the original content and headers (the
// mmmq-dl-* ones removed) and HeaderRedrivenFrom; every dispatcher and
// group reading that topic gets it again. from < 0 means the topic's
// first offset, to < 0 its high watermark. A dead-letter topic that does not
// exist yet has nothing to redrive. Redriving the same offsets twice
// publishes them twice. At most MaxRedrive are handled per call.
// Errors: ErrUnknownDispatcher, ErrNoDeadLetters, a 400 for a range outside
// [0, high watermark] or with from > to, the publish error (what was
// published before it is in the error's result).
func (m *Manager) Redrive(ctx context.Context, name string, from, to int64) (RedriveResult, error) {
	return m.RedriveAt(ctx, name, from, to, 0)
}

// RedriveAt is Redrive with a replay rate. The republishing itself is not
// paced (the call takes as long as Redrive); what is paced is the
// delivery: with rate > 0 (messages per second, at most MaxReplayRate)
// the pushes by this dispatcher's worker of each topic it published into,
// of that topic's offsets from its high watermark as the redrive began
// publishing into it up to its high watermark as the redrive ended (the
// redriven messages, and whatever others were published in between), go
// at most rate per second over all those topics together, until that
// worker's checkpoint reaches the end (replay.go; the result's Replay).
// Other dispatchers and groups reading those topics are not paced. rate 0
// clears the replay rate of the topics it publishes into. Errors:
// Redrive's, and ValidateReplayRate's for a rate < 0 or too large
// (nothing published).
func (m *Manager) RedriveAt(ctx context.Context, name string, from, to int64, rate float64) (RedriveResult, error) {
	if rate != 0 {
		if err := ValidateReplayRate(rate); err != nil {
			return RedriveResult{}, err
		}
	}
	d, ok := m.set.Get(name)
	if !ok {
		return RedriveResult{}, fmt.Errorf("%w: %s", ErrUnknownDispatcher, name)
	}
	dl := d.DeadLetter()
	if dl == "" {
		return RedriveResult{}, ErrNoDeadLetters
	}
	pub := m.publisher()
	if pub == nil {
		return RedriveResult{}, ErrNoPublisher
	}
	m.mu.Lock()
	t := m.topics[dl]
	m.mu.Unlock()
	rp := &replayPublisher{Publisher: pub, m: m, d: d, topics: map[string]*replay{}}
	if rate > 0 {
		rp.call = newReplayCall(d, rate)
	}
	res, err := RedriveTopic(ctx, t, dl, HeaderDLDispatcher, name, "", rp, from, to)
	res.Replay = rp.finish()
	return res, err
}

// RedriveTopic is Redrive of the dead-letter topic t named dl (t nil: it
// does not exist yet, nothing to redrive), taking the dead letters by wrote
// (byHeader: HeaderDLDispatcher or HeaderDLGroup) and, when origin is not
// "", only those read from topic origin. from < 0 means the
// topic's first offset, to < 0 its high watermark. Errors: a 400 for a
// range outside [0, high watermark] or with from > to, and RedriveRange's.
func RedriveTopic(ctx context.Context, t Topic, dl, byHeader, by, origin string, pub Publisher, from, to int64) (RedriveResult, error) {
	res := RedriveResult{DeadLetterTopic: dl, From: max(from, 0), Redriven: []Redriven{}, Skipped: []RedriveSkip{}}
	hw := int64(0)
	if t != nil {
		hw = t.HighWatermark()
	}
	if to < 0 {
		to = hw
	}
	switch {
	case from > hw:
		return RedriveResult{}, contract.BadRequest("redrive from %d is past %d, the high watermark of %s", from, hw, dl)
	case from > to:
		return RedriveResult{}, contract.BadRequest("redrive from %d is after to %d", from, to)
	case to > hw:
		return RedriveResult{}, contract.BadRequest("redrive to %d is past %d, the high watermark of %s", to, hw, dl)
	}
	res.To, res.Next = to, res.From
	if t == nil {
		return res, nil
	}
	err := RedriveRange(ctx, t, byHeader, by, origin, pub, &res)
	return res, err
}

// RedriveRange republishes the dead letters at offsets res.Next..res.To
// of t that by wrote (byHeader is HeaderDLDispatcher or HeaderDLGroup; a
// dead letter without that header is taken too; with origin not "", only
// those whose original topic is origin) to their original
// topics, one durable publish per run of dead letters bound for the same
// topic, at most MaxRedrive per call, recording each in res (Next, Redriven,
// Skipped) as Redrive describes. Errors: a read error of t, or the
// publish error (what was published before it is in res).
func RedriveRange(ctx context.Context, t Topic, byHeader, by, origin string, pub Publisher, res *RedriveResult) error {
	limit := res.Next + MaxRedrive
	for res.Next < res.To && res.Next < limit {
		es, err := t.ReadBatch(res.Next, int(min(res.To, limit)-res.Next))
		var oe *contract.OffsetExpiredError
		var ce *contract.CorruptionError
		switch {
		case errors.As(err, &oe) && oe.StartOffset > res.Next:
			res.Skipped = append(res.Skipped, RedriveSkip{Offset: res.Next,
				Reason: fmt.Sprintf("offsets %d..%d were deleted by retention", res.Next, oe.StartOffset-1)})
			res.Next = min(oe.StartOffset, res.To)
			continue
		case errors.As(err, &ce) && len(es) == 0 && ce.Offset == res.Next:
			res.Skipped = append(res.Skipped, RedriveSkip{Offset: res.Next, Reason: "corrupt entry: " + ce.Reason})
			res.Next++
			continue
		case err != nil && len(es) == 0:
			return fmt.Errorf("read %s at offset %d: %w", t.Name(), res.Next, err)
		case len(es) == 0:
			return fmt.Errorf("read %s at offset %d: nothing below the high watermark", t.Name(), res.Next)
		}
		for len(es) > 0 {
			n, err := redriveRun(ctx, t.Name(), byHeader, by, origin, es, pub, res)
			if err != nil {
				return err
			}
			es = es[n:]
		}
	}
	return nil
}

// redriveRun publishes the leading run of es bound for one topic (or skips
// the first entry, not a dead letter) and reports how many entries it
// handled.
func redriveRun(ctx context.Context, dlTopic, byHeader, by, origin string, es []contract.Entry, pub Publisher, res *RedriveResult) (int, error) {
	dest, stored, why := redriven(dlTopic, byHeader, by, origin, es[0])
	if why != "" {
		res.Skipped = append(res.Skipped, RedriveSkip{Offset: es[0].Offset, Reason: why})
		res.Next = es[0].Offset + 1
		return 1, nil
	}
	batch := [][]byte{stored}
	for _, e := range es[1:] {
		d2, s2, why2 := redriven(dlTopic, byHeader, by, origin, e)
		if why2 != "" || d2 != dest {
			break
		}
		batch = append(batch, s2)
	}
	first, err := pub.PublishDurable(ctx, dest, batch)
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", dest, err)
	}
	for i := range batch {
		res.Redriven = append(res.Redriven, Redriven{DeadLetterOffset: es[i].Offset, Topic: dest, Offset: first + int64(i)})
	}
	res.Next = es[len(batch)-1].Offset + 1
	return len(batch), nil
}

// redriven returns the original topic of dead letter e, which by (named
// in header byHeader) wrote to dlTopic, and the stored JSON to publish there (with the
// dead letter's ordering key, the original message's), or why it cannot
// be redriven.
func redriven(dlTopic, byHeader, by, origin string, e contract.Entry) (topic string, stored []byte, why string) {
	p := parseStored(e.Payload)
	topic = p.Headers[HeaderDLTopic]
	switch wrote := p.Headers[byHeader]; {
	case topic == "":
		return "", nil, "not a dead letter (no " + HeaderDLTopic + " header)"
	case wrote != "" && wrote != by:
		return "", nil, fmt.Sprintf("a dead letter of %s %s", ownerKind(byHeader), wrote)
	case origin != "" && topic != origin:
		return "", nil, "a dead letter of topic " + topic
	case p.Headers[HeaderDLContentOmitted] != "":
		return "", nil, fmt.Sprintf("stored without its content (%s); the original is at %s offset %s",
			p.Headers[HeaderDLContentOmitted], topic, p.Headers[HeaderDLOffset])
	case topic == dlTopic:
		return "", nil, HeaderDLTopic + " names the dead-letter topic itself"
	}
	if err := contract.ValidateTopic(topic); err != nil {
		return "", nil, fmt.Sprintf("%s header: %v", HeaderDLTopic, err)
	}
	h := maps.Clone(p.Headers)
	maps.DeleteFunc(h, func(k, _ string) bool { return strings.HasPrefix(k, "mmmq-dl-") })
	h[HeaderRedrivenFrom] = dlTopic + "/" + strconv.FormatInt(e.Offset, 10)
	b, err := contract.EncodeKeyedMessage(topic, p.Content, "", contract.MessageKey(e.Payload), h, time.Now())
	if err != nil {
		return "", nil, "cannot encode: " + err.Error()
	}
	return topic, b, ""
}

// ownerKind names who writes dead letters with header byHeader.
func ownerKind(byHeader string) string {
	if byHeader == HeaderDLGroup {
		return "consumer group"
	}
	return "dispatcher"
}

// ParseRedrive reads the body of a redrive request (a dispatcher's or a
// shared consumer group's): empty, or a JSON object with "from"
// and "to", each an integer >= 0 when present. It returns -1 for a field
// left out (Redrive's default). Errors are 400s naming
// the field; unknown fields are refused.
func ParseRedrive(body []byte) (from, to int64, err error) {
	p, err := parseRedrive(body, false)
	return p.From, p.To, err
}

// RedriveParams is a dispatcher's redrive request: the offsets From and
// To (-1 when left out) and the replay Rate in messages per second (0
// when left out).
type RedriveParams struct {
	From, To int64
	Rate     float64
}

// ParseRedriveAt reads the body of a dispatcher's redrive request: as
// ParseRedrive, plus "rate", a number of messages per second > 0 and at
// most MaxReplayRate (RedriveAt). Errors are 400s naming the field.
func ParseRedriveAt(body []byte) (RedriveParams, error) { return parseRedrive(body, true) }

func parseRedrive(body []byte, withRate bool) (RedriveParams, error) {
	p := RedriveParams{From: -1, To: -1}
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return p, nil
	}
	shape, known := `{"from": <offset>, "to": <offset>}`, `"from" and "to"`
	if withRate {
		shape, known = `{"from": <offset>, "to": <offset>, "rate": <messages/s>}`, `"from", "to" and "rate"`
	}
	if p, ok := contract.FindRepeatedMember(body); ok {
		return RedriveParams{}, contract.BadRequest("invalid redrive: field %q is given more than once", p)
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return RedriveParams{}, contract.BadRequest("invalid redrive: the body must be empty or a JSON object %s", shape)
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if k != "from" && k != "to" && (k != "rate" || !withRate) {
			return RedriveParams{}, contract.BadRequest("invalid redrive: unknown field %q (want %s)", k, known)
		}
	}
	offset := func(name string) (int64, error) {
		raw, ok := fields[name]
		if !ok {
			return -1, nil
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil || n < 0 {
			return 0, contract.BadRequest("invalid redrive: field %q must be an integer >= 0 (an offset of the dead-letter topic); got %s", name, raw)
		}
		return n, nil
	}
	var err error
	if p.From, err = offset("from"); err != nil {
		return RedriveParams{}, err
	}
	if p.To, err = offset("to"); err != nil {
		return RedriveParams{}, err
	}
	if raw, ok := fields["rate"]; ok && string(bytes.TrimSpace(raw)) != "null" { // null: left out
		if err := json.Unmarshal(raw, &p.Rate); err != nil {
			return RedriveParams{}, contract.BadRequest("invalid redrive: field \"rate\" must be a number of messages per second > 0 and <= %d; got %s", int64(MaxReplayRate), raw)
		}
		if err := ValidateReplayRate(p.Rate); err != nil {
			return RedriveParams{}, contract.BadRequest("invalid redrive: %v", err)
		}
	}
	return p, nil
}
