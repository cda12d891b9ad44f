package auth

import (
	"fmt"
	"strings"

	"github.com/mmmq/mmmq/modules/contract"
)

// principal is one token entry of mmmq.auth.tokens (contract.Principal).
// It is immutable: a reload builds new ones.
type principal struct {
	name   string
	perms  []permission
	limits contract.Limits
}

// permission is one parsed entry of a token's permissions.
type permission struct {
	actions map[contract.Action]bool
	topics  []contract.Pattern // never empty: ["**"] when none were given
	groups  []string           // never empty: ["*"] when none were given
}

func (p *principal) Name() string            { return p.name }
func (p *principal) Limits() contract.Limits { return p.limits }

// Can reports whether one permission grants action on topic as group. An
// action on a topic is granted by a permission one of whose patterns
// reaches it under the reserved-prefix rule (contract.Pattern.Reaches: a
// topic under dead-letter. needs a pattern naming dead-letter), whatever
// the action, admin included. An
// action without a topic (topic "": metrics, the dispatcher API) is
// granted by any permission listing it, except admin: the dispatcher API
// can push any topic to any host, so it needs admin on every topic (a
// permission whose topics include "**"); admin limited to some topics
// covers deleting and reopening those. A consume without a group (the
// group listing of a topic) needs only the topic.
func (p *principal) Can(action contract.Action, topic, group string) bool {
	for i := range p.perms {
		if p.perms[i].grants(action, topic, group) {
			return true
		}
	}
	return false
}

func (pm *permission) grants(action contract.Action, topic, group string) bool {
	if !pm.actions[action] {
		return false
	}
	if topic != "" && !matchAnyPattern(pm.topics, topic) {
		return false
	}
	if topic == "" && action == contract.ActionAdmin && !pm.allTopics() {
		return false
	}
	if group == "" {
		return true
	}
	for _, g := range pm.groups {
		if Glob(g, group) {
			return true
		}
	}
	return false
}

// allTopics reports whether the permission's topics include "**".
func (pm *permission) allTopics() bool {
	for _, p := range pm.topics {
		if p.String() == "**" {
			return true
		}
	}
	return false
}

// matchAnyPattern reports whether one of ps reaches topic under the
// reserved-prefix rule (contract.Pattern.Reaches): "**" does not reach
// dead-letter topics, "dead-letter.**" does.
func matchAnyPattern(ps []contract.Pattern, topic string) bool {
	for _, p := range ps {
		if p.Reaches(topic) {
			return true
		}
	}
	return false
}

// Glob reports whether name matches pattern, where "*" matches any run of
// characters (none included) and every other character itself. It runs in
// O(len(pattern) × len(name)) at worst, without recursion.
func Glob(pattern, name string) bool {
	p, n := 0, 0
	star, mark := -1, 0 // last '*' seen in pattern, and where in name it took over
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			mark++
			p, n = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// newPrincipal builds entry i (key names it in errors) of mmmq.auth.tokens;
// the configuration was validated, so errors here are defensive.
func newPrincipal(key string, t TokenConfig) (*principal, error) {
	p := &principal{name: t.Name, limits: contract.Limits{
		MaxConcurrentRequests: t.MaxConcurrentRequests,
		MaxConnections:        t.MaxConnections,
		PublishRate:           t.PublishRate,
		PublishBurst:          t.PublishBurst,
	}}
	for j, pc := range t.Permissions {
		pm := permission{actions: map[contract.Action]bool{}, groups: pc.Groups}
		for _, a := range pc.Actions {
			pm.actions[contract.Action(a)] = true
		}
		topics := pc.Topics
		if len(topics) == 0 {
			topics = []string{"**"}
		}
		for k, s := range topics {
			pat, err := contract.ParsePattern(s)
			if err != nil {
				return nil, fmt.Errorf("%s.permissions[%d].topics[%d]: %w", key, j, k, err)
			}
			pm.topics = append(pm.topics, pat)
		}
		if len(pm.groups) == 0 {
			pm.groups = []string{"*"}
		}
		p.perms = append(p.perms, pm)
	}
	return p, nil
}

// topicActions are the actions whose permissions name topics.
var topicActions = []contract.Action{contract.ActionPublish, contract.ActionRead, contract.ActionConsume, contract.ActionAdmin}

// reservedLosses says what the reserved-prefix rule took from p: for each
// reserved prefix and each action on topics, the patterns that match
// topics under the prefix when the rule is ignored (contract.Pattern.
// MatchesUnder: "**", "*.billing") but reach none of them under it, unless
// a permission of p grants that action on the whole prefix
// (prefix + "**"), groups aside. Empty when p lost nothing.
func (p *principal) reservedLosses() []string {
	var out []string
	for _, prefix := range contract.ReservedPrefixes() {
		for _, a := range topicActions {
			var cut []string
			whole := false
			for i := range p.perms {
				pm := &p.perms[i]
				if !pm.actions[a] {
					continue
				}
				for _, pat := range pm.topics {
					switch {
					case pat.String() == prefix+"**":
						whole = true
					case !pat.Names(prefix) && pat.MatchesUnder(prefix):
						cut = append(cut, fmt.Sprintf("%q", pat.String()))
					}
				}
			}
			if len(cut) > 0 && !whole {
				out = append(out, fmt.Sprintf("%s on %s** (patterns %s)", a, prefix, strings.Join(cut, ", ")))
			}
		}
	}
	return out
}
