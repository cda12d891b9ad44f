package contract

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The refusals of a bad deliverAt or delay state what was wrong first,
// naming the input as the protocol calls it, and the rule after it.
func TestParseScheduleErrors(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	httpRule, lineRule := " ("+ScheduleRule+")", " ("+LineScheduleRule+")"
	for _, c := range []struct{ deliverAt, delay, want string }{
		{`"2100-01-01T00:00:00Z"`, `"1h"`, "give deliverAt or delay, not both" + httpRule},
		{``, `"-5s"`, `delay "-5s" is negative` + httpRule},
		{``, `"soon"`, `delay "soon" is not a duration` + httpRule},
		{``, `"9999999h"`, `delay "9999999h" is too large to be a duration (they end at about 2562047h), far over the maximum delay` + httpRule},
		{``, `"5x"`, `delay "5x" is not a duration` + httpRule},
		{``, `5`, `delay is a JSON number, not a string` + httpRule},
		{`"tomorrow"`, ``, `deliverAt "tomorrow" is not an RFC 3339 time` + httpRule},
		{`1.5`, ``, `deliverAt 1.5 is not a non-negative integer of Unix milliseconds` + httpRule},
		{`1796400000`, ``, `deliverAt is in Unix milliseconds; 1796400000 looks like seconds`},
	} {
		var da, dl []byte
		if c.deliverAt != "" {
			da = []byte(c.deliverAt)
		}
		if c.delay != "" {
			dl = []byte(c.delay)
		}
		_, _, err := parseSchedule(da, dl, now, HTTPSchedule)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("deliverAt %s, delay %s: got %v, want %q", c.deliverAt, c.delay, err, c.want)
		}
	}
	for _, c := range []struct{ deliverAt, delay, want string }{
		{"2100-01-01T00:00:00Z", "1h", "give deliver-at= or delay=, not both" + lineRule},
		{"", "-5s", `delay="-5s" is negative` + lineRule},
		{"", "soon", `delay="soon" is not a duration` + lineRule},
		{"tomorrow", "", `deliver-at="tomorrow" is not an RFC 3339 time` + lineRule},
		{"99999999999999999999", "", `deliver-at=99999999999999999999 is not a non-negative integer of Unix milliseconds` + lineRule},
		{"1796400000", "", `deliver-at= is in Unix milliseconds; 1796400000 looks like seconds`},
	} {
		_, _, err := ParseScheduleAttrs(c.deliverAt, c.delay, now)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("deliver-at=%s delay=%s: got %v, want %q", c.deliverAt, c.delay, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "deliverAt") || strings.Contains(err.Error(), "JSON")) {
			t.Errorf("deliver-at=%s delay=%s: %v names the HTTP members", c.deliverAt, c.delay, err)
		}
	}
	// What was given, for the errors that come later.
	if at, by, err := ParseScheduleAttrs("", "90s", now); err != nil || by != (ScheduleBy{Name: "delay=", Delay: true}) || at != now.Add(90*time.Second).UnixMilli() {
		t.Errorf("delay=90s: %d, %+v, %v", at, by, err)
	}
	if _, by, err := parseSchedule([]byte(`"2100-01-01T00:00:00Z"`), nil, now, HTTPSchedule); err != nil || by != (ScheduleBy{Name: "deliverAt"}) {
		t.Errorf("deliverAt: %+v, %v", by, err)
	}
	if _, by, err := parseSchedule(nil, []byte("null"), now, HTTPSchedule); err != nil || by != (ScheduleBy{}) {
		t.Errorf("delay null: %+v, %v", by, err)
	}
	// RFC 3339 allows a lower-case "t" and "z".
	want := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	for _, s := range []string{`"2100-01-01t00:00:00z"`, `"2100-01-01T00:00:00z"`, `"2100-01-01t01:00:00+01:00"`} {
		if at, _, err := parseSchedule([]byte(s), nil, now, HTTPSchedule); err != nil || at != want {
			t.Errorf("deliverAt %s: %d, %v; want %d", s, at, err, want)
		}
	}
}

// maxDelayScheduler is a OnceScheduler whose Check is CheckMaxDelay.
type maxDelayScheduler struct {
	OnceScheduler
	now time.Time
	max time.Duration
}

func (s maxDelayScheduler) Check(deliverAt time.Time) error {
	return CheckMaxDelay(deliverAt, s.now, s.max)
}

// The max-delay refusal names what the publish sent and states a
// distance a time.Duration cannot hold.
func TestMaxDelayError(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	s := maxDelayScheduler{now: now, max: 720 * time.Hour}
	// 2912105 whole days from now (counted independently of the code).
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	for _, c := range []struct {
		by   ScheduleBy
		due  time.Time
		want string
	}{
		{ScheduleBy{Name: "delay", Delay: true}, now.Add(721 * time.Hour), "delay 721h0m0s is over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"},
		{ScheduleBy{Name: "delay=", Delay: true}, now.Add(721 * time.Hour), "delay=721h0m0s is over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"},
		{ScheduleBy{Name: "deliverAt"}, now.Add(800 * time.Hour), "deliverAt 2027-01-06T18:00:00.000Z is 800h0m0s from now, over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"},
		{ScheduleBy{Name: "deliverAt"}, far, "deliverAt 9999-12-31T23:59:59.000Z is 2912105 days from now, over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"},
		{ScheduleBy{Name: "deliver-at="}, far, "deliver-at=9999-12-31T23:59:59.000Z is 2912105 days from now, over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"},
		{ScheduleBy{}, far, "the due time 9999-12-31T23:59:59.000Z is 2912105 days from now, over the maximum delay of 720h0m0s (mmmq.broker.schedule.max-delay)"},
		{ScheduleBy{Name: "delay", Delay: true}, now.Add(720*time.Hour + 2*time.Millisecond), "delay 720h0m0.002s is over the maximum delay of 720h0m0s"},
	} {
		err := CheckSchedule(s, c.by, c.due.UnixMilli(), 0)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%+v, due %s: got %v, want %q", c.by, c.due, err, c.want)
		}
		var ie *InputError
		if !errors.As(err, &ie) || ie.Status != http.StatusBadRequest || ie.Code != CodeBadRequest || ie.Msg != err.Error() {
			t.Errorf("%+v: classified as %+v", c.by, ie)
		}
	}
	if err := CheckSchedule(s, ScheduleBy{Name: "delay", Delay: true}, now.Add(720*time.Hour).UnixMilli(), 0); err != nil {
		t.Errorf("exactly max-delay: %v", err)
	}
}
