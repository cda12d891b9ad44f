package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// TestTokenNew: the printed digest is the SHA-256 of the printed token,
// and a broker configured with that digest accepts the token (and
// refuses requests without it).
func TestTokenNew(t *testing.T) {
	code, out := capture(t, "token", "new")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(k, "#") {
			fields[k] = v
		}
	}
	tok, digest := fields["token"], fields["token-sha256"]
	sum := sha256.Sum256([]byte(tok))
	if !strings.HasPrefix(tok, "mmmq_") || len(tok) < 40 || hex.EncodeToString(sum[:]) != digest {
		t.Fatalf("token %q, digest %q: not its SHA-256\n%s", tok, digest, out)
	}
	if _, again := capture(t, "token", "new"); strings.Contains(again, tok) {
		t.Fatal("two runs print the same token")
	}
	// A usage error names what was wrong, in two lines on stderr (it
	// printed only the usage).
	for args, says := range map[string]string{"": "missing subcommand", "old": `unknown subcommand "old"`, "new --bogus": `got "--bogus"`} {
		code, out, errOut := captureAll(t, append([]string{"token"}, strings.Fields(args)...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, says) || strings.Count(errOut, "\n") != 2 {
			t.Errorf("mmmq token %s: exit %d, stdout %q, stderr %q; want 2 and two lines saying %q", args, code, out, errOut, says)
		}
	}

	cfg := config.Default()
	cfg.Server.Port, cfg.Server.Host, cfg.Logging.Level = 0, "127.0.0.1", "error"
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.RootDir = t.TempDir() })
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{{Name: "cli", TokenSHA256: digest,
			Permissions: []auth.PermissionConfig{{Actions: []string{"read"}}}}}
	})
	var srv *httpapi.Server
	a := fxtest.New(t, appOptions(config.Supply(cfg), fx.Populate(&srv)))
	a.RequireStart()
	defer a.RequireStop()
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/topics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(tok); st != 200 {
		t.Errorf("the new token: %d, want 200", st)
	}
	if st := get(""); st != 401 {
		t.Errorf("no token: %d, want 401", st)
	}
}
