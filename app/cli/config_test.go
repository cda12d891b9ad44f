package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConfig writes body to a new YAML file and returns its path.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// fieldsOf returns the whitespace-separated fields of the output line that
// starts with key followed by a space, or nil.
func fieldsOf(out, key string) []string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, key+" ") {
			return strings.Fields(line)
		}
	}
	return nil
}

func TestConfigCheckPrintsSources(t *testing.T) {
	cfg := writeConfig(t, "server:\n  port: 9090\nmmmq:\n  lineproto:\n    addr: 127.0.0.1:0\n")
	t.Setenv("MMMQ_LOGGING_LEVEL", "debug")
	t.Setenv("MMMQ_PORT", "tcp://10.0.0.1:8080") // a Service named mmmq
	t.Setenv("MMMQ_SERVER_SERVICE_HOST", "10.0.0.2")
	code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	for key, want := range map[string][]string{
		"server.port":                       {"server.port", "9090", cfg},
		"server.host":                       {"server.host", `""`, "default"},
		"server.idle-timeout":               {"server.idle-timeout", "2m0s", "default"},
		"logging.level":                     {"logging.level", `"debug"`, "MMMQ_LOGGING_LEVEL"},
		"mmmq.lineproto.addr":               {"mmmq.lineproto.addr", `"127.0.0.1:0"`, cfg}, // app's sections
		"mmmq.profiling.addr":               {"mmmq.profiling.addr", `""`, "default"},      // serve's own
		"mmmq.broker.dispatchers":           {"mmmq.broker.dispatchers", "[]", "default"},
		"mmmq.broker.segment.max-bytes":     {"mmmq.broker.segment.max-bytes", "67108864", "default"},
		"mmmq.broker.storage.on-corruption": {"mmmq.broker.storage.on-corruption", `"fail"`, "default"},
	} {
		if got := fieldsOf(out, key); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line of %s: got %q, want %q", key, got, want)
		}
	}
	for _, want := range []string{
		"file: " + cfg + "\n",
		"ignored: MMMQ_PORT (a Kubernetes service link; names no key)\n",
		"ignored: MMMQ_SERVER_SERVICE_HOST (",
		"configuration OK\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
}

// TestConfigCheckShowsInheritedRetention: a retention override's limit
// that the file leaves out is shown as inherited, one given is shown as
// its value (0 included).
func TestConfigCheckShowsInheritedRetention(t *testing.T) {
	cfg := writeConfig(t, "mmmq:\n  broker:\n    retention:\n      max-bytes: 4096\n      topics:\n        - pattern: \"age.**\"\n          max-age: 3s\n        - pattern: \"keep.**\"\n          max-bytes: 0\n")
	code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	for key, want := range map[string]string{
		"mmmq.broker.retention.topics[0].max-age":   "3s " + cfg,
		"mmmq.broker.retention.topics[0].max-bytes": "inherited:4096 default",
		"mmmq.broker.retention.topics[1].max-age":   "inherited:0s default",
		"mmmq.broker.retention.topics[1].max-bytes": "0 " + cfg,
	} {
		if got := strings.Join(fieldsOf(out, key), " "); got != key+" "+want {
			t.Errorf("line of %s: %q, want %q", key, got, key+" "+want)
		}
	}
}

// TestConfigCheckFailsAsServe: an invalid configuration exits 1 with the
// one stderr line serve prints for it, and nothing on stdout.
func TestConfigCheckFailsAsServe(t *testing.T) {
	bad := writeConfig(t, "mmmq: {broker: {segment: {max-bytes: 12}}}\n")
	code, out, errOut := captureAll(t, "config", "check", "--config", bad)
	reason := "config: mmmq.broker.segment.max-bytes: must be at least 1024; got 12\n"
	want := "mmmq config check: " + bad + ": " + reason
	if code != 1 || out != "" || errOut != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1, nothing, %q", code, out, errOut, want)
	}
	if code, _, serveErr := captureAll(t, "serve", "--config", bad); code != 1 || serveErr != "mmmq: startup failed: "+reason {
		t.Fatalf("serve: exit %d, stderr %q; config check said %q", code, serveErr, errOut)
	}

	// The same environment as serve: a service link in a real key.
	t.Setenv("MMMQ_SERVER_PORT", "tcp://10.0.0.2:8080")
	empty := writeConfig(t, "")
	code, out, errOut = captureAll(t, "config", "check", "--config", empty)
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 ||
		!strings.HasPrefix(errOut, "mmmq config check: "+empty+": config: server.port: ") ||
		!strings.Contains(errOut, "enableServiceLinks: false") {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	// A segment cache larger than this process's open-file limit allows
	// (serve refuses it when it builds the storage backend).
	t.Setenv("MMMQ_SERVER_PORT", "")
	os.Unsetenv("MMMQ_SERVER_PORT")
	t.Setenv("MMMQ_BROKER_STORAGE_MAX_OPEN_SEGMENTS", "100000000")
	code, out, errOut = captureAll(t, "config", "check", "--config", empty)
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "mmmq config check: "+empty+": mmmq.broker.storage.max-open-segments: 100000000 segments need") {
		t.Fatalf("max-open-segments over the limit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	os.Unsetenv("MMMQ_BROKER_STORAGE_MAX_OPEN_SEGMENTS")

	// No file at all (no --config, no $MMMQ_CONFIG, no configs/mmmq.yaml
	// here): the built-in defaults and the environment are what failed.
	t.Chdir(t.TempDir())
	t.Setenv("MMMQ_CONFIG", "")
	t.Setenv("MMMQ_BROKER_SEGMENT_MAX_BYTES", "12")
	code, out, errOut = captureAll(t, "config", "check")
	if code != 1 || out != "" || !strings.HasPrefix(errOut, "mmmq config check: (no file): config: mmmq.broker.segment.max-bytes: ") {
		t.Fatalf("no file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	os.Unsetenv("MMMQ_BROKER_SEGMENT_MAX_BYTES")

	// A missing explicit file.
	absent := filepath.Join(t.TempDir(), "absent.yaml")
	code, _, errOut = captureAll(t, "config", "check", "--config", absent)
	if code != 1 || !strings.HasPrefix(errOut, "mmmq config check: "+absent+": config: open ") {
		t.Fatalf("missing file: exit %d, stderr %q", code, errOut)
	}
}

func TestConfigCheckUsage(t *testing.T) {
	for _, args := range [][]string{
		{"config", "check", "--help"}, {"config", "check", "-h"}, {"config", "--help"}, {"config", "help"},
	} {
		code, out, errOut := captureAll(t, args...)
		if code != 0 || !strings.HasPrefix(out, "usage: mmmq config check [--config FILE]") || errOut != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	for _, args := range [][]string{
		{"config"}, {"config", "nope"}, {"config", "check", "--bogus"}, {"config", "check", "extra"},
		{"config", "check", "--config"},
	} {
		code, out, errOut := captureAll(t, args...)
		if code != 2 || out != "" || !strings.Contains(errOut, "usage: mmmq config check") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and usage on stderr", args, code, out, errOut)
		}
	}
}

// config check refuses a topic pattern serve would refuse, with serve's
// one-line error naming the key, instead of saying "configuration OK".
func TestConfigCheckRefusesInvalidPatterns(t *testing.T) {
	for name, body := range map[string]string{
		"mmmq.broker.dispatchers[0].patterns[0]":  "mmmq:\n  broker:\n    dispatchers:\n      - {name: d, host: \"http://localhost:8081\", patterns: [\"a..b\"]}\n",
		"mmmq.broker.retention.topics[0].pattern": "mmmq:\n  broker:\n    retention:\n      topics: [{pattern: \"a..b\", max-age: 1h}]\n",
	} {
		t.Run(name, func(t *testing.T) {
			code, out, errOut := captureAll(t, "config", "check", "--config", writeConfig(t, body))
			if code != 1 || strings.Contains(out, "configuration OK") ||
				!strings.Contains(errOut, name+`: invalid topic pattern "a..b": '..' at byte 1`) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 naming %s", code, out, errOut, name)
			}
		})
	}
}

// dispatcherConfig is a configuration file with one dispatcher "d" whose
// extra keys are extra (YAML lines indented for the entry), its data root
// in a temporary directory and the HTTP port free: serve fails or starts
// harmlessly.
func dispatcherConfig(t *testing.T, extra string) string {
	t.Helper()
	return writeConfig(t, "server: {port: 0, host: 127.0.0.1}\nmmmq:\n  broker:\n    storage: {root-dir: \""+t.TempDir()+"\"}\n"+
		"    dispatchers:\n      - name: d\n        host: \"http://localhost:8081\"\n        patterns: [\"a.*\"]\n"+extra)
}

// config check builds the configured dispatchers as serve does: a bad
// delivery setting exits 1 with serve's one line, naming the key, and
// nothing on stdout.
func TestConfigCheckBuildsDispatchers(t *testing.T) {
	for name, tc := range map[string]struct{ extra, says string }{
		"ack-mode":      {"        ack-mode: maybe\n", `mmmq.broker.dispatchers[0].ack-mode: must be "body" or "status"; got "maybe"`},
		"header":        {"        headers: {Content-Type: text/plain}\n", `mmmq.broker.dispatchers[0].headers: "Content-Type" is set by the broker`},
		"header value":  {"        headers: {X-A: \"a\\u0001\"}\n", `mmmq.broker.dispatchers[0].headers: the value of "X-A" holds control characters`},
		"secret":        {"        signing-secrets: [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\", \"whsec_dG9vc2hvcnQ=\"]\n", "mmmq.broker.dispatchers[0].signing-secrets[1]: "},
		"dead-letter":   {"        dead-letter: \"a..b\"\n", `mmmq.broker.dispatchers[0].dead-letter: topic name "a..b" has an empty segment`},
		"max-in-flight": {"        max-in-flight: 5000\n", "mmmq.broker.dispatchers[0].max-in-flight: must be 1..1024 (0 = 1); got 5000"},
		"batch":         {"        cloudevents: true\n        batch: {max-messages: 10}\n", "mmmq.broker.dispatchers[0].cloudevents: cannot be combined with batch"},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := dispatcherConfig(t, tc.extra)
			code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
			if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 ||
				!strings.HasPrefix(errOut, "mmmq config check: "+cfg+": config: mmmq.broker.dispatchers[0]") || !strings.Contains(errOut, tc.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line saying %q", code, out, errOut, tc.says)
			}
			if strings.Contains(errOut, "MfKQ9r8G") || strings.Contains(errOut, "dG9vc2hvcnQ") {
				t.Fatalf("the error shows a secret: %q", errOut)
			}
			if code, _, serveErr := captureAll(t, "serve", "--config", cfg); code != 1 ||
				serveErr != "mmmq: startup failed: "+strings.TrimPrefix(errOut, "mmmq config check: "+cfg+": ") {
				t.Fatalf("serve: exit %d, stderr %q; config check said %q", code, serveErr, errOut)
			}
		})
	}
}

// config check never prints a signing secret or a header value: the
// secrets show as their redacted form with the key's fingerprint, the
// headers by name with every value "(redacted)"; a dead-letter left out
// shows the default topic.
func TestConfigCheckRedactsSecrets(t *testing.T) {
	cfg := dispatcherConfig(t, "        signing-secrets: [\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"]\n"+
		"        signing-keys: [\"whsk_VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=\"]\n"+
		"        headers: {Authorization: \"Bearer s3cret-token\", X-Team: billing}\n")
	code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	for _, secret := range []string{"MfKQ9r8G", "VEVTVFNJR05J", "s3cret-token", "billing"} {
		if strings.Contains(out, secret) {
			t.Errorf("config check prints %q:\n%s", secret, out)
		}
	}
	for key, want := range map[string]string{
		"mmmq.broker.dispatchers[0].signing-secrets": "[\"whsec_\u2026(redacted, fingerprint f74e1720)\"] " + cfg,
		"mmmq.broker.dispatchers[0].signing-keys":    "[\"whsk_\u2026(redacted, kid 808d1060236c20d2)\"] " + cfg,
		"mmmq.broker.dispatchers[0].headers":         `{Authorization: "(redacted)", X-Team: "(redacted)"} ` + cfg,
		"mmmq.broker.dispatchers[0].dead-letter":     `"dead-letter.d" default`,
		"mmmq.broker.dispatchers[0].ack-mode":        `"body" default`,
		"mmmq.broker.dispatchers[0].start":           `"earliest" default`,
		"mmmq.broker.dispatchers[0].max-in-flight":   `1 default`,
	} {
		if line := settingLine(out, key); line != key+" "+want {
			t.Errorf("line of %s: %q, want %q", key, line, key+" "+want)
		}
	}
}

// config check reads the files serve reads at startup (token files, TLS
// certificates) and fails as serve does.
func TestConfigCheckReadsTokenAndTLSFiles(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ yaml, says string }{
		"token file": {"mmmq:\n  auth:\n    tokens:\n      - name: ops\n        token-file: " + filepath.Join(dir, "missing.token") +
			"\n        permissions: [{actions: [admin]}]\n", "mmmq.auth.tokens[0].token-file: "},
		"tls": {"server:\n  tls:\n    cert-file: " + filepath.Join(dir, "nope.crt") + "\n    key-file: " + filepath.Join(dir, "nope.key") + "\n",
			"server.tls.cert-file: "},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "mmmq.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := captureAll(t, "config", "check", "--config", path)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, "mmmq config check: "+path+": config: "+tc.says) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 saying %q", code, out, errOut, tc.says)
			}
		})
	}
}

// The JetStream credentials are redacted too; unset, they show as "".
func TestConfigCheckRedactsCredentials(t *testing.T) {
	cfg := writeConfig(t, "server: {port: 0, host: 127.0.0.1}\nmmmq:\n  broker:\n    storage: {root-dir: \""+t.TempDir()+"\"}\n"+
		"  jetstream: {user: u, password: hunter2}\n")
	code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("config check prints the password:\n%s", out)
	}
	for key, want := range map[string]string{
		"mmmq.jetstream.password": `"(redacted)" ` + cfg,
		"mmmq.jetstream.token":    `"" default`,
	} {
		if line := settingLine(out, key); line != key+" "+want {
			t.Errorf("line of %s: %q, want %q", key, line, key+" "+want)
		}
	}
}

// A value whose zero stands for another is shown as the value in effect
// (round-3 item 15: a permission without topics printed "[]" though it
// grants every topic).
func TestConfigCheckShowsEffectiveValues(t *testing.T) {
	cfg := writeConfig(t, "server: {port: 0, host: 127.0.0.1}\nmmmq:\n  broker:\n    storage: {root-dir: \""+t.TempDir()+"\"}\n"+
		"  auth:\n    tokens:\n      - {name: ops, token-sha256: "+strings.Repeat("a", 64)+", permissions: [{actions: [read]}, {actions: [consume], topics: [\"a.*\"], groups: [g]}]}\n")
	code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	for key, want := range map[string]string{
		"mmmq.auth.tokens[0].permissions[0].topics": `["**"] default`,
		"mmmq.auth.tokens[0].permissions[0].groups": `["*"] default`,
		"mmmq.auth.tokens[0].permissions[1].topics": `["a.*"] ` + cfg,
		"mmmq.auth.tokens[0].permissions[1].groups": `["g"] ` + cfg,
	} {
		if line := settingLine(out, key); line != key+" "+want {
			t.Errorf("line of %s: %q, want %q", key, line, key+" "+want)
		}
	}
}

// settingLine is config check's line of key, its fields joined by one
// space; "" when there is none.
func settingLine(out, key string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, key+" ") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return ""
}

// The tracing exporter's headers are secrets too (a collector's
// authorization): config check shows their names only.
func TestConfigCheckRedactsTracingHeaders(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tracing.yaml")
	if err := os.WriteFile(cfg, []byte("mmmq:\n  tracing:\n    exporter: otlp-http\n    headers: {authorization: \"Bearer s3cr3t-token\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := captureAll(t, "config", "check", "--config", cfg)
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q, stdout:\n%s", code, errOut, out)
	}
	if strings.Contains(out, "s3cr3t") {
		t.Errorf("config check prints the header's value:\n%s", out)
	}
	if want := `mmmq.tracing.headers {authorization: "(redacted)"} ` + cfg; settingLine(out, "mmmq.tracing.headers") != want {
		t.Errorf("line %q, want %q", settingLine(out, "mmmq.tracing.headers"), want)
	}
}
