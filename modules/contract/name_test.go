package contract

import (
	"strings"
	"testing"
)

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "order.created", "A-b_9.x", strings.Repeat("a", 249), "a.b.c.d", "dispatchers", "dispatchers.json.x", "x.dispatchers.json"} {
		if err := ValidateTopic(ok); err != nil {
			t.Errorf("ValidateTopic(%q) = %v", ok, err)
		}
	}
	bad := map[string]string{
		"":                       "empty",
		"a..b":                   "empty segment at byte 2",
		".a":                     "empty segment at byte 0",
		"a.":                     "ends with '.'",
		".":                      "empty segment at byte 0",
		"../x":                   "empty segment at byte 0",
		"a/b":                    `invalid character '/' at byte 1`,
		"a\x00":                  `invalid character '\x00' at byte 1`,
		"a\xff":                  "invalid character 0xff at byte 1",
		"*":                      `invalid character '*' at byte 0`,
		"a b":                    `invalid character ' ' at byte 1`,
		strings.Repeat("a", 250): "250 bytes, the maximum is 249",
		"dispatchers.json":       "is reserved",
		"dispatchers.json.tmp":   "is reserved",
		"paused.json":            "is reserved",
		"paused.json.tmp":        "is reserved",
	}
	for in, want := range bad {
		err := ValidateTopic(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateTopic(%q) = %v, want an error mentioning %q", in, err, want)
		}
	}
}
