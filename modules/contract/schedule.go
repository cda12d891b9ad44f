package contract

import (
	"context"
	"net/http"
	"strconv"
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
	// duration string ("90s", "15m", "2h").
	DelayMember = "delay"
)

// ScheduleRule is the rule "deliverAt" and "delay" follow, as the error
// for an invalid one states it.
const ScheduleRule = `deliverAt: an RFC 3339 time ("2026-12-04T10:00:00Z") or a JSON integer of Unix milliseconds; delay: a duration such as "90s" or "15m" (units ms, s, m, h), at least 0; at most one of the two`

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

// parseSchedule reads the "deliverAt" and "delay" members (raw JSON, nil
// when absent) at now: given reports that either was present (and not
// null); at is the due time in Unix ms, 0 when the message is due now (a
// deliverAt not in the future, a delay of 0), which is then an ordinary
// publish. Both present is an error.
func parseSchedule(deliverAt, delay []byte, now time.Time) (at int64, given bool, err error) {
	if string(deliverAt) == "null" {
		deliverAt = nil
	}
	if string(delay) == "null" {
		delay = nil
	}
	switch {
	case deliverAt == nil && delay == nil:
		return 0, false, nil
	case deliverAt != nil && delay != nil:
		return 0, true, BadRequest(`give "deliverAt" or "delay", not both (%s)`, ScheduleRule)
	}
	var t time.Time
	if delay != nil {
		if delay[0] != '"' {
			return 0, true, BadRequest(`%s; this "delay" is a JSON %s, not a string`, ScheduleRule, jsonKind(delay[0]))
		}
		s, ok := storedString(delay)
		if !ok {
			return 0, true, BadRequest(`%s; this "delay" is not a valid JSON string`, ScheduleRule)
		}
		d, perr := time.ParseDuration(s)
		switch {
		case perr != nil:
			return 0, true, BadRequest("%s; delay %q is not a duration", ScheduleRule, truncateRunes(s, 64))
		case d < 0:
			return 0, true, BadRequest("%s; delay %q is negative", ScheduleRule, s)
		}
		t = now.Add(d)
	} else if deliverAt[0] == '"' {
		s, ok := storedString(deliverAt)
		if !ok {
			return 0, true, BadRequest(`%s; this "deliverAt" is not a valid JSON string`, ScheduleRule)
		}
		var perr error
		if t, perr = time.Parse(time.RFC3339Nano, s); perr != nil {
			return 0, true, BadRequest("%s; deliverAt %q is not an RFC 3339 time", ScheduleRule, truncateRunes(s, 64))
		}
	} else {
		ms, perr := strconv.ParseInt(string(deliverAt), 10, 64)
		if perr != nil || ms < 0 {
			return 0, true, BadRequest("%s; deliverAt %s is not a non-negative integer of Unix milliseconds", ScheduleRule, truncateRunes(string(deliverAt), 64))
		}
		t = time.UnixMilli(ms)
	}
	if !t.After(now) {
		return 0, true, nil
	}
	// Rounded up to the millisecond, so that "due" is never before the
	// time asked for.
	ms := t.UnixMilli()
	if time.UnixMilli(ms).Before(t) {
		ms++
	}
	return ms, true, nil
}
