package auth

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
)

// Config is authentication and authorization (key "mmmq.auth", the
// section ConfigSection): with at least one token entry, every request
// but /healthz, /readyz and /openapi.yaml needs a bearer token (or a
// verified client certificate) of an entry, and may do only what its
// permissions allow.
type Config struct {
	// Tokens are the principals: each a name, one credential (token-sha256,
	// token-file or client-cn), permissions and limits. Empty (the
	// default) turns authentication off. File only.
	Tokens []TokenConfig `koanf:"tokens" element:"a mapping with name, one of token-sha256, token-file or client-cn, and permissions"`
	// ProtectMetrics makes GET /metrics need the metrics action; false
	// leaves /metrics open to anyone (for a scraper without a token), like
	// /healthz. Only matters with tokens. Default true.
	ProtectMetrics bool `koanf:"protect-metrics"`
}

// TokenConfig is one principal (list key "mmmq.auth.tokens"). Exactly
// one of TokenSHA256, TokenFile and ClientCN is set.
type TokenConfig struct {
	// Name names the principal in logs and errors (never a secret);
	// [A-Za-z0-9_.-], 1..200 bytes, unique. Required.
	Name string `koanf:"name"`
	// TokenSHA256 is the lowercase hex SHA-256 of the bearer token (64
	// characters); `mmmq token new` prints one.
	TokenSHA256 string `koanf:"token-sha256"`
	// TokenFile is a file holding the bearer token itself (surrounding
	// whitespace trimmed), re-read when it changes and on SIGHUP.
	TokenFile string `koanf:"token-file"`
	// ClientCN is the subject common name of a verified client certificate
	// (mutual TLS) that authenticates as this entry; no secret.
	ClientCN string `koanf:"client-cn"`
	// Permissions are what the entry may do; none means nothing.
	Permissions []PermissionConfig `koanf:"permissions" element:"a mapping with actions, topics and groups"`
	// MaxConcurrentRequests caps the entry's HTTP requests in progress
	// (more get 429 RATE_LIMITED); 0 = no limit. Default 0.
	MaxConcurrentRequests int `koanf:"max-concurrent-requests"`
	// MaxConnections caps the entry's line-protocol connections; 0 = no
	// limit. Default 0.
	MaxConnections int `koanf:"max-connections"`
	// PublishRate is messages per second (a token bucket, HTTP and line
	// protocol together); 0 = no limit. Default 0.
	PublishRate float64 `koanf:"publish-rate"`
	// PublishBurst is the bucket's size; 0 = max(1, publish-rate). Default 0.
	PublishBurst int `koanf:"publish-burst"`
}

// PermissionConfig grants actions on topics (and, for consume, as
// consumer groups) (list key "mmmq.auth.tokens[i].permissions").
type PermissionConfig struct {
	// Actions are publish, consume, read, admin and metrics; at least one.
	Actions []string `koanf:"actions"`
	// Topics are topic patterns with the dispatcher rules ("order.**");
	// empty means ["**"] (every topic). Actions without a topic (metrics,
	// the dispatcher API) are granted whatever the topics. An explicit
	// empty list is refused (it would read as every topic).
	Topics []string `koanf:"topics"`
	// Groups are consumer-group name globs ("*" any run of characters)
	// for consume; empty means ["*"]; an explicit empty list is refused.
	Groups []string `koanf:"groups"`
}

// ConfigSection is the section mmmq.auth, registered by Module. Its
// checks: names unique, exactly one credential per entry, unique
// credentials, valid actions, topic patterns and group globs, limits >= 0;
// in the file, an explicit empty topics or groups list is refused (see
// checkEmptyGrants). A token file's existence is checked when it is read.
var ConfigSection = config.NewSection("auth", Config{ProtectMetrics: true}, validateConfig).
	WithFileCheck(checkEmptyGrants)

// Clone returns a deep copy of c (the token list and each permission's
// lists).
func (c Config) Clone() Config {
	c.Tokens = slices.Clone(c.Tokens)
	for i := range c.Tokens {
		ps := slices.Clone(c.Tokens[i].Permissions)
		for j := range ps {
			ps[j].Actions = slices.Clone(ps[j].Actions)
			ps[j].Topics = slices.Clone(ps[j].Topics)
			ps[j].Groups = slices.Clone(ps[j].Groups)
		}
		c.Tokens[i].Permissions = ps
	}
	return c
}

const tokensKey = "mmmq.auth.tokens"

// nameRE is the allowed token entry name (it appears in logs, error
// texts and the line protocol's "OK AUTH <name>").
var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

// sha256HexRE is a lowercase hex SHA-256 digest.
var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

func validateConfig(a *Config) error {
	var errs []error
	names := map[string]int{}
	creds := map[string]int{}
	for i, t := range a.Tokens {
		key := fmt.Sprintf("%s[%d]", tokensKey, i)
		if !nameRE.MatchString(t.Name) {
			errs = append(errs, config.InvalidValue(key+".name", "must match %s; got %q", nameRE, t.Name))
		} else if j, dup := names[t.Name]; dup {
			errs = append(errs, config.InvalidValue(key+".name", "duplicate name %q (also %s[%d])", t.Name, tokensKey, j))
		} else {
			names[t.Name] = i
		}
		errs = append(errs, checkCredential(key, t, creds, i))
		for j, p := range t.Permissions {
			errs = append(errs, checkPermission(fmt.Sprintf("%s.permissions[%d]", key, j), p)...)
		}
		errs = append(errs,
			config.CheckIntRange(key+".max-concurrent-requests", int64(t.MaxConcurrentRequests), 0, math.MaxInt32),
			config.CheckIntRange(key+".max-connections", int64(t.MaxConnections), 0, math.MaxInt32))
		if t.PublishRate < 0 || math.IsNaN(t.PublishRate) || math.IsInf(t.PublishRate, 0) {
			errs = append(errs, config.InvalidValue(key+".publish-rate", "must be a number >= 0 (messages per second; 0 = no limit); got %v", t.PublishRate))
		}
		errs = append(errs, config.CheckIntRange(key+".publish-burst", int64(t.PublishBurst), 0, math.MaxInt32))
	}
	return errors.Join(errs...)
}

// checkCredential checks that entry i (at key) has exactly one of
// token-sha256, token-file and client-cn, and that no two entries share a
// digest, a file or a common name (the second could never be told apart).
func checkCredential(key string, t TokenConfig, seen map[string]int, i int) error {
	var set []string
	var errs []error
	if t.TokenSHA256 != "" {
		set = append(set, "token-sha256")
		if !sha256HexRE.MatchString(t.TokenSHA256) {
			errs = append(errs, config.InvalidValue(key+".token-sha256", "must be the lowercase hex SHA-256 of the token, 64 characters of [0-9a-f] (mmmq token new prints one); got %d characters", len(t.TokenSHA256)))
		}
	}
	if t.TokenFile != "" {
		set = append(set, "token-file")
	}
	if t.ClientCN != "" {
		set = append(set, "client-cn")
	}
	if len(set) != 1 {
		described := "none"
		if len(set) > 0 {
			described = strings.Join(set, " and ")
		}
		return errors.Join(append(errs, config.InvalidValue(key, "must have exactly one of token-sha256, token-file and client-cn; got %s", described))...)
	}
	id := set[0] + "=" + t.TokenSHA256 + t.TokenFile + t.ClientCN
	if j, dup := seen[id]; dup {
		return errors.Join(append(errs, config.InvalidValue(key+"."+set[0], "same %s as %s[%d]: the two entries could not be told apart", set[0], tokensKey, j))...)
	}
	seen[id] = i
	return errors.Join(errs...)
}

// checkPermission checks one permission of a token entry.
func checkPermission(key string, p PermissionConfig) []error {
	var errs []error
	if len(p.Actions) == 0 {
		errs = append(errs, config.InvalidValue(key+".actions", "must list at least one of %s", actionList()))
	}
	for i, a := range p.Actions {
		if !slices.Contains(contract.Actions, contract.Action(a)) {
			errs = append(errs, config.InvalidValue(fmt.Sprintf("%s.actions[%d]", key, i), "must be one of %s; got %q", actionList(), a))
		}
	}
	for i, t := range p.Topics {
		k := fmt.Sprintf("%s.topics[%d]", key, i)
		if strings.TrimSpace(t) == "" {
			errs = append(errs, config.InvalidValue(k, "must not be empty"))
		} else if err := contract.ValidatePattern(t); err != nil {
			errs = append(errs, config.InvalidValue(k, "%v", err))
		}
	}
	for i, g := range p.Groups {
		if g == "" || strings.ContainsAny(g, " \t\r\n/") {
			errs = append(errs, config.InvalidValue(fmt.Sprintf("%s.groups[%d]", key, i), "must be a non-empty consumer-group name glob (\"*\" matches any run of characters), without spaces or '/'; got %q", g))
		}
	}
	return errs
}

func actionList() string {
	out := make([]string, len(contract.Actions))
	for i, a := range contract.Actions {
		out[i] = string(a)
	}
	return strings.Join(out, ", ")
}

// checkEmptyGrants refuses an explicit empty topics or groups list in a
// permission (raw is the file's mmmq.auth mapping): an omitted list means
// every topic (group), and the decoded value of an empty one cannot be
// told from it, so "topics: []" would grant everything instead of nothing.
func checkEmptyGrants(raw map[string]any) error {
	var errs []error
	tokens, _ := raw["tokens"].([]any)
	for i, t := range tokens {
		tm, _ := t.(map[string]any)
		perms, _ := tm["permissions"].([]any)
		for j, p := range perms {
			pm, _ := p.(map[string]any)
			for _, k := range []string{"topics", "groups"} {
				v, ok := pm[k]
				if l, isList := v.([]any); ok && (v == nil || isList && len(l) == 0) {
					errs = append(errs, config.InvalidValue(fmt.Sprintf("%s[%d].permissions[%d].%s", tokensKey, i, j, k),
						"is empty: list at least one, or leave the key out for all"))
				}
			}
		}
	}
	return errors.Join(errs...)
}
