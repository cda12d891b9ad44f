package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/mmmq/mmmq/modules/contract"
)

// authNameRE is the allowed token entry name (it appears in logs, error
// texts and the line protocol's "OK AUTH <name>").
var authNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

// sha256HexRE is a lowercase hex SHA-256 digest.
var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// auth checks mmmq.auth: names unique, exactly one credential per entry,
// unique credentials, valid actions, topic patterns and group globs. A
// token file's existence is checked by the auth module when it reads it.
func (v *validator) auth(a AuthConfig) {
	names := map[string]int{}
	creds := map[string]int{}
	for i, t := range a.Tokens {
		key := fmt.Sprintf("%s[%d]", authTokensKey, i)
		if !authNameRE.MatchString(t.Name) {
			v.add(invalid(key+".name", "must match %s; got %q", authNameRE, t.Name))
		} else if j, dup := names[t.Name]; dup {
			v.add(invalid(key+".name", "duplicate name %q (also %s[%d])", t.Name, authTokensKey, j))
		} else {
			names[t.Name] = i
		}
		v.authCredential(key, t, creds, i)
		for j, p := range t.Permissions {
			v.permission(fmt.Sprintf("%s.permissions[%d]", key, j), p)
		}
		v.intRange(key+".max-concurrent-requests", int64(t.MaxConcurrentRequests), 0, math.MaxInt32)
		v.intRange(key+".max-connections", int64(t.MaxConnections), 0, math.MaxInt32)
		if t.PublishRate < 0 || math.IsNaN(t.PublishRate) || math.IsInf(t.PublishRate, 0) {
			v.add(invalid(key+".publish-rate", "must be a number >= 0 (messages per second; 0 = no limit); got %v", t.PublishRate))
		}
		v.intRange(key+".publish-burst", int64(t.PublishBurst), 0, math.MaxInt32)
	}
}

// authCredential checks that entry i (at key) has exactly one of
// token-sha256, token-file and client-cn, and that no two entries share a
// digest, a file or a common name (the second could never be told apart).
func (v *validator) authCredential(key string, t AuthTokenConfig, seen map[string]int, i int) {
	var set []string
	if t.TokenSHA256 != "" {
		set = append(set, "token-sha256")
		if !sha256HexRE.MatchString(t.TokenSHA256) {
			v.add(invalid(key+".token-sha256", "must be the lowercase hex SHA-256 of the token, 64 characters of [0-9a-f] (mmmq token new prints one); got %d characters", len(t.TokenSHA256)))
		}
	}
	if t.TokenFile != "" {
		set = append(set, "token-file")
	}
	if t.ClientCN != "" {
		set = append(set, "client-cn")
	}
	if len(set) != 1 {
		v.add(invalid(key, "must have exactly one of token-sha256, token-file and client-cn; got %s", describeSet(set)))
		return
	}
	id := set[0] + "=" + t.TokenSHA256 + t.TokenFile + t.ClientCN
	if j, dup := seen[id]; dup {
		v.add(invalid(key+"."+set[0], "same %s as %s[%d]: the two entries could not be told apart", set[0], authTokensKey, j))
		return
	}
	seen[id] = i
}

func describeSet(set []string) string {
	if len(set) == 0 {
		return "none"
	}
	return strings.Join(set, " and ")
}

// permission checks one permission of a token entry.
func (v *validator) permission(key string, p AuthPermissionConfig) {
	if len(p.Actions) == 0 {
		v.add(invalid(key+".actions", "must list at least one of %s", actionList()))
	}
	for i, a := range p.Actions {
		if !slices.Contains(contract.Actions, contract.Action(a)) {
			v.add(invalid(fmt.Sprintf("%s.actions[%d]", key, i), "must be one of %s; got %q", actionList(), a))
		}
	}
	for i, t := range p.Topics {
		v.pattern(fmt.Sprintf("%s.topics[%d]", key, i), t)
	}
	for i, g := range p.Groups {
		if g == "" || strings.ContainsAny(g, " \t\r\n/") {
			v.add(invalid(fmt.Sprintf("%s.groups[%d]", key, i), "must be a non-empty consumer-group name glob (\"*\" matches any run of characters), without spaces or '/'; got %q", g))
		}
	}
}

func actionList() string {
	out := make([]string, len(contract.Actions))
	for i, a := range contract.Actions {
		out[i] = string(a)
	}
	return strings.Join(out, ", ")
}
