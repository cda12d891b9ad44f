package admin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/webhooks"
)

// TestDecodeSpec: the body of a create or replace is checked field by
// field, and the errors say which field (400 BAD_REQUEST).
func TestDecodeSpec(t *testing.T) {
	// What GET answers (source, deadLetterTopic, topics) may be sent back.
	s, err := decodeSpec([]byte(`{"name":"d","host":"http://h:1","patterns":["a.*"],"timeout":"5s","commit":{"policy":"interval","interval":"2s","max-count":10},"paused":true,"source":"api","deadLetterTopic":"dead-letter.d","topics":[{"topic":"a.b"}]}`))
	if err != nil || s.Timeout != dispatcher.Duration(5*time.Second) || s.Commit.Interval != dispatcher.Duration(2*time.Second) || !s.Paused {
		t.Fatalf("%+v %v", s, err)
	}
	for body, says := range map[string]string{
		`{"name":"d","colour":1}`:       `unknown field "colour"`,
		`{"name":5}`:                    `field "name" must be a JSON string`,
		`{"patterns":"a.*"}`:            `field "patterns" must be a JSON array`,
		`{"timeout":"soon"}`:            `must be a duration >= 0 such as "30s"; got "soon"`,
		`{"timeout":"-1s"}`:             `got "-1s"`,
		`{"name":"d"} {"name":"e"}`:     "data after the JSON object",
		`not json`:                      "invalid dispatcher",
		``:                              "the body is empty: send a JSON object",
		`{"commit":{"every":"always"}}`: `unknown field "every"`,
		`{"name":"d3","name":"d4"}`:     `field "name" is given more than once`,
		`{"commit":{"interval":"1s","interval":"2s"}}`: `field "commit.interval" is given more than once`,
		`{"dead-letter":7}`:                            `field "dead-letter" must be a JSON string`,
		`{"signing-secrets":"whsec_x"}`:                `field "signing-secrets" must be a JSON array`,
		`{"headers":{"X-A":1}}`:                        `field "headers" must be a JSON object of strings`,
		`{"headers":["X-A"]}`:                          `field "headers" must be a JSON object of strings`,
		`{"max-in-flight":"4"}`:                        `field "max-in-flight" must be a JSON number`,
		`{"max-abnormal-duration":"1"}`:                `must be a duration >= 0 such as "30s"; got "1"`,
		`{"backoff-jitter":"yes"}`:                     `field "backoff-jitter" must be a JSON boolean`,
		`{"batch":{"max-wait":"-1s"}}`:                 `got "-1s"`,
		`{"batch":{"size":10}}`:                        `unknown field "size"`,
		`{"max-abnormal-duration":"-5s"}`:              `field "max-abnormal-duration" must be a duration`,
		`{"batch":{"max-wait":"x"}}`:                   `field "batch.max-wait" must be a duration`,
		`{"commit":{"interval":5}}`:                    `field "commit.interval" must be a duration`,
		`{"timeout":true}`:                             `field "timeout" must be a duration`,
	} {
		_, err := decodeSpec([]byte(body))
		if err == nil || !strings.Contains(err.Error(), says) || contract.Classify(err).Status != 400 {
			t.Errorf("%s: %v, want a 400 saying %q", body, err, says)
		}
	}
	for _, tc := range []struct {
		s    Spec
		says string
	}{
		{Spec{Settings: dispatcher.Settings{Host: "http://h:1", Patterns: []string{"a"}}}, `invalid dispatcher: name: is required`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1"}}, `invalid dispatcher: patterns: must list at least one topic pattern`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h", Patterns: []string{"a"}}}, "host"},
		// The rules of a YAML entry, the same words, named by the field.
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1/", Patterns: []string{"a"}}}, `invalid dispatcher: host: must be scheme://address:port with scheme http or https and no path`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, Start: "now"}}, `invalid dispatcher: start: must be "earliest" or "latest"; got "now"`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, TLS: dispatcher.TLSSettings{CAFile: "/ca"}}}, `invalid dispatcher: tls: applies to an https host only`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a", "b..c"}}}, "patterns[1]"},
		{Spec{Settings: dispatcher.Settings{Name: "../x", Host: "http://h:1", Patterns: []string{"a"}}}, "name"},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, DeadLetter: ptr("a..b")}}, "dead-letter"},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, AckMode: "maybe"}}, `invalid dispatcher: ack-mode: must be "body" or "status"; got "maybe"`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, MaxAbnormalAttempts: -1}}, "max-abnormal-attempts"},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, SigningSecrets: []string{testSecret, "whsec_short"}}}, "signing-secrets[1]"},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, Headers: map[string]string{"Content-Type": "x"}}}, `headers: "Content-Type"`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, Headers: map[string]string{"bad name": "x"}}}, `headers: "bad name"`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, Headers: map[string]string{"X-A": "a\nb"}}}, `headers: the value of "X-A"`},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, MaxInFlight: 2000}}, "invalid dispatcher: max-in-flight: must be 1..1024 (0 = 1); got 2000"},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, Batch: dispatcher.BatchSettings{MaxMessages: 20000}}}, "batch"},
		{Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, Batch: dispatcher.BatchSettings{MaxMessages: 2}, CloudEvents: true}}, "cloudevents"},
	} {
		if _, err := tc.s.build(dispatcher.ConfigSection.Default()); err == nil || !strings.Contains(err.Error(), tc.says) ||
			contract.Classify(err).Status != 400 {
			t.Errorf("%+v: %v, want a 400 saying %q", tc.s, err, tc.says)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// testSecret is a valid signing secret (24 bytes).
const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// testKey is the Standard Webhooks v1a test key (a 32-byte seed).
const testKey = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="

// TestSpecRoundTrip: what dispatchers.json keeps of a dispatcher
// (storedSpecOf) builds the same dispatcher again, every delivery setting
// included; what the API shows (specOf) is the same but for the secrets
// and header values, which it redacts.
func TestSpecRoundTrip(t *testing.T) {
	defaults := dispatcher.ConfigSection.Default()
	in := Spec{Settings: dispatcher.Settings{Name: "d", Host: "https://h:8443", Patterns: []string{"a.**", "b.*"}, Path: "/in", Timeout: dispatcher.Duration(3 * time.Second),
		Commit: dispatcher.CommitSettings{Policy: dispatcher.Interval, Interval: dispatcher.Duration(time.Second), MaxCount: 50}, Start: "latest",
		DeadLetter: ptr("dl.d"), AckMode: "status", MaxAbnormalAttempts: 5, MaxAbnormalDuration: dispatcher.Duration(time.Minute),
		BackoffJitter: true, SigningSecrets: []string{testSecret}, SigningKeys: []string{testKey}, Headers: map[string]string{"Authorization": "Bearer t"},
		MaxInFlight: 4, Batch: dispatcher.BatchSettings{MaxMessages: 10, MaxWait: dispatcher.Duration(50 * time.Millisecond)}}}
	d, err := in.build(defaults)
	if err != nil {
		t.Fatal(err)
	}
	same := func(d2 *dispatcher.Dispatcher) bool {
		return d2.String() == d.String() && d2.CommitPolicy() == d.CommitPolicy() && d2.Start() == d.Start() &&
			d2.DeadLetter() == "dl.d" && d2.AckMode() == dispatcher.AckStatus && d2.AbnormalLimit() == d.AbnormalLimit() &&
			d2.BackoffJitter() && d2.MaxInFlight() == 4 && d2.Batch() == d.Batch() &&
			fmt.Sprint(d2.SigningSecrets()) == fmt.Sprint(d.SigningSecrets()) && d2.Headers()["Authorization"] == "Bearer t" &&
			len(d2.SigningKeys()) == 1 && d2.SigningKeys()[0].KeyID() == d.SigningKeys()[0].KeyID()
	}
	stored := storedSpecOf(d, true, serializedOf(in))
	d2, err := stored.build(defaults)
	if err != nil || !same(d2) || !stored.Paused || stored.Batch.MaxBytes != dispatcher.DefaultBatchMaxBytes {
		t.Fatalf("round trip: %+v -> %v, %v", stored, d2, err)
	}
	shown := specOf(d, true)
	sec, _ := webhooks.ParseSecret(testSecret)
	if len(shown.SigningSecrets) != 1 || shown.SigningSecrets[0] != sec.String() || !strings.Contains(shown.SigningSecrets[0], "fingerprint "+sec.Fingerprint()) ||
		!strings.HasPrefix(shown.SigningSecrets[0], webhooks.SecretPrefix+redactedSecretMark) || shown.Headers["Authorization"] != RedactedValue {
		t.Fatalf("shown: %+v", shown)
	}
	key, _ := webhooks.ParseSigningKey(testKey)
	if len(shown.SigningKeys) != 1 || shown.SigningKeys[0] != "whsk_\u2026(redacted, kid "+key.KeyID()+")" {
		t.Fatalf("shown keys: %q", shown.SigningKeys)
	}
	b, _ := json.Marshal(shown)
	if strings.Contains(string(b), strings.TrimPrefix(testSecret, webhooks.SecretPrefix)) || strings.Contains(string(b), "Bearer") ||
		strings.Contains(string(b), strings.TrimPrefix(testKey, webhooks.SigningKeyPrefix)[:12]) {
		t.Fatalf("specOf shows a secret: %s", b)
	}
	if d.Headers()["Authorization"] != "Bearer t" {
		t.Fatal("specOf changed the dispatcher's headers")
	}
	// The defaults are shown as they apply: the dead-letter topic by the
	// name, ack-mode body, one push at a time, no batch.
	plain, err := Spec{Settings: dispatcher.Settings{Name: "p", Host: "http://h:1", Patterns: []string{"a"}}}.build(defaults)
	if err != nil {
		t.Fatal(err)
	}
	ps := specOf(plain, false)
	if ps.DeadLetter == nil || *ps.DeadLetter != "dead-letter.p" || ps.AckMode != "body" || ps.MaxInFlight != 1 || ps.Batch != (dispatcher.BatchSettings{}) ||
		ps.SigningSecrets != nil || ps.Headers != nil {
		t.Fatalf("defaults shown: %+v", ps)
	}
	off, err := Spec{Settings: dispatcher.Settings{Name: "p", Host: "http://h:1", Patterns: []string{"a"}, DeadLetter: ptr("")}}.build(defaults)
	if err != nil || *specOf(off, false).DeadLetter != "" {
		t.Fatalf("dead letters off: %v", err)
	}
}

// TestResolveRedacted: a PUT that sends back what GET showed keeps the
// secrets and header values it stands for, finds a header whatever the
// case of its name, takes new values as given, and refuses (400 naming the
// field) a redacted form that stands for nothing, and any in a create.
func TestResolveRedacted(t *testing.T) {
	defaults := dispatcher.ConfigSection.Default()
	other, _ := webhooks.NewSecret()
	otherKey, _ := webhooks.NewSigningKey()
	cur, err := Spec{Settings: dispatcher.Settings{Name: "d", Host: "http://h:1", Patterns: []string{"a"}, SigningSecrets: []string{other, testSecret},
		SigningKeys: []string{testKey, otherKey}, Headers: map[string]string{"Authorization": "Bearer t", "X-A": "a"}}}.build(defaults)
	if err != nil {
		t.Fatal(err)
	}
	secrets := serialized{secrets: []string{other, testSecret}, keys: []string{testKey, otherKey}}
	shown := specOf(cur, false)
	fresh, _ := webhooks.NewSecret()
	freshKey, _ := webhooks.NewSigningKey()
	s := shown
	s.SigningSecrets = []string{shown.SigningSecrets[1], fresh}
	s.SigningKeys = []string{freshKey, shown.SigningKeys[1]}
	s.Headers = map[string]string{"authorization": RedactedValue, "X-A": "new", "X-B": "b"}
	if err := resolveRedacted(&s, cur, secrets); err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.SigningSecrets, " ") != testSecret+" "+fresh || strings.Join(s.SigningKeys, " ") != freshKey+" "+otherKey ||
		fmt.Sprint(s.Headers) != fmt.Sprint(map[string]string{"authorization": "Bearer t", "X-A": "new", "X-B": "b"}) {
		t.Fatalf("resolved: %v %v", s.SigningSecrets, s.Headers)
	}
	if shown.Headers["X-A"] != RedactedValue || shown.SigningSecrets[1] == testSecret {
		t.Fatal("resolveRedacted changed the spec it was given a copy of")
	}
	unknown, _ := webhooks.ParseSecret(fresh)
	unknownKey, _ := webhooks.ParseSigningKey(freshKey)
	for _, tc := range []struct {
		s    Spec
		cur  *dispatcher.Dispatcher
		says string
	}{
		{Spec{Settings: dispatcher.Settings{SigningSecrets: []string{testSecret, unknown.String()}}}, cur, "signing-secrets[1]: "},
		{Spec{Settings: dispatcher.Settings{Headers: map[string]string{"X-C": RedactedValue}}}, cur, `headers: the value of "X-C" is "(redacted)"`},
		{Spec{Settings: dispatcher.Settings{SigningSecrets: []string{shown.SigningSecrets[0]}}}, nil, "signing-secrets[0]: "},
		{Spec{Settings: dispatcher.Settings{SigningKeys: []string{testKey, unknownKey.String()}}}, cur, "signing-keys[1]: "},
		{Spec{Settings: dispatcher.Settings{SigningKeys: []string{shown.SigningKeys[0]}}}, nil, "signing-keys[0]: "},
		{Spec{Settings: dispatcher.Settings{Headers: map[string]string{"X-A": RedactedValue}}}, nil, `headers: the value of "X-A"`},
	} {
		err := resolveRedacted(&tc.s, tc.cur, secrets)
		if err == nil || !strings.Contains(err.Error(), tc.says) || contract.Classify(err).Status != 400 {
			t.Errorf("%+v: %v; want a 400 saying %q", tc.s, err, tc.says)
		}
	}
}

// TestParseRedrive: a redrive body is empty or {"from","to"}, each an
// integer >= 0 when present (-1 stands for one left out).
func TestParseRedrive(t *testing.T) {
	for body, want := range map[string][2]int64{
		``: {-1, -1}, " \n": {-1, -1}, `{}`: {-1, -1}, `{"from":3}`: {3, -1}, `{"to":7}`: {-1, 7}, ` {"from":0, "to":9} `: {0, 9},
	} {
		from, to, err := dispatcher.ParseRedrive([]byte(body))
		if err != nil || from != want[0] || to != want[1] {
			t.Errorf("%q: %d %d %v; want %v", body, from, to, err, want)
		}
	}
	for body, says := range map[string]string{
		`{"from":-1}`: `"from"`, `{"to":1e3}`: `"to"`, `{"to":true}`: `"to"`, `{"to":null}`: `"to"`, `{"from":1,"x":2}`: `unknown field "x"`,
		`"all"`: "JSON object", `{"from":1`: "JSON object", `{}{}`: "JSON object", `{"from":99999999999999999999}`: `"from"`,
		`{"from":1,"from":0}`: `field "from" is given more than once`,
	} {
		_, _, err := dispatcher.ParseRedrive([]byte(body))
		if err == nil || !strings.Contains(err.Error(), says) || contract.Classify(err).Status != 400 {
			t.Errorf("%s: %v; want a 400 saying %s", body, err, says)
		}
	}
	// "rate" is a dispatcher's redrive's only (a group's refuses it).
	if _, _, err := dispatcher.ParseRedrive([]byte(`{"rate":5}`)); err == nil || !strings.Contains(err.Error(), `unknown field "rate"`) {
		t.Errorf(`ParseRedrive {"rate":5}: %v; want unknown field "rate"`, err)
	}
	for body, want := range map[string]dispatcher.RedriveParams{
		``: {From: -1, To: -1}, `{"rate":50}`: {From: -1, To: -1, Rate: 50}, `{"from":2,"rate":0.5}`: {From: 2, To: -1, Rate: 0.5},
		`{"rate":null}`: {From: -1, To: -1}, `{"rate":1000000}`: {From: -1, To: -1, Rate: 1000000},
	} {
		if got, err := dispatcher.ParseRedriveAt([]byte(body)); err != nil || got != want {
			t.Errorf("ParseRedriveAt %s: %+v %v; want %+v", body, got, err, want)
		}
	}
	for _, body := range []string{`{"rate":0}`, `{"rate":-1}`, `{"rate":1000000.5}`, `{"rate":"1"}`, `{"rate":{}}`} {
		if _, err := dispatcher.ParseRedriveAt([]byte(body)); err == nil || !strings.Contains(err.Error(), `"rate"`) || contract.Classify(err).Status != 400 {
			t.Errorf("ParseRedriveAt %s: %v; want a 400 naming \"rate\"", body, err)
		}
	}
}

// TestAllowedHosts: host patterns match the address or address:port; an
// empty list allows any host.
func TestAllowedHosts(t *testing.T) {
	h := func(s string) dispatcher.Host {
		x, err := dispatcher.ParseHost(s)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	a := &Admin{opts: Options{AllowedHosts: []string{"*.svc.cluster.local", "10.0.0.*", "billing:8081"}}}
	for url, want := range map[string]bool{
		"http://orders.svc.cluster.local:80": true,
		"http://10.0.0.7:9000":               true,
		"http://billing:8081":                true,
		"http://billing:8082":                false,
		"http://169.254.169.254:80":          false,
		"http://localhost:8081":              false,
		"http://10.0.0.1.attacker.com:80":    false, // "*" stays within one label
		"http://a.b.svc.cluster.local:80":    false, // one label before .svc.cluster.local
		"http://[::1]:8081":                  false,
	} {
		if got := a.hostAllowed(h(url)); got != want {
			t.Errorf("%s: allowed %v, want %v", url, got, want)
		}
	}
	if !(&Admin{}).hostAllowed(h("http://anything:1")) {
		t.Error("no allowed-hosts must allow any host")
	}
}

// TestStore: Save writes a file Load reads back, with mode 0600 on a real
// filesystem; no file is no dispatchers; a garbled or unknown-version file
// is an error naming the file.
func TestStore(t *testing.T) {
	dir := t.TempDir()
	s := NewStore(vfs.OS{}, dir)
	if got, err := s.Load(); err != nil || got != nil {
		t.Fatalf("no file: %v %v", got, err)
	}
	specs := []Spec{{Settings: dispatcher.Settings{Name: "a", Host: "http://h:1", Patterns: []string{"x"}}, Paused: true}}
	if err := s.Save(specs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load()
	if err != nil || len(got) != 1 || got[0].Name != "a" || !got[0].Paused {
		t.Fatalf("load: %+v %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(dir, contract.DispatchersFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, contract.DispatchersFile+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	for content, says := range map[string]string{
		`{"version":1,"dispatchers":[`: "is not valid",
		`{"version":2}`:                "version 2, want 1",
	} {
		if err := os.WriteFile(filepath.Join(dir, contract.DispatchersFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), s.Path()) {
			t.Errorf("%s: %v, want an error naming the file and saying %q", content, err, says)
		}
	}
}

// TestParseTarget: a seek's "to" is "earliest", "latest", an offset >= 0
// or {"timestamp": <unix ms>}; anything else, null included (which would
// otherwise decode as offset 0 and rewind every topic), is a 400 naming
// "to".
func TestParseTarget(t *testing.T) {
	for _, ok := range []string{`"earliest"`, `"latest"`, `0`, `17`, `{"timestamp":1767225600000}`, `{"timestamp":0}`} {
		if _, err := parseTarget([]byte(ok)); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{``, `null`, ` null `, `"yesterday"`, `-1`, `1.5`, `"0"`, `{}`, `{"timestamp":null}`, `{"timestamp":1,"x":2}`, `[]`, `true`} {
		_, err := parseTarget([]byte(bad))
		if err == nil || contract.Classify(err).Status != 400 || !strings.Contains(err.Error(), `"to"`) {
			t.Errorf("%q: %v, want a 400 naming \"to\"", bad, err)
		}
	}
	// A timestamp in Unix seconds (or negative) is refused, not read as a
	// time in 1970 (which would seek to the start of every topic).
	for bad, want := range map[string]string{
		`{"timestamp":1767225600}`: "timestamp is in Unix milliseconds; 1767225600 looks like seconds (1767225600*1000 would be 2026-01-01T00:00:00.000Z)",
		`{"timestamp":-5}`:         "timestamp must be an integer >= 0; got -5",
	} {
		_, err := parseTarget([]byte(bad))
		if err == nil || contract.Classify(err).Status != 400 || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want a 400 saying %q", bad, err, want)
		}
	}
}

// TestStoreRefusesADirectory: a directory where dispatchers.json belongs
// (a topic of that name from before the name was reserved) is an error
// that says what it is and what to do, not "is a directory".
func TestStoreRefusesADirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, contract.DispatchersFile, "checkpoints"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := NewStore(vfs.OS{}, dir).Load()
	if err == nil || !strings.Contains(err.Error(), "is a directory (1 entries), not the dispatchers file") || !strings.Contains(err.Error(), "Move it out of the data root") {
		t.Fatalf("Load over a directory: %v", err)
	}
}

// mmmq.admin.allowed-hosts refuses entries that could never match.
func TestAllowedHostsChecked(t *testing.T) {
	for _, ok := range []string{"*.svc.cluster.local", "10.0.0.*", "billing:8081", "billing:*", "::1", "[::1]:8081"} {
		if err := validateConfig(&Config{AllowedHosts: []string{ok}}); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"http://x:80/", "x/y", "a..b", "", "x:0", "x:http", "[::1]", "[nope]:1"} {
		err := validateConfig(&Config{AllowedHosts: []string{"ok", bad}})
		if err == nil || !strings.Contains(err.Error(), "config: mmmq.admin.allowed-hosts[1]: must be a host pattern") {
			t.Errorf("%q: %v, want the entry named", bad, err)
		}
	}
}

// mmmq.webhooks.public-keys-open defaults to false, reads true, and a value
// that is not a boolean or an unknown key is refused naming the key.
func TestWebhooksSection(t *testing.T) {
	cfg, err := configtest.Load(t, "", nil, WebhooksSection)
	if err != nil || config.SectionValue(cfg, WebhooksSection).PublicKeysOpen {
		t.Fatalf("default: %+v, %v", config.SectionValue(cfg, WebhooksSection), err)
	}
	cfg, err = configtest.Load(t, "mmmq:\n  webhooks:\n    public-keys-open: true\n", nil, WebhooksSection)
	if err != nil || !config.SectionValue(cfg, WebhooksSection).PublicKeysOpen {
		t.Fatalf("true: %v", err)
	}
	for yaml, says := range map[string]string{
		"mmmq:\n  webhooks:\n    public-keys-open: maybe\n": "mmmq.webhooks.public-keys-open",
		"mmmq:\n  webhooks:\n    public-keys-opn: true\n":   "mmmq.webhooks.public-keys-opn",
	} {
		if _, err := configtest.Load(t, yaml, nil, WebhooksSection); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want an error naming %s", yaml, err, says)
		}
	}
}
