package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// SourceKind says where a key's effective value came from.
type SourceKind string

// Sources of a value, in increasing precedence.
const (
	// SourceDefault is the built-in default (or, for a dispatcher field, the
	// per-dispatcher default filled in by [Config.Normalize]).
	SourceDefault SourceKind = "default"
	// SourceFile is the YAML file (Effective.File).
	SourceFile SourceKind = "file"
	// SourceEnv is an MMMQ_ environment variable.
	SourceEnv SourceKind = "env"
)

// Setting is one key's effective value and where it came from.
type Setting struct {
	// Key is the full key: "server.port", "mmmq.lineproto.addr", or, for an
	// element of a list of mappings, "mmmq.broker.dispatchers[0].host".
	Key string
	// Value is the effective value, typed as its field: string (or a
	// string enum such as LogFormat), bool, int, int64, time.Duration, a
	// list of strings, or an empty list of mappings (shown as one setting).
	Value any
	// Kind is the source: default, file or environment.
	Kind SourceKind
	// From is the file path for SourceFile, the variable name for
	// SourceEnv, "" for SourceDefault.
	From string
	// Inherited is the key the value was taken from, for a field of a list
	// element the file left out ("mmmq.broker.dispatch.path" for a
	// dispatcher's path; see SectionOf.WithInherited); Kind and From are
	// then that key's. "" otherwise.
	Inherited string
}

// Source returns "default", the file path, or the environment variable
// name; for an inherited value, the key it came from and that key's
// source: "mmmq.broker.dispatch.timeout (MMMQ_BROKER_DISPATCH_TIMEOUT)".
func (s Setting) Source() string {
	src := s.From
	if s.Kind == SourceDefault {
		src = "default"
	}
	if s.Inherited != "" {
		return s.Inherited + " (" + src + ")"
	}
	return src
}

// origins records where Load found the values; the zero value says every
// value is a default.
type origins struct {
	file     string            // the YAML file read; "" when none
	fileKeys map[string]bool   // keys present in the file, list elements as "key[i].field"
	fromEnv  map[string]string // key -> the variable that set it
	// inherits maps a list section's key to its inherited element fields
	// (field -> the key it takes its value from, see WithInherited).
	inherits map[string]map[string]string
}

// Effective is a loaded configuration with the source of each value.
type Effective struct {
	// Config is what Load returns for the same options.
	Config *Config
	// File is the YAML file read, as it was given (--config, $MMMQ_CONFIG
	// or DefaultPath); "" when none was read (DefaultPath absent).
	File string
	// Settings are every key's effective value and source: the core keys
	// in the order of the Config fields (as in configs/mmmq.yaml), then
	// the plugin sections given to Load, in name order. A non-empty list
	// of mappings (mmmq.broker.dispatchers) is given element by element;
	// its fields absent from the file are defaults, except fields
	// inherited from another key (a dispatcher's path and timeout), which
	// take the source of the key they were inherited from
	// (mmmq.broker.dispatch.path and .timeout). Keys of absent stock plugins
	// are not settings (see Config.Warnings).
	Settings []Setting
}

// LoadEffective loads exactly as [Load] does, with the same options,
// validation and errors, and also says where each value came from: the
// default, the file, or an environment variable (for mmmq config check).
func LoadEffective(opts LoadOptions) (*Effective, error) {
	cfg, origin, err := loadOrigins(opts)
	if err != nil {
		return nil, err
	}
	e := &Effective{Config: cfg, File: origin.file}
	origin.inherits = map[string]map[string]string{}
	for _, sv := range cfg.sections {
		if in := sv.sec.inheritedFrom(); in != nil {
			origin.inherits[sv.sec.Key()] = in
		}
	}
	origin.settings(reflect.ValueOf(*cfg), "", &e.Settings)
	for _, name := range slices.Sorted(maps.Keys(cfg.sections)) {
		sv := cfg.sections[name]
		if sv.sec.listWant() != "" {
			origin.list(reflect.ValueOf(sv.value), sv.sec.Key(), &e.Settings)
			continue
		}
		origin.settings(reflect.ValueOf(sv.value), sv.sec.Key()+".", &e.Settings)
	}
	return e, nil
}

// list adds the settings of the list of mappings v at key: element by
// element, or the key itself when the list is empty.
func (o origins) list(v reflect.Value, key string, out *[]Setting) {
	if v.Len() == 0 {
		kind, from := o.source(key)
		*out = append(*out, Setting{Key: key, Value: v.Interface(), Kind: kind, From: from})
		return
	}
	for j := range v.Len() {
		o.settings(v.Index(j), fmt.Sprintf("%s[%d].", key, j), out)
	}
}

func (o origins) settings(v reflect.Value, prefix string, out *[]Setting) {
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		f, key := v.Field(i), prefix+tag
		switch {
		case f.Kind() == reflect.Struct:
			o.settings(f, key+".", out)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.Struct && f.Len() > 0:
			o.list(f, key, out)
		default:
			kind, from := o.source(key)
			*out = append(*out, Setting{Key: key, Value: f.Interface(), Kind: kind, From: from, Inherited: o.inheritedFrom(key)})
		}
	}
}

// source says where key's value came from: the environment wins over the
// file; an inherited field of a list section's element (a dispatcher's
// path) absent from the file has the source of the key it inherits.
func (o origins) source(key string) (SourceKind, string) {
	if name, ok := o.fromEnv[key]; ok {
		return SourceEnv, name
	}
	if o.fileKeys[key] {
		return SourceFile, o.file
	}
	if from := o.inheritedFrom(key); from != "" {
		return o.source(from)
	}
	return SourceDefault, ""
}

// inheritedFrom is the key whose value the list element field key
// ("mmmq.broker.dispatchers[0].path") took, "" when the field is set in
// the environment or the file, or inherits nothing.
func (o origins) inheritedFrom(key string) string {
	if _, ok := o.fromEnv[key]; ok || o.fileKeys[key] {
		return ""
	}
	for list, fields := range o.inherits {
		if rest, ok := strings.CutPrefix(key, list+"["); ok {
			_, field, _ := strings.Cut(rest, "].")
			return fields[field]
		}
	}
	return ""
}

// fileKeys adds to out every key present in raw (a file's nested mapping):
// each leaf, each list, each mapping (a setting may be one: a dispatcher's
// headers), and each field of a list's mapping elements as "key[i].field".
func fileKeys(raw map[string]any, prefix string, out map[string]bool) {
	for name, v := range raw {
		key := prefix + name
		switch x := v.(type) {
		case map[string]any:
			out[key] = true
			fileKeys(x, key+".", out)
		case []any:
			out[key] = true
			for i, el := range x {
				if m, ok := el.(map[string]any); ok {
					fileKeys(m, fmt.Sprintf("%s[%d].", key, i), out)
				}
			}
		default:
			out[key] = true
		}
	}
}
