package config

import (
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
		s.leaves[key] = leaf{key: key, typ: f.Type}
	}
}

// Key sets of Config and of one element of mmmq.broker.dispatchers.
var (
	configSchema     = newSchema(reflect.TypeFor[Config]())
	dispatcherSchema = newSchema(reflect.TypeFor[DispatcherConfig]())
)

// dispatchersKey is the only list-valued key.
const dispatchersKey = "mmmq.broker.dispatchers"

// envPrefix starts every variable of the environment rule.
const envPrefix = "MMMQ_"

// EnvConfigVar names the YAML file when LoadOptions.PathExplicit is false.
const EnvConfigVar = "MMMQ_CONFIG"

// EnvVar returns the environment variable for key under the package's one
// rule: "MMMQ_" + key without a leading "mmmq.", upper-cased, with "." and
// "-" replaced by "_". EnvVar("mmmq.broker.storage.root-dir") is
// "MMMQ_BROKER_STORAGE_ROOT_DIR"; EnvVar("server.port") is "MMMQ_SERVER_PORT".
func EnvVar(key string) string {
	k := strings.TrimPrefix(key, "mmmq.")
	k = strings.NewReplacer(".", "_", "-", "_").Replace(strings.ToUpper(k))
	return envPrefix + k
}

// envKeys maps each variable to its scalar key; built once, panics on a
// collision (a programming error in the struct tags).
var envKeys = func() map[string]leaf {
	m := make(map[string]leaf, len(configSchema.leaves))
	for key, l := range configSchema.leaves {
		if l.typ.Kind() == reflect.Slice {
			continue // lists are file-only
		}
		name := EnvVar(key)
		if prev, dup := m[name]; dup {
			panic("config: keys " + prev.key + " and " + key + " share variable " + name)
		}
		if name == EnvConfigVar {
			panic("config: key " + key + " collides with " + EnvConfigVar)
		}
		m[name] = l
	}
	return m
}()

// Keys returns every scalar key, sorted; each is settable through
// [EnvVar](key). The list mmmq.broker.dispatchers is not included.
func Keys() []string {
	out := make([]string, 0, len(envKeys))
	for _, l := range envKeys {
		out = append(out, l.key)
	}
	slices.Sort(out)
	return out
}
