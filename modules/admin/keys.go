package admin

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// KeysPath lists the dispatchers' public webhook keys (KeysRoute).
const KeysPath = "/.well-known/mmmq/webhook-keys"

// WebhooksConfig is the section mmmq.webhooks (WebhooksSection).
type WebhooksConfig struct {
	// PublicKeysOpen serves KeysPath without credentials while
	// authentication is on (default false: any valid token, whatever its
	// permissions, because the list names the dispatchers). Without
	// tokens the path is open either way.
	PublicKeysOpen bool `koanf:"public-keys-open"`
}

// WebhooksSection is the section mmmq.webhooks, registered by Module. Its
// one key is a boolean; anything else is refused by the configuration
// loader, naming the key.
var WebhooksSection = config.NewSection("webhooks", WebhooksConfig{}, nil)

// PublicKey is one entry of the KeysPath answer: a dispatcher's ed25519
// public key that verifies the "v1a" entries of its pushes.
//
//	{"dispatcher":"billing","kid":"808d1060236c20d2","alg":"ed25519","key":"whpk_ZlN4…"}
type PublicKey struct {
	// Dispatcher is the name of the dispatcher that signs with the key.
	Dispatcher string `json:"dispatcher"`
	// KID is webhooks.PublicKey.KeyID: the first 16 hex digits of the
	// SHA-256 of the 32 raw key bytes; stable for a key.
	KID string `json:"kid"`
	// Alg is always "ed25519".
	Alg string `json:"alg"`
	// Key is "whpk_" + the standard base64 of the 32-byte public key.
	Key string `json:"key"`
}

// PublicKeys returns the public halves of every dispatcher's signing keys:
// dispatchers sorted by name, each one's keys in signing order; none
// when no dispatcher has signing-keys.
func (a *Admin) PublicKeys() []PublicKey {
	out := []PublicKey{}
	for _, d := range a.set.All() {
		for _, k := range d.SigningKeys() {
			p := k.Public()
			out = append(out, PublicKey{Dispatcher: d.Name(), KID: p.KeyID(), Alg: "ed25519", Key: p.String()})
		}
	}
	return out
}

// KeysRoute serves GET (and HEAD) KeysPath:
//
//	200 {"keys":[PublicKey...]}
//
// No permission is checked: with authentication on, the HTTP server lets
// any valid token through, and with mmmq.webhooks.public-keys-open the
// path is exempt from authentication (AuthExempt).
type KeysRoute struct {
	a    *Admin
	open bool
}

// NewKeysRoute returns the KeysPath route over a; open exempts it from
// authentication.
func NewKeysRoute(a *Admin, c WebhooksConfig) *KeysRoute {
	return &KeysRoute{a: a, open: c.PublicKeysOpen}
}

// Register adds GET KeysPath to r.
func (rt *KeysRoute) Register(r *mux.Router) {
	r.HandleFunc(KeysPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-cache") // keys change with a rotation
		contract.WriteJSON(w, http.StatusOK, map[string]any{"keys": rt.a.PublicKeys()})
	}).Methods(http.MethodGet)
}

// AuthExempt returns "/.well-known/mmmq/" when public-keys-open is on
// (KeysPath is the only route under it), else nothing.
func (rt *KeysRoute) AuthExempt() []string {
	if !rt.open {
		return nil
	}
	return []string{"/.well-known/mmmq/"}
}
