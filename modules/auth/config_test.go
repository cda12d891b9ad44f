package auth

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/config/configtest"
)

// load reads body as the configuration file of a binary with this
// module, with the given environment.
func load(t *testing.T, body string, env ...string) (*config.Config, error) {
	t.Helper()
	return configtest.Load(t, body, env, ConfigSection)
}

const authDigest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestAuthKeys(t *testing.T) {
	cfg, err := load(t, `
mmmq:
  auth:
    protect-metrics: false
    tokens:
      - name: billing
        token-sha256: `+authDigest+`
        permissions:
          - actions: [publish, consume]
            topics: ["order.**"]
            groups: ["billing-*"]
        max-concurrent-requests: 4
        publish-rate: 2.5
        publish-burst: 10
      - name: ops
        token-file: /run/secrets/ops
        permissions: [{actions: [admin, metrics]}]
      - name: svc
        client-cn: svc.example
`)
	require.NoError(t, err)
	a := config.SectionValue(cfg, ConfigSection)
	assert.False(t, a.ProtectMetrics)
	require.Len(t, a.Tokens, 3)
	assert.Equal(t, TokenConfig{Name: "billing", TokenSHA256: authDigest, MaxConcurrentRequests: 4, PublishRate: 2.5, PublishBurst: 10,
		Permissions: []PermissionConfig{{Actions: []string{"publish", "consume"}, Topics: []string{"order.**"}, Groups: []string{"billing-*"}}}}, a.Tokens[0])
	assert.Equal(t, "/run/secrets/ops", a.Tokens[1].TokenFile)
	assert.Equal(t, "svc.example", a.Tokens[2].ClientCN)
	assert.True(t, ConfigSection.Default().ProtectMetrics)

	on, err := load(t, "", "MMMQ_AUTH_PROTECT_METRICS=false")
	require.NoError(t, err)
	assert.False(t, config.SectionValue(on, ConfigSection).ProtectMetrics)
}

func TestAuthErrorsNameKeys(t *testing.T) {
	for want, body := range map[string]string{
		"mmmq.auth.tokens[0].permissions[0].actions[1]: must be one of publish, consume, read, admin, metrics":                 `{name: a, token-sha256: ` + authDigest + `, permissions: [{actions: [publish, write]}]}`,
		"mmmq.auth.tokens[0].permissions[0].topics[0]: invalid topic pattern":                                                  `{name: a, token-sha256: ` + authDigest + `, permissions: [{actions: [read], topics: ["a*"]}]}`,
		"mmmq.auth.tokens[0].permissions[0].groups[0]":                                                                         `{name: a, token-sha256: ` + authDigest + `, permissions: [{actions: [consume], groups: [""]}]}`,
		"mmmq.auth.tokens[0].permissions[0].actions: must list at least one":                                                   `{name: a, token-sha256: ` + authDigest + `, permissions: [{topics: ["x"]}]}`,
		`unknown key "mmmq.auth.tokens[0].permissions[0].topic"`:                                                               `{name: a, token-sha256: ` + authDigest + `, permissions: [{actions: [read], topic: ["x"]}]}`,
		`unknown key "mmmq.auth.tokens[0].token"`:                                                                              `{name: a, token: secret}`,
		"mmmq.auth.tokens[0]: must have exactly one of token-sha256, token-file and client-cn; got none":                       `{name: a}`,
		"mmmq.auth.tokens[0]: must have exactly one of token-sha256, token-file and client-cn; got token-sha256 and client-cn": `{name: a, token-sha256: ` + authDigest + `, client-cn: x}`,
		"mmmq.auth.tokens[0].token-sha256: must be the lowercase hex SHA-256":                                                  `{name: a, token-sha256: ` + strings.ToUpper(authDigest) + `}`,
		"mmmq.auth.tokens[1].name: duplicate name \"a\" (also mmmq.auth.tokens[0])":                                            `{name: a, client-cn: x}, {name: a, client-cn: y}`,
		"mmmq.auth.tokens[1].client-cn: same client-cn as mmmq.auth.tokens[0]":                                                 `{name: a, client-cn: x}, {name: b, client-cn: x}`,
		"mmmq.auth.tokens[0].name: must match":                                                                                 `{name: "a b", client-cn: x}`,
		"mmmq.auth.tokens[0].publish-rate: must be a number >= 0":                                                              `{name: a, client-cn: x, publish-rate: -1}`,
		"mmmq.auth.tokens[0].max-concurrent-requests: must be between 0 and":                                                   `{name: a, client-cn: x, max-concurrent-requests: -1}`,
		"mmmq.auth.tokens[0]: must be a mapping with name":                                                                     `"secret"`,
		// An empty list would decode like an omitted one (everything).
		"mmmq.auth.tokens[0].permissions[0].topics: is empty":       `{name: a, client-cn: x, permissions: [{actions: [read], topics: []}]}`,
		"mmmq.auth.tokens[0].permissions[0].groups: is empty":       `{name: a, client-cn: x, permissions: [{actions: [consume], groups: []}]}`,
		"mmmq.auth.tokens[0].permissions[0].topics: is empty: list": `{name: a, client-cn: x, permissions: [{actions: [read], topics: null}]}`,
	} {
		_, err := load(t, "mmmq:\n  auth:\n    tokens: ["+body+"]\n")
		if assert.Error(t, err, body) {
			assert.Contains(t, err.Error(), want)
			assert.NotContains(t, err.Error(), "secret", "a token never appears in an error")
		}
	}
	_, err := load(t, "", "MMMQ_AUTH_TOKENS=x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.auth.tokens can only be set in the YAML file")
}
