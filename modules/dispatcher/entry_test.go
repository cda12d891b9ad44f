package dispatcher

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
)

// fullSettings sets every key of Settings to a valid value that is not its
// default; TestFullSettingsSetsEveryKey fails when a new key is left zero.
func fullSettings() Settings {
	dl := "parked.orders"
	return Settings{
		Name: "orders", Host: "https://localhost:8443", Patterns: []string{"order.**", "payment.*"},
		Path: "/in", Timeout: Duration(7 * time.Second),
		Commit: CommitSettings{Policy: Interval, Interval: Duration(3 * time.Second), MaxCount: 77},
		Start:  "latest", DeadLetter: &dl, AckMode: AckStatus, Expired: ExpiredDeadLetter,
		MaxAbnormalAttempts: 9, MaxAbnormalDuration: Duration(time.Hour), BackoffJitter: true,
		SigningSecrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
		SigningKeys:    []string{"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="},
		Headers:        map[string]string{"Authorization": "Bearer x"},
		CloudEvents:    true, MaxInFlight: 8, Ordering: OrderKey, MaxUnacked: 5000,
		RateLimit: 12.5, RateBurst: 40, BreakerFailures: 5, BreakerCooloff: Duration(2 * time.Second), AdaptiveConcurrency: AdaptiveAIMD, PauseAfter: Duration(time.Hour),
		// CloudEvents cannot be combined with batches: Batch is checked
		// on its own below.
		Batch: BatchSettings{},
		TLS:   TLSSettings{ServerName: "orders.internal", InsecureSkipVerify: true},
	}
}

// withBatch is fullSettings with batches on (and CloudEvents off, which
// cannot be combined with them).
func withBatch() Settings {
	s := fullSettings()
	s.CloudEvents = false
	s.Batch = BatchSettings{MaxMessages: 50, MaxBytes: 4096, MaxWait: Duration(20 * time.Millisecond)}
	s.Ordering, s.MaxUnacked = OrderNone, 0
	s.TLS.CAFile, s.TLS.CertFile, s.TLS.KeyFile = "", "", ""
	return s
}

// leaves calls fn with the key and value of every leaf field of v.
func leaves(v reflect.Value, prefix string, fn func(key string, f reflect.Value)) {
	for i := range v.NumField() {
		key := prefix + v.Type().Field(i).Tag.Get("koanf")
		if v.Field(i).Kind() == reflect.Struct {
			leaves(v.Field(i), key+".", fn)
			continue
		}
		fn(key, v.Field(i))
	}
}

// Every key is set by one of the two full values (so that the round trips
// below see every key), except the TLS files, which must exist.
func TestFullSettingsSetsEveryKey(t *testing.T) {
	a, b := map[string]bool{}, map[string]bool{}
	leaves(reflect.ValueOf(fullSettings()), "", func(k string, f reflect.Value) { a[k] = !f.IsZero() })
	leaves(reflect.ValueOf(withBatch()), "", func(k string, f reflect.Value) { b[k] = !f.IsZero() })
	for _, k := range SettingsKeys() {
		if !a[k] && !b[k] && k != "tls.ca-file" && k != "tls.cert-file" && k != "tls.key-file" {
			t.Errorf("key %s: set it to a valid non-default value in fullSettings or withBatch", k)
		}
	}
}

// Each key of Settings survives FromSettings and (*Dispatcher).Settings:
// a key that FromSettings forgets to apply, or Settings forgets to read
// back, comes back as its zero value and fails here by name.
func TestSettingsRoundTripEveryKey(t *testing.T) {
	for _, in := range []Settings{fullSettings(), withBatch()} {
		d, err := FromSettings(in, "test", SourceAPI)
		if err != nil {
			t.Fatal(err)
		}
		out := d.Settings()
		if len(d.SigningSecrets()) != len(in.SigningSecrets) {
			t.Errorf("signing-secrets: %d secrets built, want %d", len(d.SigningSecrets()), len(in.SigningSecrets))
		}
		if len(d.SigningKeys()) != len(in.SigningKeys) {
			t.Errorf("signing-keys: %d keys built, want %d", len(d.SigningKeys()), len(in.SigningKeys))
		}
		out.SigningSecrets = in.SigningSecrets // a Secret never gives its key back
		out.SigningKeys = in.SigningKeys       // nor a SigningKey
		got := map[string]any{}
		leaves(reflect.ValueOf(out), "", func(k string, f reflect.Value) { got[k] = f.Interface() })
		leaves(reflect.ValueOf(in), "", func(k string, f reflect.Value) {
			if !reflect.DeepEqual(got[k], f.Interface()) {
				t.Errorf("%s: set %v, the built dispatcher has %v", k, f.Interface(), got[k])
			}
		})
	}
}

// Every key of Settings is read from a YAML entry of a list section of
// Settings (as mmmq.broker.dispatchers is, in plugins/configdispatchers):
// the JSON a Settings value writes, which is YAML too, loads back as the
// same value, durations as strings included.
func TestSettingsYAMLEveryKey(t *testing.T) {
	sec := config.NewListSection[[]Settings]("broker.dispatchers", "a dispatcher", DefaultSettings, nil)
	for _, in := range []Settings{fullSettings(), withBatch()} {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := configtest.Load(t, "mmmq:\n  broker:\n    dispatchers:\n      - "+string(b)+"\n", nil, sec, ConfigSection)
		if err != nil {
			t.Fatal(err)
		}
		got := config.SectionValue(cfg, sec)
		if len(got) != 1 || !reflect.DeepEqual(got[0], in) {
			t.Errorf("from YAML %s:\n got %+v\nwant %+v", b, got, in)
		}
	}
}

// The JSON names (API, dispatchers.json) are the YAML keys, every key is
// written when set, and what is written reads back the same.
func TestSettingsJSONNamesAreTheKeys(t *testing.T) {
	var walk func(t reflect.Type)
	walk = func(typ reflect.Type) {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name != f.Tag.Get("koanf") {
				t.Errorf("%s.%s: json name %q, koanf key %q", typ, f.Name, name, f.Tag.Get("koanf"))
			}
			if f.Type.Kind() == reflect.Struct {
				walk(f.Type)
			}
		}
	}
	walk(reflect.TypeFor[Settings]())
	for _, in := range []Settings{fullSettings(), withBatch()} {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		var flat map[string]any
		_ = json.Unmarshal(b, &flat)
		leaves(reflect.ValueOf(in), "", func(k string, f reflect.Value) {
			if f.IsZero() {
				return
			}
			var v any = flat
			for _, seg := range strings.Split(k, ".") {
				m, _ := v.(map[string]any)
				v = m[seg]
			}
			if v == nil {
				t.Errorf("%s is set but not written in %s", k, b)
			}
		})
		var back Settings
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, in) {
			t.Errorf("JSON round trip: %v\n got %+v\nwant %+v", err, back, in)
		}
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := json.Unmarshal([]byte(`"1m30s"`), &d); err != nil || time.Duration(d) != 90*time.Second {
		t.Fatalf("%v %v", d, err)
	}
	for _, bad := range []string{`30`, `"-1s"`, `"soon"`} {
		if err := json.Unmarshal([]byte(bad), &d); err == nil || !strings.Contains(err.Error(), "duration") {
			t.Errorf("%s: %v, want a duration error", bad, err)
		}
	}
	if b, _ := json.Marshal(Duration(50 * time.Millisecond)); string(b) != `"50ms"` {
		t.Errorf("marshal: %s", b)
	}
}

// A host with user info is refused without repeating the password, by the
// Go API (ParseHost) and by the data forms (Validate), which share one
// host rule; the data forms also refuse the trailing "/" ParseHost takes.
func TestHostRuleIsShared(t *testing.T) {
	const h = "http://u:s3cret@localhost:8081"
	if _, err := ParseHost(h); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "user info") {
		t.Errorf("ParseHost: %v", err)
	}
	s := Settings{Name: "d", Host: h, Patterns: []string{"a"}}
	if err := s.Validate("k"); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "k.host: ") {
		t.Errorf("Validate: %v", err)
	}
	if _, err := ParseHost("http://localhost:8081/"); err != nil {
		t.Errorf("ParseHost with a trailing /: %v", err)
	}
	s.Host = "http://localhost:8081/"
	if err := s.Validate("k"); err == nil || !strings.Contains(err.Error(), `path "/"`) {
		t.Errorf("Validate with a trailing /: %v", err)
	}
}

// A refused signing key is named by its entry in every path (Validate of a
// configuration entry, FromSettings) and its text is never echoed.
func TestSigningKeysRefused(t *testing.T) {
	const good = "whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk="
	const leaky = "whsk_bGVha3lsZWFreWxlYWt5bGVha3k=" // 20 bytes: too short
	for _, c := range []struct {
		keys []string
		want string
	}{
		{[]string{good, leaky}, "signing-keys[1]: webhooks: invalid key: key is 20 bytes"},
		{[]string{good, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, "signing-keys[1]: webhooks: invalid key: does not start with"},
		{[]string{good, good}, "signing-keys[1]: the same key is given twice"},
	} {
		s := Settings{Name: "d", Host: "http://localhost:1", Patterns: []string{"a"}, SigningKeys: c.keys}
		for name, err := range map[string]error{
			"Validate":     s.Validate("mmmq.broker.dispatchers[3]"),
			"FromSettings": func() error { _, err := FromSettings(s, "mmmq.broker.dispatchers[3]", SourceAPI); return err }(),
		} {
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "mmmq.broker.dispatchers[3]") {
				t.Errorf("%s(%v) = %v, want %q", name, c.keys, err, c.want)
				continue
			}
			for _, k := range c.keys {
				if strings.Contains(err.Error(), k[5:15]) {
					t.Errorf("%s error echoes a key: %v", name, err)
				}
			}
		}
	}
}
