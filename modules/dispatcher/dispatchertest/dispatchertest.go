// Package dispatchertest holds test data about dispatcher settings shared
// by the packages that read them (the admin API, the configuration file).
package dispatchertest

// BadSetting is one bad value of a dispatcher setting: Field is the
// setting's name as errors must give it ("pause-after",
// "commit.interval"); Value is the value, as JSON (which is YAML too).
type BadSetting struct{ Field, Value string }

// BadSettings is a bad value of every dispatcher setting (a wrong type, a
// bad string, out of range; several for the durations), each of which
// must be refused with an error naming Field.
var BadSettings = []BadSetting{
	{"timeout", `"-1s"`}, {"timeout", `"soon"`}, {"timeout", `5`},
	{"path", `"in"`}, {"start", `"now"`},
	{"commit.policy", `"sometimes"`}, {"commit.interval", `"-1s"`}, {"commit.interval", `"soon"`}, {"commit.interval", `5`},
	{"commit.max-count", `-1`}, {"commit.max-count", `"x"`},
	{"dead-letter", `"a..b"`}, {"dead-letter", `7`},
	{"expired", `"drop"`}, {"expired", `5`},
	{"ack-mode", `"maybe"`}, {"ack-mode", `1`},
	{"max-abnormal-attempts", `-1`}, {"max-abnormal-attempts", `"x"`},
	{"max-abnormal-duration", `"-1s"`}, {"max-abnormal-duration", `"soon"`}, {"max-abnormal-duration", `5`},
	{"backoff-jitter", `"yes"`}, {"cloudevents", `"yes"`},
	{"signing-secrets", `["nope"]`}, {"signing-keys", `["nope"]`}, {"signing-keys", `["whsk_bGVha3lsZWFreWxlYWt5bGVha3k="]`}, {"headers", `{"X-A":1}`},
	{"max-in-flight", `-1`}, {"max-in-flight", `"4"`},
	{"batch.max-messages", `-1`}, {"batch.max-bytes", `-1`}, {"batch.max-wait", `"-1s"`}, {"batch.max-wait", `"soon"`}, {"batch.max-wait", `5`},
	{"ordering", `"random"`}, {"ordering", `1`},
	{"max-unacked", `-1`}, {"max-unacked", `"x"`},
	{"rate-limit", `-1`}, {"rate-limit", `"fast"`}, {"rate-limit", `1e9`},
	{"rate-burst", `-1`}, {"rate-burst", `"x"`},
	{"breaker-failures", `-1`}, {"breaker-failures", `"x"`}, {"breaker-failures", `2000000`},
	{"breaker-cooloff", `"-1s"`}, {"breaker-cooloff", `"soon"`}, {"breaker-cooloff", `5`},
	{"adaptive-concurrency", `"fast"`}, {"adaptive-concurrency", `1`},
	{"pause-after", `"-1s"`}, {"pause-after", `"soon"`}, {"pause-after", `5`},
	{"tls.ca-file", `7`},
}
