package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

var durationType = reflect.TypeFor[time.Duration]()

// leaf is one key holding a value (not a section).
type leaf struct {
	key string
	typ reflect.Type
	// want is what an element must be, for a list section's key.
	want string
}

// schema is the key set of a struct type, derived from its koanf tags.
type schema struct {
	leaves   map[string]leaf // "server.port" -> leaf
	sections map[string]bool // "server", "mmmq", "mmmq.broker", ...
}

func newSchema(t reflect.Type) schema {
	s := schema{leaves: map[string]leaf{}, sections: map[string]bool{}}
	s.walk(t, "")
	return s
}

func (s schema) walk(t reflect.Type, prefix string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		key := prefix + tag
		if f.Type.Kind() == reflect.Struct {
			s.sections[key] = true
			s.walk(f.Type, key+".")
			continue
		}
		s.leaves[key] = leaf{key: key, typ: f.Type, want: f.Tag.Get("element")}
	}
}

// configSchema is the key set of Config, the core keys.
var configSchema = newSchema(reflect.TypeFor[Config]())

// Two list keys of stock sections, named here for the environment's hint
// (file only) when the binary lacks the section.
const (
	dispatchersKey = "mmmq.broker.dispatchers" // plugins/configdispatchers
	authTokensKey  = "mmmq.auth.tokens"        // modules/auth
)

// envPrefix starts every variable of the environment rule.
const envPrefix = "MMMQ_"

// EnvConfigVar names the YAML file when LoadOptions.PathExplicit is false.
const EnvConfigVar = "MMMQ_CONFIG"

// EnvServerVar is the broker URL of the commands that talk to a running
// broker ("mmmq dispatchers", "mmmq topics"). It names no key: Load skips
// it, so one shell can set it and still start a broker.
const EnvServerVar = "MMMQ_SERVER"

// EnvTokenVar is the bearer token of the commands that talk to a running
// broker with authentication on. It names no key: Load skips it, like
// EnvServerVar.
const EnvTokenVar = "MMMQ_TOKEN"

// testVars are the variables of the project's own tests that share the
// prefix and name no key: MMMQ_LAZYFS (the LazyFS binary for the
// power-loss rounds of the crash tests) and MMMQ_LONG (the long crash
// rounds). Load skips them, as EnvServerVar, so that `make test` and
// `make crash` can set them for every package.
var testVars = []string{"MMMQ_LAZYFS", "MMMQ_LONG"}

// reservedVar reports whether name is a variable of the prefix that names
// no key: EnvConfigVar, EnvServerVar, EnvTokenVar and the test variables.
func reservedVar(name string) bool {
	return name == EnvConfigVar || name == EnvServerVar || name == EnvTokenVar || slices.Contains(testVars, name)
}

// EnvVar returns the environment variable for key under the package's one
// rule: "MMMQ_" + key without a leading "mmmq.", upper-cased, with "." and
// "-" replaced by "_". EnvVar("mmmq.broker.storage.root-dir") is
// "MMMQ_BROKER_STORAGE_ROOT_DIR"; EnvVar("server.port") is "MMMQ_SERVER_PORT".
func EnvVar(key string) string {
	k := strings.TrimPrefix(key, "mmmq.")
	k = strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(k))
	return envPrefix + k
}

// envKeys maps each variable to its core scalar key; built once, panics on a
// collision (a programming error in the struct tags).
var envKeys = func() map[string]leaf {
	m, err := envTable(configSchema)
	if err != nil {
		panic(err.Error())
	}
	return m
}()

// envTable maps each variable to its scalar key of s; lists are file-only.
// Two keys sharing a variable, or a key named like EnvConfigVar or
// EnvServerVar, is an error.
func envTable(s schema) (map[string]leaf, error) {
	m := make(map[string]leaf, len(s.leaves))
	for _, key := range slices.Sorted(maps.Keys(s.leaves)) {
		l := s.leaves[key]
		if l.typ.Kind() == reflect.Slice {
			continue // lists are file-only
		}
		name := EnvVar(key)
		if prev, dup := m[name]; dup {
			return nil, fmt.Errorf("config: keys %s and %s share variable %s", prev.key, key, name)
		}
		if reservedVar(name) {
			return nil, fmt.Errorf("config: key %s collides with %s", key, name)
		}
		m[name] = l
	}
	return m, nil
}

// loadSchema is the key set of one Load: the core keys, the registered
// sections under their keys, and the keys of absent stock plugins (so that
// they are recognised, and compared with their defaults).
func loadSchema(secs []Section, absent []PluginKey) schema {
	s := schema{leaves: maps.Clone(configSchema.leaves), sections: maps.Clone(configSchema.sections)}
	for _, sec := range secs {
		if want := sec.listWant(); want != "" {
			s.addParents(sec.Key())
			s.leaves[sec.Key()] = leaf{key: sec.Key(), typ: sec.typ(), want: want}
			continue
		}
		s.addParents(sec.Key() + ".")
		s.walk(sec.typ(), sec.Key()+".")
	}
	for _, p := range absent {
		s.addParents(p.Key)
		s.leaves[p.Key] = leaf{key: p.Key, typ: reflect.TypeOf(p.Default)}
	}
	return s
}

// addParents makes every level of key above its last segment a mapping of
// s: for mmmq.jetstream.tls.ca-file, mmmq.jetstream and mmmq.jetstream.tls;
// for a section mmmq.broker.dispatch ("mmmq.broker.dispatch." given),
// mmmq.broker (already core) and mmmq.broker.dispatch. A key under such a
// mapping that nothing owns is then an unknown key by its full name.
func (s schema) addParents(key string) {
	for i := len("mmmq."); i < len(key); i++ {
		if key[i] == '.' {
			s.sections[key[:i]] = true
		}
	}
}

// Keys returns every scalar key of the core configuration and of the given
// sections, sorted; each is settable through [EnvVar](key). Lists
// (mmmq.auth.tokens, a list section such as mmmq.broker.dispatchers, a
// list inside a section) are not included.
func Keys(sections ...Section) []string {
	s := loadSchema(sections, nil)
	var out []string
	for key, l := range s.leaves {
		if l.typ.Kind() != reflect.Slice {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// elementSchema returns the key set of one element of the list key l and
// what an element must be: for a list of structs (a list section's, or a
// list field of a section such as mmmq.broker.retention.topics or
// mmmq.auth.tokens), the element type's keys and the list section's
// description or the field's `element:"..."` tag, else one derived from
// the keys ("a mapping with pattern, max-age and max-bytes"). ok is false
// for a list of scalars.
func elementSchema(l leaf) (s schema, want string, ok bool) {
	if l.typ.Kind() != reflect.Slice || l.typ.Elem().Kind() != reflect.Struct {
		return schema{}, "", false
	}
	et := l.typ.Elem()
	if l.want != "" {
		return newSchema(et), l.want, true
	}
	var keys []string
	for f := range et.Fields() {
		if tag := f.Tag.Get("koanf"); tag != "" && tag != "-" {
			keys = append(keys, tag)
		}
	}
	want = "a mapping"
	switch n := len(keys); {
	case n == 1:
		want += " with " + keys[0]
	case n > 1:
		want += " with " + strings.Join(keys[:n-1], ", ") + " and " + keys[n-1]
	}
	return newSchema(et), want, true
}

// sectionLists are the list keys of the sections in s (the keys of s that
// are lists and not core keys): file only, like the core lists.
func sectionLists(s schema) []string {
	var out []string
	for key, l := range s.leaves {
		if _, core := configSchema.leaves[key]; !core && l.typ.Kind() == reflect.Slice {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}
