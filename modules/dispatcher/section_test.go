package dispatcher

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
)

func writeYAML(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmmq.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// loadDispatch loads body and env with this package's section only.
func loadDispatch(t *testing.T, body string, env ...string) (*config.Config, error) {
	t.Helper()
	return config.Load(config.LoadOptions{Path: writeYAML(t, body), PathExplicit: true,
		Environ: append([]string{}, env...), Sections: []config.Section{ConfigSection}})
}

// The section mmmq.broker.dispatch: file and environment (the one rule,
// MMMQ_BROKER_DISPATCH_<KEY>), the environment winning.
func TestConfigSectionFileAndEnv(t *testing.T) {
	cfg, err := loadDispatch(t, `
mmmq:
  broker:
    dispatch:
      timeout: 5s
      path: /in
      backoff-max: 2m
`, "MMMQ_BROKER_DISPATCH_BACKOFF_MAX=90s", "MMMQ_BROKER_DISPATCH_MAX_RESENDS=0")
	if err != nil {
		t.Fatal(err)
	}
	want := ConfigSection.Default()
	want.Timeout, want.Path, want.BackoffMax, want.MaxResends = 5*time.Second, "/in", 90*time.Second, 0
	if got := config.SectionValue(cfg, ConfigSection); got != want {
		t.Errorf("section = %+v, want %+v", got, want)
	}
	if ConfigSection.Key() != "mmmq.broker.dispatch" {
		t.Errorf("key = %s", ConfigSection.Key())
	}
}

// Invalid values and unknown keys name the full key (and the variable).
func TestConfigSectionErrorsNameKey(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		env        []string
		want       string
	}{
		{"timeout", "mmmq: {broker: {dispatch: {timeout: 0s}}}", nil, "config: mmmq.broker.dispatch.timeout: must be a duration > 0"},
		{"max-resends", "mmmq: {broker: {dispatch: {max-resends: -1}}}", nil, "config: mmmq.broker.dispatch.max-resends: must be between 0 and 2147483647; got -1"},
		{"backoff order", "mmmq: {broker: {dispatch: {backoff-initial: 2m}}}", nil, "config: mmmq.broker.dispatch.backoff-max: must be at least backoff-initial (2m0s); got 1m0s"},
		{"response bytes", "mmmq: {broker: {dispatch: {max-response-bytes: 1}}}", nil, "config: mmmq.broker.dispatch.max-response-bytes: must be between 64 and"},
		{"path", "mmmq: {broker: {dispatch: {path: messages}}}", nil, "config: mmmq.broker.dispatch.path: must start with \"/\""},
		{"env value", "", []string{"MMMQ_BROKER_DISPATCH_BACKOFF_MAX=soon"}, "config: mmmq.broker.dispatch.backoff-max: not a duration"},
		{"unknown key", "mmmq: {broker: {dispatch: {bakoff-max: 1s}}}", nil, `config: unknown key "mmmq.broker.dispatch.bakoff-max"`},
		{"unknown variable", "", []string{"MMMQ_BROKER_DISPATCH_BAKOFF_MAX=1s"}, "MMMQ_BROKER_DISPATCH_BAKOFF_MAX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadDispatch(t, tc.yaml, tc.env...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want it to contain %s", err, tc.want)
			}
		})
	}
}

// A binary that composes Module itself, without the app package, honours
// mmmq.broker.dispatch: the Manager's and the sender's options come from
// the loaded section (and mmmq.node-name), not from the built-in defaults.
func TestModuleReadsItsSection(t *testing.T) {
	path := writeYAML(t, "mmmq:\n  node-name: n1\n  broker:\n    dispatch:\n      timeout: 7s\n      path: /hooks\n")
	var m *Manager
	var s Sender
	app := fxtest.New(t,
		config.Module,
		fx.Supply(config.LoadOptions{Path: path, PathExplicit: true, Environ: []string{"MMMQ_BROKER_DISPATCH_MAX_RESENDS=9"}}),
		fx.Supply(zaptest.NewLogger(t)),
		fx.Provide(func() Source { return newMemSource() }),
		Module,
		fx.Populate(&m, &s),
	)
	defer app.RequireStart().RequireStop()
	o := m.opts
	if o.MaxResends != 9 || o.DefaultTimeout != 7*time.Second || o.DefaultPath != "/hooks" || o.NodeName != "n1" {
		t.Errorf("manager options = %+v, want max-resends 9, timeout 7s, path /hooks, node n1", o)
	}
	if hs := s.(*HTTPSender); hs.timeout != 7*time.Second || hs.defaultPath != "/hooks" {
		t.Errorf("sender timeout %s path %q, want 7s /hooks", hs.timeout, hs.defaultPath)
	}
}

// The application composed with Module fails on an invalid value of the
// section, naming the key, instead of running with defaults.
func TestModuleRefusesInvalidSection(t *testing.T) {
	app := fx.New(fx.NopLogger,
		config.Module,
		fx.Supply(config.LoadOptions{Path: "/nonexistent.yaml", Environ: []string{"MMMQ_BROKER_DISPATCH_PATH=x"}}),
		fx.Supply(zaptest.NewLogger(t)),
		fx.Provide(func() Source { return newMemSource() }),
		Module,
		fx.Invoke(func(*Manager) {}),
	)
	if err := app.Err(); err == nil || !strings.Contains(err.Error(), "config: mmmq.broker.dispatch.path: must start with") {
		t.Fatalf("app error = %v", err)
	}
}
