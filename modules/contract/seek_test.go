package contract

import (
	"strings"
	"testing"
	"time"
)

// TestParseSeekTo: the one grammar of a seek's "to" (dispatchers and
// consumer groups): each accepted shape gives its target; each refused
// one a 400 saying what is wrong.
func TestParseSeekTo(t *testing.T) {
	for raw, want := range map[string]SeekTarget{
		`"earliest"`:                   {Kind: SeekEarliest},
		` "latest" `:                   {Kind: SeekLatest},
		`0`:                            {Kind: SeekOffset},
		`17`:                           {Kind: SeekOffset, Offset: 17},
		`{"timestamp":0}`:              {Kind: SeekTimestamp, Time: time.UnixMilli(0)},
		`{"timestamp": 1767225600000}`: {Kind: SeekTimestamp, Time: time.UnixMilli(1767225600000)},
	} {
		got, err := ParseSeekTo([]byte(raw))
		if err != nil || got.Kind != want.Kind || got.Offset != want.Offset || !got.Time.Equal(want.Time) {
			t.Errorf("%s: %+v %v, want %+v", raw, got, err, want)
		}
	}
	for raw, says := range map[string]string{
		``:                             `"to" is missing`,
		`null`:                         `"to" is missing`,
		`"first"`:                      `unknown "to" "first"`,
		`-1`:                           `"to" offset must be an integer >= 0; got -1`,
		`1.5`:                          `"to" offset must be an integer >= 0; got 1.5`,
		`true`:                         `"to" offset must be an integer >= 0`,
		`{}`:                           "timestamp is missing",
		`{"timestamp":null}`:           "timestamp is missing",
		`{"timestamp":-5}`:             "timestamp must be an integer >= 0; got -5",
		`{"timestamp":"2026-01-01"}`:   "timestamp must be an integer >= 0",
		`{"timestamp":1,"x":2}`:        `unknown field "x"`,
		`{"Timestamp":1767225600000}`:  `unknown field "Timestamp" (the member is "timestamp")`,
		`{"timestamp":1767225600}`:     "timestamp is in Unix milliseconds; 1767225600 looks like seconds (1767225600*1000 would be 2026-01-01T00:00:00.000Z)",
		`{"timestamp":1767225600000}x`: "data after the timestamp object",
	} {
		_, err := ParseSeekTo([]byte(raw))
		if err == nil || Classify(err).Status != 400 || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want a 400 saying %q", raw, err, says)
		}
	}
}
