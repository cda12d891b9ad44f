package app_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/auth"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// TestPermissionDeadLetterTopicsNeedANamingPattern: a "**" token (every
// action, the default topics) neither publishes, reads, consumes nor
// deletes dead-letter topics, over HTTP and the line protocol alike, and
// the listing hides them; a token that adds "dead-letter.**" does all of
// it; the "**" admin keeps the dispatcher API (redrive). Startup warns
// about the "**" token.
func TestPermissionDeadLetterTopicsNeedANamingPattern(t *testing.T) {
	ts := tokenSet{}
	cfg := testConfig(t, t.TempDir())
	config.EditSection(cfg, auth.ConfigSection, func(a *auth.Config) {
		a.Tokens = []auth.TokenConfig{
			ts.entry("all", allow(contract.Actions, nil, nil)),
			ts.entry("dl", allow(contract.Actions, []string{"**", "dead-letter.**"}, nil)),
		}
	})
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: "127.0.0.1:0", MaxLineBytes: lineproto.DefaultMaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	var lp *lineproto.Server
	b := startAuthBroker(t, cfg, fx.Populate(&lp))

	all, dl := ts["all"], ts["dl"]
	st, _, out := b.do("POST", "/messages", dl, `{"topic":"dead-letter.billing","content":1}`)
	require.Equal(t, 200, st, out)
	st, _, out = b.do("POST", "/messages", all, `{"topic":"order.new","content":1}`)
	require.Equal(t, 200, st, out)

	for _, tt := range []struct{ method, path, body string }{
		{"POST", "/messages", `{"topic":"dead-letter.billing","content":2}`},
		{"POST", "/messages/batch", `[{"topic":"order.new","content":1},{"topic":"dead-letter.billing","content":2}]`},
		{"GET", "/topics/dead-letter.billing/messages", ""},
		{"POST", "/topics/dead-letter.billing/groups/g/fetch?max=1", ""},
		{"GET", "/topics/dead-letter.billing/groups", ""},
		{"DELETE", "/topics/dead-letter.billing", ""},
		{"POST", "/topics/dead-letter.billing/reopen", ""},
	} {
		st, _, out := b.do(tt.method, tt.path, all, tt.body)
		assert.Equal(t, 403, st, "%s %s with a ** token: %s", tt.method, tt.path, out)
		assertErrorBody(t, out, contract.CodeForbidden, tt.method+" "+tt.path)
		assert.Contains(t, out, `topic \"dead-letter.billing\"`)
	}
	for _, path := range []string{"/topics/dead-letter.billing/messages", "/topics/dead-letter.billing/groups"} {
		st, _, out := b.do("GET", path, dl, "")
		assert.Equal(t, 200, st, "GET %s with dead-letter.**: %s", path, out)
	}
	st, _, out = b.do("GET", "/mmmq/dispatchers", all, "")
	assert.Equal(t, 200, st, "the ** admin keeps the dispatcher API: %s", out)

	assert.Equal(t, []string{"order.new"}, b.listedTopics(all))
	assert.Equal(t, []string{"dead-letter.billing", "order.new"}, b.listedTopics(dl))

	// The line protocol makes the same check.
	c := dialLine(t, lp.Addr(), nil)
	require.Equal(t, "OK AUTH all", c.do("AUTH "+all))
	got := c.do(`PUB dead-letter.billing DURABLE {"n":1}`)
	assert.True(t, strings.HasPrefix(got, "ERR FORBIDDEN publish dead-letter.billing "), got)
	got = c.do("FETCH dead-letter.billing g 1 0")
	assert.True(t, strings.HasPrefix(got, "ERR FORBIDDEN consume dead-letter.billing "), got)
	c = dialLine(t, lp.Addr(), nil)
	require.Equal(t, "OK AUTH dl", c.do("AUTH "+dl))
	assert.Equal(t, "OK 1 DURABLE", c.do(`PUB dead-letter.billing DURABLE {"n":2}`))

	warned := b.logs.FilterMessageSnippet("no longer reaches reserved topics").All()
	require.Len(t, warned, 1, "one startup warning, for the ** token only")
	assert.Equal(t, "all", warned[0].ContextMap()["token"])
	b.assertNoToken(ts)
}
