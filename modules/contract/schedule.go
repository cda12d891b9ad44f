package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Members of a publish request that schedule the message for later
// (POST /messages and /mmmq/messages only; see Scheduler).
const (
	// DeliverAtMember is the time the message enters its topic: an RFC 3339
	// string ("2026-12-04T10:00:00Z", fractions allowed) or a JSON integer
	// of Unix milliseconds.
	DeliverAtMember = "deliverAt"
	// DelayMember is how long from now the message enters its topic: a
	// duration string ("90s", "15m", "2h"; Go duration units ns, us, ms,
	// s, m, h).
	DelayMember = "delay"
)

// ScheduleRule is the rule "deliverAt" and "delay" follow, as the error
// for an invalid one states it.
const ScheduleRule = `deliverAt: an RFC 3339 time ("2026-12-04T10:00:00Z") or a JSON integer of Unix milliseconds (at least 100000000000, 1973-03-03: a smaller number is refused as Unix seconds); delay: a duration such as "90s" or "15m" (units ns, us, ms, s, m, h; due times are kept to the millisecond, rounded up), at least 0; at most one of the two`

// LineScheduleRule is ScheduleRule as the line protocol states it, for its
// PUBX attributes deliver-at= and delay= (ParseScheduleAttrs).
const LineScheduleRule = `deliver-at=: an RFC 3339 time ("2026-12-04T10:00:00Z") or Unix milliseconds, digits only (at least 100000000000, 1973-03-03: a smaller number is refused as Unix seconds); delay=: a duration such as "90s" or "15m" (units ns, us, ms, s, m, h; due times are kept to the millisecond, rounded up), at least 0; at most one of the two`

// ScheduleNames are the names a protocol's errors give the two inputs of
// a scheduled publish, and the rule they follow: the one validation
// (parseSchedule) takes them, so that each protocol names its own.
type ScheduleNames struct {
	DeliverAt, Delay string // "deliverAt" and "delay", or "deliver-at=" and "delay="
	Rule             string // ScheduleRule or LineScheduleRule
}

// HTTPSchedule names the HTTP API's members; LineSchedule the line
// protocol's attributes.
var (
	HTTPSchedule = ScheduleNames{DeliverAt: DeliverAtMember, Delay: DelayMember, Rule: ScheduleRule}
	LineSchedule = ScheduleNames{DeliverAt: "deliver-at=", Delay: "delay=", Rule: LineScheduleRule}
)

// ScheduleBy is what gave a scheduled publish its due time, for the
// errors that name it: Name is the member or attribute (a ScheduleNames
// name), Delay tells a delay from a deliverAt. The zero value names
// none ("the due time").
type ScheduleBy struct {
	Name  string
	Delay bool
}

// withValue is name followed by a value v: "delay \"-5s\"" for a member,
// "delay=\"-5s\"" for an attribute (a name ending in '=').
func withValue(name, v string) string {
	if strings.HasSuffix(name, "=") {
		return name + v
	}
	return name + " " + v
}

// ScheduledDir is the directory under the data root where the scheduler
// keeps pending scheduled messages; not a topic (a topic name cannot
// start with a dot), passed over by the storage's start-up listing.
const ScheduledDir = ".scheduled"

// MinUnixMillis is the smallest positive Unix-millisecond time taken
// where the API asks for one (a publish's deliverAt, a seek's timestamp):
// 100000000000, 1973-03-03. A smaller positive number is almost certainly
// Unix seconds and is refused (400) rather than read as a time in 1970;
// 0 (the epoch) stays valid.
const MinUnixMillis = 100_000_000_000

// CheckUnixMillis refuses (400, naming field) a positive ms under
// MinUnixMillis, saying what it would be read as seconds; nil otherwise.
func CheckUnixMillis(field string, ms int64) error {
	if ms > 0 && ms < MinUnixMillis {
		return BadRequest("%s is in Unix milliseconds; %d looks like seconds (%d*1000 would be %s); positive numbers under %d (1973-03-03 in ms) are refused (0 is taken: the Unix epoch)", field, ms, ms, FormatMillis(ms*1000), int64(MinUnixMillis))
	}
	return nil
}

// CheckMaxDelay refuses (400 naming mmmq.broker.schedule.max-delay, a
// *MaxDelayError) a due time more than max after now. deliverAt is a due
// time as kept, rounded up to the next millisecond, so up to 1ms beyond
// max is the rounding of a delay of exactly max and is taken.
func CheckMaxDelay(deliverAt, now time.Time, max time.Duration) error {
	// Sub saturates at about 292 years, still over any max.
	if d := deliverAt.Sub(now); d >= max+time.Millisecond {
		return &MaxDelayError{Due: deliverAt, Now: now, Max: max}
	}
	return nil
}

// MaxDelayError is CheckMaxDelay's refusal: Due is more than Max after
// Now. It is a 400 BAD_REQUEST *InputError (Unwrap) whose message names
// By, which CheckSchedule and Schedule set to what the publish sent:
//
//	delay 721h0m0s is over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)
//	deliverAt 9999-12-31T23:59:59.000Z is 2912105 days from now, over the maximum delay of ...
//
// (deliver-at= and delay= on the line protocol; "the due time" when By
// is unset). The distance is stated to the second, or to the millisecond
// when that would read as Max itself, and in whole days from 1000 days
// on (a time.Duration cannot hold more than about 292 years).
type MaxDelayError struct {
	Due, Now time.Time
	Max      time.Duration
	By       ScheduleBy
}

func (e *MaxDelayError) Error() string {
	over := fmt.Sprintf("over the maximum delay of %v (mmmq.broker.schedule.max-delay)", e.Max)
	dist := dueDistance(e.Due, e.Now, e.Max)
	switch {
	case e.By.Name == "":
		return fmt.Sprintf("the due time %s is %s from now, %s", FormatMillis(e.Due.UnixMilli()), dist, over)
	case e.By.Delay:
		return fmt.Sprintf("%s is %s", withValue(e.By.Name, dist), over)
	default:
		return fmt.Sprintf("%s is %s from now, %s", withValue(e.By.Name, FormatMillis(e.Due.UnixMilli())), dist, over)
	}
}

// Unwrap classifies the error: 400 BAD_REQUEST with its message.
func (e *MaxDelayError) Unwrap() error {
	return &InputError{Status: http.StatusBadRequest, Code: CodeBadRequest, Msg: e.Error()}
}

// dueDistance states how far due is after now, over max.
func dueDistance(due, now time.Time, max time.Duration) string {
	const day = 24 * 60 * 60
	if secs := due.Unix() - now.Unix(); secs >= 1000*day {
		return strconv.FormatInt(secs/day, 10) + " days"
	}
	d := due.Sub(now)
	shown := d.Round(time.Second)
	if shown <= max {
		shown = d.Truncate(time.Millisecond) // at least max+1ms
	}
	return shown.String()
}

// name returns err with b as what gave the due time, when err is a
// *MaxDelayError and b names something; else err.
func (b ScheduleBy) name(err error) error {
	if md, ok := err.(*MaxDelayError); ok && b.Name != "" {
		c := *md
		c.By = b
		return &c
	}
	return err
}

// NotImplemented returns an *InputError with status 501 NOT_IMPLEMENTED:
// the request asks for something this broker (or this path) does not do;
// nothing was stored.
func NotImplemented(format string, args ...any) error {
	e := BadRequest(format, args...).(*InputError)
	e.Status, e.Code = http.StatusNotImplemented, CodeNotImplemented
	return e
}

// TooManyScheduled returns an *InputError with status 507
// TOO_MANY_SCHEDULED: a topic's pending scheduled messages are at their
// cap; nothing was stored.
func TooManyScheduled(format string, args ...any) error {
	e := BadRequest(format, args...).(*InputError)
	e.Status, e.Code = http.StatusInsufficientStorage, CodeTooManyScheduled
	return e
}

// Scheduler keeps messages published with "deliverAt" or "delay" until
// they are due and then appends them to their topic (modules/schedule).
// The HTTP API calls it; without one, scheduled publishes are 501.
type Scheduler interface {
	// Schedule stores stored (the stored message JSON of topic) durably,
	// fsynced before it returns nil, to be appended to topic at deliverAt
	// or later. It returns the schedule id that Cancel takes. Errors are
	// classified (400 beyond the maximum delay, 507 at the per-topic cap,
	// 501 where the broker cannot schedule, 503 on an I/O failure).
	Schedule(ctx context.Context, topic string, stored []byte, deliverAt time.Time) (id string, err error)
	// Cancel drops a pending message of topic; false when id is unknown,
	// not topic's, already delivered or being delivered now.
	Cancel(topic, id string) (bool, error)
	// Pending is the number of topic's messages waiting to be delivered.
	Pending(topic string) int
}

// parseSchedule reads the deliverAt and delay inputs (raw JSON, nil when
// absent) at now, naming them in errors as n does: by is what was given
// (present and not null; the zero ScheduleBy when neither was); at is the
// due time in Unix ms, 0 when the message is due now (a deliverAt not in
// the future, a delay of 0), which is then an ordinary publish. Both
// present is an error. An error states what was wrong first, then the
// rule (n.Rule) in parentheses.
func parseSchedule(deliverAt, delay []byte, now time.Time, n ScheduleNames) (at int64, by ScheduleBy, err error) {
	if string(deliverAt) == "null" {
		deliverAt = nil
	}
	if string(delay) == "null" {
		delay = nil
	}
	switch {
	case deliverAt == nil && delay == nil:
		return 0, by, nil
	case deliverAt != nil && delay != nil:
		return 0, ScheduleBy{Name: n.DeliverAt}, BadRequest(`give %s or %s, not both (%s)`, n.DeliverAt, n.Delay, n.Rule)
	}
	var t time.Time
	if delay != nil {
		by = ScheduleBy{Name: n.Delay, Delay: true}
		if delay[0] != '"' {
			return 0, by, BadRequest(`%s is a JSON %s, not a string (%s)`, n.Delay, jsonKind(delay[0]), n.Rule)
		}
		s, ok := storedString(delay)
		if !ok {
			return 0, by, BadRequest(`%s is not a valid JSON string (%s)`, n.Delay, n.Rule)
		}
		d, perr := time.ParseDuration(s)
		switch {
		case perr != nil && durationOverflow(s):
			return 0, by, BadRequest("%s is too large to be a duration (they end at about 2562047h), far over the maximum delay (%s)", withValue(n.Delay, strconv.Quote(truncateRunes(s, 64))), n.Rule)
		case perr != nil:
			return 0, by, BadRequest("%s is not a duration (%s)", withValue(n.Delay, strconv.Quote(truncateRunes(s, 64))), n.Rule)
		case d < 0:
			return 0, by, BadRequest("%s is negative (%s)", withValue(n.Delay, strconv.Quote(s)), n.Rule)
		}
		// From the publish time as stored (whole milliseconds, as the
		// message's timestamp and a ttl's expiresAt count), so that a ttl
		// 1ms longer than the delay still ends after the due time.
		t = time.UnixMilli(now.UnixMilli()).Add(d)
	} else if by = (ScheduleBy{Name: n.DeliverAt}); deliverAt[0] == '"' {
		s, ok := storedString(deliverAt)
		if !ok {
			return 0, by, BadRequest(`%s is not a valid JSON string (%s)`, n.DeliverAt, n.Rule)
		}
		var perr error
		// RFC 3339 lets "T" and "Z" be lower case; Go's layout does not.
		if t, perr = time.Parse(time.RFC3339Nano, strings.ToUpper(s)); perr != nil {
			return 0, by, BadRequest("%s is not an RFC 3339 time (%s)", withValue(n.DeliverAt, strconv.Quote(truncateRunes(s, 64))), n.Rule)
		}
	} else {
		ms, perr := strconv.ParseInt(string(deliverAt), 10, 64)
		if perr != nil || ms < 0 {
			return 0, by, BadRequest("%s is not a non-negative integer of Unix milliseconds (%s)", withValue(n.DeliverAt, truncateRunes(string(deliverAt), 64)), n.Rule)
		}
		if err := CheckUnixMillis(n.DeliverAt, ms); err != nil {
			return 0, by, err
		}
		t = time.UnixMilli(ms)
	}
	if !t.After(now) {
		return 0, by, nil
	}
	// Rounded up to the millisecond, so that "due" is never before the
	// time asked for.
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms, by, nil
}

// ScheduleDropper is the optional capability of a Scheduler that lets
// DELETE /topics/{topic} drop the topic's pending scheduled messages with
// it (modules/schedule). DropTopic drops them durably, then calls del
// (which deletes the topic); it returns how many were dropped. After a
// crash either the topic and its pending messages are both gone or both
// remain. A Schedule of the topic while it runs is 409 TOPIC_BUSY.
type ScheduleDropper interface {
	DropTopic(ctx context.Context, topic string, del func() error) (dropped int, err error)
}

// Scheduled is the outcome of a scheduled publish: the schedule id (what
// Cancel takes), the due time, and whether the publish was a duplicate of
// an earlier schedule of the same producer id and topic (then ID and
// DeliverAt are that first schedule's and nothing was stored).
type Scheduled struct {
	ID        string
	DeliverAt time.Time
	Duplicate bool
}

// OnceScheduler is the optional capability of a Scheduler that
// deduplicates producer ids (modules/schedule's Idempotent): a scheduled
// publish whose producer id was already scheduled on the same topic within
// the idempotent-publish window (mmmq.broker.dedup.window) stores nothing
// and answers the first schedule. Check validates a due time without
// storing anything (the rules Schedule applies before it writes: 501 where
// the broker cannot schedule, 400 beyond the maximum delay), so that a
// batch can refuse everything before it stores anything.
type OnceScheduler interface {
	Scheduler
	ScheduleOnce(ctx context.Context, topic, producerID string, stored []byte, deliverAt time.Time) (Scheduled, error)
	Check(deliverAt time.Time) error
}

// ErrNoScheduler is the refusal of a scheduled publish on a broker without
// a scheduler module (501 NOT_IMPLEMENTED; nothing was stored), on every
// publish path.
var ErrNoScheduler = NotImplemented(`scheduled messages ("deliverAt", "delay") are not available: this broker has no scheduler module`)

// CheckSchedule validates a scheduled publish before anything is stored:
// s must exist (else ErrNoScheduler), the due time must pass s's Check
// when s has one (a *MaxDelayError naming by, what the publish sent),
// and a message with an expiry (expiresAt, Unix ms, 0 for none: publish
// time + ttl) must be due before it expires, else 400 naming the rule.
func CheckSchedule(s Scheduler, by ScheduleBy, deliverAt, expiresAt int64) error {
	if s == nil {
		return ErrNoScheduler
	}
	if expiresAt != 0 && deliverAt >= expiresAt {
		instead := "an earlier due time"
		switch {
		case by.Delay:
			instead = "a shorter " + by.Name
		case by.Name != "":
			instead = "an earlier " + by.Name
		}
		return BadRequest(`the message would expire before it is due: its ttl counts from the publish (expiresAt %s) and its due time is %s; a scheduled message must be due before publish time + ttl (give a longer ttl or %s)`,
			FormatMillis(expiresAt), FormatMillis(deliverAt), instead)
	}
	if o, ok := s.(OnceScheduler); ok {
		return by.name(o.Check(time.UnixMilli(deliverAt)))
	}
	return nil
}

// Schedule hands a checked scheduled message (stored, the stored message
// JSON of topic, due at deliverAt in Unix ms) to s: through ScheduleOnce
// when s deduplicates and producerID is the producer's ("" for a generated
// id, never deduplicated), else through Schedule. Errors are s's, a
// *MaxDelayError naming by (what the publish sent).
func Schedule(ctx context.Context, s Scheduler, by ScheduleBy, topic, producerID string, stored []byte, deliverAt int64) (Scheduled, error) {
	at := time.UnixMilli(deliverAt)
	if o, ok := s.(OnceScheduler); ok && producerID != "" {
		res, err := o.ScheduleOnce(ctx, topic, producerID, stored, at)
		return res, by.name(err)
	}
	id, err := s.Schedule(ctx, topic, stored, at)
	return Scheduled{ID: id, DeliverAt: at}, by.name(err)
}

// FormatMillis formats a Unix-millisecond time as the answers of scheduled
// publishes give it: RFC 3339 in UTC with milliseconds,
// "2026-12-04T10:00:00.000Z".
func FormatMillis(ms int64) string {
	return string(AppendMillis(nil, ms))
}

// AppendMillis appends FormatMillis(ms) to b.
func AppendMillis(b []byte, ms int64) []byte {
	return time.UnixMilli(ms).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
}

// ParseScheduleAttrs reads the line protocol's deliver-at= and delay=
// values (percent-decoded; "" when absent) at now, with the rules of the
// HTTP members (parseSchedule), its errors naming the attributes
// (LineSchedule): deliver-at is an RFC 3339 time or Unix milliseconds
// (digits only), delay a duration. at is the due time in Unix ms, 0 when
// the message is due now (an ordinary publish); by is what was given (for
// CheckSchedule and Schedule; zero when neither). Both present is an
// error.
func ParseScheduleAttrs(deliverAt, delay string, now time.Time) (at int64, by ScheduleBy, err error) {
	var da, dl []byte
	if delay != "" {
		dl = AppendJSONString(nil, delay)
	}
	switch {
	case deliverAt != "" && strings.Trim(deliverAt, "0123456789") == "":
		da = []byte(deliverAt)
	case deliverAt != "":
		da = AppendJSONString(nil, deliverAt)
	}
	return parseSchedule(da, dl, now, LineSchedule)
}

// HeaderScheduleID is the header the broker sets on a message it moves from
// the scheduled store into its topic: the message's schedule id. The
// scheduler's recovery looks for it in the topic to tell an appended
// message from one never appended, and the idempotent-publish window's
// rebuild passes over messages carrying it (their id belongs to the
// schedule, not to a publish to the topic, and their timestamp is the
// publish time, which can be older than the window). A producer's header
// of that name is replaced.
const HeaderScheduleID = "mmmq-schedule-id"

// ScheduleIDMaxBytes is the longest schedule id (a bucket start of up to
// 19 digits, '-', 16 hex digits).
const ScheduleIDMaxBytes = 36

// ScheduleHeaderMaxBytes is the most the broker adds to a scheduled
// message when it moves it into its topic (HeaderScheduleID and its value,
// with a "headers" member when the message has none): the size rules count
// it at publish, so a message accepted for later always fits its topic.
const ScheduleHeaderMaxBytes = len(`,"headers":{"`+HeaderScheduleID+`":""}`) + ScheduleIDMaxBytes

// CheckScheduledSize refuses (413 TOO_LARGE, naming the key) a stored
// message that, with the header the broker adds when it is due
// (ScheduleHeaderMaxBytes), would be over maxRecordBytes
// (mmmq.broker.segment.max-record-bytes; 0 for no limit).
func CheckScheduledSize(stored []byte, maxRecordBytes int) error {
	if maxRecordBytes > 0 && len(stored)+ScheduleHeaderMaxBytes > maxRecordBytes {
		return TooLarge("scheduled message is %d bytes as stored, plus up to %d bytes for the %s header the broker adds when it is due, over the limit of %d bytes (mmmq.broker.segment.max-record-bytes)",
			len(stored), ScheduleHeaderMaxBytes, HeaderScheduleID, maxRecordBytes)
	}
	return nil
}

// StoredScheduleID is the HeaderScheduleID header of a stored message
// JSON, "" when it has none (or is not a stored message).
func StoredScheduleID(stored []byte) string {
	if !bytes.Contains(stored, []byte(`"`+HeaderScheduleID+`"`)) {
		return ""
	}
	var m struct {
		Headers map[string]string `json:"headers"`
	}
	if json.Unmarshal(stored, &m) != nil {
		return ""
	}
	return m.Headers[HeaderScheduleID]
}
