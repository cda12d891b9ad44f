package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/webhooks"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

// signedConsumer answers ACK and hands each push's verification against
// the broker's listed public keys to got.
type signedConsumer struct {
	srv *httptest.Server
	got chan error
}

func newSignedConsumer(t *testing.T, keys func() []webhooks.PublicKey) *signedConsumer {
	c := &signedConsumer{got: make(chan error, 16)}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ks := keys()
		if len(ks) == 0 {
			c.got <- fmt.Errorf("no public key")
		} else {
			c.got <- webhooks.NewPublicKeyVerifier(0, ks...).Verify(r.Header, body)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// TestWebhookKeys: GET /.well-known/mmmq/webhook-keys lists each
// dispatcher's whpk_ keys (config and api dispatchers, a rotation's two
// keys); with tokens it needs one (any valid one, whatever its
// permissions) unless mmmq.webhooks.public-keys-open; HEAD answers too;
// a push verifies with the listed key; the private keys appear in no
// response and no log line, only in dispatchers.json (mode 0600).
func TestWebhookKeys(t *testing.T) {
	k1, err := webhooks.NewSigningKey()
	require.NoError(t, err)
	k2, err := webhooks.NewSigningKey()
	require.NoError(t, err)
	k3, err := webhooks.NewSigningKey()
	require.NoError(t, err)
	parsed := func(s string) webhooks.SigningKey {
		k, err := webhooks.ParseSigningKey(s)
		require.NoError(t, err)
		return k
	}
	for _, open := range []bool{false, true} {
		t.Run(fmt.Sprintf("public-keys-open=%v", open), func(t *testing.T) {
			var listed []webhooks.PublicKey
			cons := newSignedConsumer(t, func() []webhooks.PublicKey { return listed })
			ts := tokenSet{}
			root := t.TempDir()
			cfg := testConfig(t, root)
			config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
				a.Tokens = append(a.Tokens, ts.entry("all", allow(contract.Actions, nil, nil)),
					ts.entry("publisher", allow([]contract.Action{contract.ActionPublish}, []string{"other.*"}, nil)))
			})
			config.EditSection(cfg, admin.WebhooksSection, func(w *admin.WebhooksConfig) { w.PublicKeysOpen = open })
			config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{
				Name: "signed", Host: cons.srv.URL, Patterns: []string{"s.*"}, SigningKeys: []string{k1, k2},
			}})
			b := startAuthBroker(t, cfg)

			st, _, out := b.do("POST", "/mmmq/dispatchers", ts["all"],
				fmt.Sprintf(`{"name":"api-signed","host":"http://127.0.0.1:9","patterns":["x.never"],"signing-keys":[%q]}`, k3))
			require.Equal(t, 201, st, out)
			assert.Contains(t, out, "\"signing-keys\":[\"whsk_\u2026(redacted, kid "+parsed(k3).KeyID()+")\"]")

			wantStatus := map[string]int{"": 401, ts["publisher"]: 200, ts["all"]: 200}
			if open {
				wantStatus[""] = 200
			}
			for tok, want := range wantStatus {
				st, h, out := b.do("GET", admin.KeysPath, tok, "")
				require.Equal(t, want, st, "token %v: %s", tok != "", out)
				if want == 401 {
					assert.Contains(t, h.Get("WWW-Authenticate"), "Bearer")
					assertErrorBody(t, out, contract.CodeUnauthorized, "keys without a token")
					continue
				}
				assert.Equal(t, "application/json", h.Get("Content-Type"))
				var got struct{ Keys []admin.PublicKey }
				require.NoError(t, json.Unmarshal([]byte(out), &got), out)
				var want []admin.PublicKey
				for _, e := range []struct{ d, k string }{{"api-signed", k3}, {"signed", k1}, {"signed", k2}} {
					p := parsed(e.k).Public()
					want = append(want, admin.PublicKey{Dispatcher: e.d, KID: p.KeyID(), Alg: "ed25519", Key: p.String()})
				}
				require.Equal(t, want, got.Keys)
				listed = nil
				for _, e := range got.Keys[1:] {
					p, err := webhooks.ParsePublicKey(e.Key)
					require.NoError(t, err)
					listed = append(listed, p)
				}
			}
			req, err := http.NewRequest(http.MethodHead, b.base+admin.KeysPath, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+ts["publisher"])
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, 200, resp.StatusCode, "HEAD")

			// The broker's push verifies with the listed keys.
			st, _, out = b.do("POST", "/messages", ts["all"], `{"topic":"s.one","content":{"n":1}}`)
			require.Equal(t, 200, st, out)
			require.NoError(t, <-cons.got, "a push verified with the listed public keys")

			// Not one private key in any answer or log line; both api and
			// config keys stay out of the listing and status.
			for _, path := range []string{"/mmmq/dispatchers", "/mmmq/dispatchers/signed", "/mmmq/dispatchers/api-signed"} {
				st, _, out := b.do("GET", path, ts["all"], "")
				require.Equal(t, 200, st, out)
			}
			b.mu.Lock()
			bodies := strings.Join(b.bodies, "\n")
			b.mu.Unlock()
			var lines []string
			for _, e := range b.logs.All() {
				lines = append(lines, fmt.Sprint(e.Message, e.ContextMap()))
			}
			all := bodies + strings.Join(lines, "\n")
			for _, k := range []string{k1, k2, k3} {
				assert.NotContains(t, all, strings.TrimPrefix(k, webhooks.SigningKeyPrefix)[:16], "a private key was shown")
			}
			stored, err := os.ReadFile(filepath.Join(root, "dispatchers.json"))
			require.NoError(t, err)
			assert.Contains(t, string(stored), k3, "dispatchers.json keeps the api dispatcher's key")
			b.assertNoToken(ts)
		})
	}
}
