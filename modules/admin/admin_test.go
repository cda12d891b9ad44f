package admin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// TestDecodeSpec: the body of a create or replace is checked field by
// field, and the errors say which field (400 BAD_REQUEST).
func TestDecodeSpec(t *testing.T) {
	s, err := decodeSpec([]byte(`{"name":"d","host":"http://h:1","patterns":["a.*"],"timeout":"5s","commit":{"policy":"interval","interval":"2s","max-count":10},"paused":true}`))
	if err != nil || s.Timeout != Duration(5*time.Second) || s.Commit.Interval != Duration(2*time.Second) || !s.Paused {
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
		{Spec{Host: "http://h:1", Patterns: []string{"a"}}, `"name" is required`},
		{Spec{Name: "d", Host: "http://h:1"}, `"patterns" needs at least one`},
		{Spec{Name: "d", Host: "http://h", Patterns: []string{"a"}}, "host"},
		{Spec{Name: "d", Host: "http://h:1", Patterns: []string{"a", "b..c"}}, "patterns[1]"},
		{Spec{Name: "../x", Host: "http://h:1", Patterns: []string{"a"}}, "name"},
	} {
		if _, err := tc.s.build(config.Default().MMMQ.Broker.Dispatch); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v, want it to say %q", tc.s, err, tc.says)
		}
	}
}

// TestSpecRoundTrip: what the API shows of a dispatcher builds the same
// dispatcher again (dispatchers.json is written from it).
func TestSpecRoundTrip(t *testing.T) {
	defaults := config.Default().MMMQ.Broker.Dispatch
	in := Spec{Name: "d", Host: "https://h:8443", Patterns: []string{"a.**", "b.*"}, Path: "/in", Timeout: Duration(3 * time.Second),
		Commit: &CommitSpec{Policy: "interval", Interval: Duration(time.Second), MaxCount: 50}}
	d, err := in.build(defaults)
	if err != nil {
		t.Fatal(err)
	}
	out := specOf(d, true)
	d2, err := out.build(defaults)
	if err != nil || d2.String() != d.String() || d2.CommitPolicy() != d.CommitPolicy() || !out.Paused {
		t.Fatalf("round trip: %+v -> %v, %v", out, d2, err)
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
	specs := []Spec{{Name: "a", Host: "http://h:1", Patterns: []string{"x"}, Paused: true}}
	if err := s.Save(specs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load()
	if err != nil || len(got) != 1 || got[0].Name != "a" || !got[0].Paused {
		t.Fatalf("load: %+v %v", got, err)
	}
	fi, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v, want 0600", fi.Mode(), err)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName+".tmp")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
	for content, says := range map[string]string{
		`{"version":1,"dispatchers":[`: "is not valid",
		`{"version":2}`:                "version 2, want 1",
	} {
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
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
	for _, ok := range []string{`"earliest"`, `"latest"`, `0`, `17`, `{"timestamp":1767225600000}`} {
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
}
