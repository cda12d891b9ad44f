package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

func tokenYAML(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "mmmq:\n  auth:\n    tokens:\n      - name: producer\n        token-sha256: " + hex.EncodeToString(sum[:]) +
		"\n        permissions:\n          - actions: [publish]\n            topics: [\"order.**\"]\n"
}

// TestFxModule: Module builds the Store from mmmq.auth as loaded from the
// configuration file, provides it as the Authenticator and as a member of
// the reloaders group, and its Reload (SIGHUP) re-reads the file the
// configuration was loaded from.
func TestFxModule(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mmmq.yaml")
	require.NoError(t, os.WriteFile(path, []byte(tokenYAML("first")), 0o600))
	var (
		store *Store
		authn contract.Authenticator
		lim   contract.Limiter
		rel   struct {
			fx.In
			Reloaders []contract.Reloader `group:"reloaders"`
		}
	)
	app := fxtest.New(t,
		config.Module, fx.Supply(config.LoadOptions{Path: path, PathExplicit: true, Environ: []string{}}),
		fx.Supply(zaptest.NewLogger(t)),
		Module,
		fx.Populate(&store, &authn, &lim, &rel),
	)
	app.RequireStart()
	defer app.RequireStop()
	assert.Same(t, store, authn)
	assert.NotNil(t, lim)
	require.Len(t, rel.Reloaders, 1)
	assert.Same(t, store, rel.Reloaders[0])
	require.True(t, authn.Enabled())

	p, err := authn.Authenticate("first")
	require.NoError(t, err)
	assert.Equal(t, "producer", p.Name())
	assert.True(t, p.Can(contract.ActionPublish, "order.new", ""))
	assert.False(t, p.Can(contract.ActionPublish, "payment.new", ""))

	require.NoError(t, os.WriteFile(path, []byte(tokenYAML("second")), 0o600))
	require.NoError(t, rel.Reloaders[0].Reload(context.Background()))
	_, err = authn.Authenticate("first")
	assert.True(t, errors.Is(err, contract.ErrUnauthorized), "the old token after a reload: %v", err)
	_, err = authn.Authenticate("second")
	assert.NoError(t, err, "the new token after a reload")
}
