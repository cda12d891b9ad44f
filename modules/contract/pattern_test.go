package contract

import (
	"strings"
	"testing"
)

func TestValidatePattern(t *testing.T) {
	for _, ok := range []string{"a", "order.*", "order.**", "**", "*", "a.**.b", "A-z_0.9", strings.Repeat("a", MaxTopicBytes)} {
		if err := ValidatePattern(ok); err != nil {
			t.Errorf("ValidatePattern(%q) = %v, want nil", ok, err)
		}
	}
	for in, want := range map[string]string{
		"":                                   "empty",
		"a..b":                               "'..' at byte 1",
		".":                                  "leading '.'",
		"a.":                                 "trailing '.'",
		"a.b*":                               "must be a whole segment",
		"***":                                "must be a whole segment",
		"/etc":                               "byte 0",
		"a b":                                "byte 1",
		strings.Repeat("a", MaxTopicBytes+1): "at most 249",
	} {
		err := ValidatePattern(in)
		if err == nil || !strings.HasPrefix(err.Error(), "invalid topic pattern ") || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidatePattern(%.20q) = %v, want an invalid topic pattern error mentioning %q", in, err, want)
		}
	}
}
