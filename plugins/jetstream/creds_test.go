package jetstream

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// operator is a NATS operator made in the test, with a system account
// and one JetStream-enabled account whose users it can issue.
type operator struct {
	claims  *jwt.OperatorClaims
	sysPub  string
	account nkeys.KeyPair
	accPub  string
	jwts    map[string]string // account public key → JWT
}

func newOperator(t *testing.T) *operator {
	t.Helper()
	okp := must(t, nkeys.CreateOperator)
	opub := must(t, okp.PublicKey)
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "mmmq-test"
	op := &operator{claims: oc, jwts: map[string]string{}}
	// Encode sets the claims' issuer, the operator's own key.
	_, err := oc.Encode(okp)
	require.NoError(t, err)

	sys := must(t, nkeys.CreateAccount)
	op.sysPub = must(t, sys.PublicKey)
	sc := jwt.NewAccountClaims(op.sysPub)
	sc.Name = "SYS"
	op.jwts[op.sysPub] = must(t, func() (string, error) { return sc.Encode(okp) })

	op.account = must(t, nkeys.CreateAccount)
	op.accPub = must(t, op.account.PublicKey)
	ac := jwt.NewAccountClaims(op.accPub)
	ac.Name = "MMMQ"
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	op.jwts[op.accPub] = must(t, func() (string, error) { return ac.Encode(okp) })
	return op
}

// options puts a server in operator mode with op's accounts preloaded.
func (op *operator) options(t *testing.T) func(*server.Options) {
	return func(o *server.Options) {
		r := &server.MemAccResolver{}
		for pub, j := range op.jwts {
			require.NoError(t, r.Store(pub, j))
		}
		o.TrustedOperators = []*jwt.OperatorClaims{op.claims}
		o.AccountResolver = r
		o.SystemAccount = op.sysPub
	}
}

// writeCreds writes a credentials file for a new user signed by account
// and returns its path and the user's seed.
func writeCreds(t *testing.T, account nkeys.KeyPair, name string) (path, seed string) {
	t.Helper()
	ukp := must(t, nkeys.CreateUser)
	uc := jwt.NewUserClaims(must(t, ukp.PublicKey))
	uc.Name = name
	ujwt := must(t, func() (string, error) { return uc.Encode(account) })
	s := must(t, ukp.Seed)
	creds, err := jwt.FormatUserConfig(ujwt, s)
	require.NoError(t, err)
	path = filepath.Join(t.TempDir(), name+".creds")
	require.NoError(t, os.WriteFile(path, creds, 0o600))
	return path, string(s)
}

func must[T any](t *testing.T, f func() (T, error)) T {
	t.Helper()
	v, err := f()
	require.NoError(t, err)
	return v
}

// A server in operator mode (JWT accounts): a credentials file of a user
// of the JetStream account connects and appends; one signed by an account
// the server does not know is refused with "Authorization Violation";
// a missing file fails naming it. The user's seed (the secret in the
// file) shows in neither the error nor the log.
func TestAuthCredsFile(t *testing.T) {
	op := newOperator(t)
	s := startServerWith(t, op.options(t))
	good, goodSeed := writeCreds(t, op.account, "broker")
	stranger := must(t, nkeys.CreateAccount)
	bad, badSeed := writeCreds(t, stranger, "stranger")
	missing := filepath.Join(t.TempDir(), "missing.creds")

	cases := []struct {
		name    string
		file    string
		seed    string
		wantErr string // "" = connects
	}{
		{"Creds right", good, goodSeed, ""},
		{"Creds unknown account", bad, badSeed, "nats: Authorization Violation"},
		{"Creds missing file", missing, "", missing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(s)
			c.CredsFile = tc.file
			b, logs, err := connectObserved(t, c)
			if tc.seed != "" {
				assertNoSecret(t, tc.seed, err, logs)
			}
			if tc.wantErr == "" {
				require.NoError(t, err)
				appendOne(t, b)
				return
			}
			require.Error(t, err)
			t.Log(err)
			assert.Contains(t, err.Error(), s.ClientURL(), "the error names the server")
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
