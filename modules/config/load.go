package config

import (
	"encoding"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
)

// LoadOptions says where Load reads from. The zero value reads DefaultPath
// (or $MMMQ_CONFIG) if present and the process environment.
type LoadOptions struct {
	// Path is the YAML file. "" means $MMMQ_CONFIG if set, else DefaultPath.
	Path string
	// PathExplicit says Path was given by the user (--config): a missing file
	// is then an error and $MMMQ_CONFIG is ignored. When false, $MMMQ_CONFIG
	// (if set) takes precedence over Path, and a missing Path is skipped.
	PathExplicit bool
	// Environ is the environment as "KEY=value" strings; nil means os.Environ().
	Environ []string
	// Sections are the plugin sections the binary contains (see [Section]):
	// their keys under mmmq.<name> are decoded, validated and settable from
	// the environment; other keys under their prefix are unknown keys. The
	// same section listed twice counts once; two sections with one name are
	// an error. Keys of a stock plugin missing here are handled as described
	// at [StockPluginKeys]. config.Module adds the sections registered with
	// [ProvideSection].
	Sections []Section

	// supplied is set by Supply: the fx provider returns it instead of loading.
	supplied *Config
}

// Load builds the configuration from the defaults, the YAML file and the
// environment, in that order of precedence, then normalizes and validates
// it, core keys and opts.Sections alike. Errors name the offending key or
// variable (see [KeyError]); a missing explicit file is an error wrapping
// fs.ErrNotExist. Keys of absent stock plugins set to their defaults are
// returned in Config.Warnings, and the Kubernetes service-link variables
// skipped (MMMQ_PORT=tcp://10.0.0.1:8080 and the like, naming no key) in
// Config.IgnoredVars; a key set to a service link's tcp://IP:port value is
// an error naming the Service.
func Load(opts LoadOptions) (*Config, error) {
	cfg, _, err := loadOrigins(opts)
	return cfg, err
}

// loadOrigins is Load, also returning where the values came from.
func loadOrigins(opts LoadOptions) (*Config, origins, error) {
	var origin origins
	secs, err := uniqueSections(opts.Sections)
	if err != nil {
		return nil, origin, err
	}
	absent := absentStockKeys(secs)
	ls := loadSchema(secs, absent)
	envTab, err := envTable(ls)
	if err != nil {
		return nil, origin, err // a section whose variables collide with other keys
	}

	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	env := parseEnviron(environ)

	path, explicit := resolvePath(opts, env)

	k := koanf.New(".")
	if path != "" {
		read, err := loadFile(k, path, explicit, ls, secs)
		if err != nil {
			return nil, origin, err
		}
		if read {
			origin.file = path
			origin.fileKeys = map[string]bool{}
			fileKeys(k.Raw(), "", origin.fileKeys)
		}
	}

	envMap, fromEnv, ignored, err := envOverrides(env, envTab, sectionLists(ls))
	if err != nil {
		return nil, origin, err
	}
	if err := k.Load(confmap.Provider(envMap, "."), nil); err != nil {
		return nil, origin, fmt.Errorf("config: load environment: %w", err)
	}

	cfg := Default()
	var errs []error
	for _, sec := range secs {
		v, err := sec.decode(k)
		if err != nil {
			errs = append(errs, err)
			k.Delete(sec.Key()) // reported; not again as an unknown key
			continue
		}
		if cfg.sections == nil {
			cfg.sections = map[string]sectionValue{}
		}
		cfg.sections[sec.Name()] = sectionValue{sec: sec, value: v, loaded: true}
		k.Delete(sec.Key())
	}
	warns, perrs := checkAbsentPlugins(k, absent, fromEnv)
	errs = append(errs, perrs...)
	for _, p := range absent {
		k.Delete(p.Key) // and the mappings it leaves empty
		deleteNullParents(k, p.Key)
	}
	if err := decode(k, cfg, ""); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, origin, err
	}
	cfg.Warnings = warns
	cfg.IgnoredVars = ignored
	cfg.loadedWith = reloadOptions(opts, origin.file)
	origin.fromEnv = fromEnv
	cfg.set = map[string]bool{}
	for key := range origin.fileKeys {
		cfg.set[key] = true
	}
	for key := range fromEnv {
		cfg.set[key] = true
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, origin, attributeVars(err, fromEnv)
	}
	return cfg, origin, nil
}

// deleteNullParents deletes each mapping above key (below "mmmq.") that
// the file gave without a value ("admin:" with its keys commented out): it
// belongs to an absent stock section, whose keys were just removed.
func deleteNullParents(k *koanf.Koanf, key string) {
	for i := len(key) - 1; i > len("mmmq."); i-- {
		if key[i] == '.' && k.Exists(key[:i]) && k.Get(key[:i]) == nil {
			k.Delete(key[:i])
		}
	}
}

// reloadOptions are opts for Config.Reload: the file that was read is
// read again, and its absence is then an error (a file moved away must not
// silently bring the defaults back, mmmq.auth off among them).
func reloadOptions(opts LoadOptions, file string) *LoadOptions {
	if file != "" {
		opts.Path, opts.PathExplicit = file, true
	}
	return &opts
}

// parseEnviron keeps the MMMQ_ variables; a later duplicate wins as in os.Getenv.
func parseEnviron(environ []string) map[string]string {
	env := map[string]string{}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, envPrefix) {
			continue
		}
		env[name] = val
	}
	return env
}

// FileOf is the YAML file Load reads for opts, as it was given (--config,
// $MMMQ_CONFIG or the default path), as Effective.File names it; "" when
// Load reads none (a file not named explicitly that is absent). A file
// named explicitly is returned whether or not it exists (Load's error
// then says why it could not be read).
func FileOf(opts LoadOptions) string {
	environ := opts.Environ
	if environ == nil {
		environ = os.Environ()
	}
	path, explicit := resolvePath(opts, parseEnviron(environ))
	if !explicit {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return ""
		}
	}
	return path
}

// resolvePath applies: explicit Path > $MMMQ_CONFIG > Path > DefaultPath.
// The second result says whether a missing file is an error.
func resolvePath(opts LoadOptions, env map[string]string) (string, bool) {
	if opts.PathExplicit && opts.Path != "" {
		return opts.Path, true
	}
	if p := env[EnvConfigVar]; p != "" {
		return p, true
	}
	if opts.Path != "" {
		return opts.Path, false
	}
	return DefaultPath, false
}

// loadFile merges the file at path into k; read is false when a missing
// file that was not named explicitly was skipped. The keys are checked
// against s, and each section's file check (see SectionOf.WithFileCheck)
// sees its mapping as written.
func loadFile(k *koanf.Koanf, path string, explicit bool, s schema, secs []Section) (read bool, err error) {
	if _, err := os.Stat(path); err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("config: open %s: %w", path, err)
	}
	fk := koanf.New(".")
	if err := fk.Load(file.Provider(path), yaml.Parser()); err != nil {
		return false, fmt.Errorf("config: read %s: %w", path, err)
	}
	if err := checkKeys(fk.Raw(), s); err != nil {
		return false, err // each error names its full key
	}
	var errs []error
	for _, sec := range secs {
		if m, ok := fk.Get(sec.Key()).(map[string]any); ok {
			errs = append(errs, sec.fileCheck(m))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return true, k.Merge(fk)
}

// checkKeys reports every file key that is not part of the schema s, by full
// name, and sections given a scalar.
func checkKeys(raw map[string]any, s schema) error {
	var errs []error
	walkKeys(s, raw, "", "", false, &errs)
	return errors.Join(errs...)
}

// walkKeys checks m against s. rel is the key relative to s, shown is the
// full key used in messages; inList says m is inside a list's element.
func walkKeys(s schema, m map[string]any, rel, shown string, inList bool, errs *[]error) {
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v := m[name]
		r, full := rel+name, shown+name
		if l, ok := s.leaves[r]; ok {
			elem, want, isList := elementSchema(l)
			if !isList {
				continue // the decoder checks the value's type
			}
			elems, ok := v.([]any)
			if !ok {
				continue // the decoder reports the type
			}
			for i, el := range elems {
				em, ok := el.(map[string]any)
				if !ok {
					*errs = append(*errs, invalid(fmt.Sprintf("%s[%d]", full, i), "must be %s", want))
					continue
				}
				walkKeys(elem, em, "", fmt.Sprintf("%s[%d].", full, i), true, errs)
			}
			continue
		}
		if !s.sections[r] {
			n := len(*errs)
			unknownLeaves(v, full, errs)
			if rel == "mmmq." && !inList {
				for _, e := range (*errs)[n:] {
					if ke, ok := e.(*KeyError); ok {
						ke.Problem = noSectionHint("mmmq." + name)
					}
				}
			}
			continue
		}
		switch sub := v.(type) {
		case nil:
			// "server:" with nothing under it: keep the defaults.
		case map[string]any:
			walkKeys(s, sub, r+".", full+".", inList, errs)
		default:
			*errs = append(*errs, invalid(full, "must be a mapping, got %T", v))
		}
	}
}

// unknownLeaves reports every leaf under an unknown key by its full name,
// so a misspelled section shows the whole key ("mmmq.broker.segmnt.max-bytes").
func unknownLeaves(v any, full string, errs *[]error) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		*errs = append(*errs, unknownKey(full))
		return
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		unknownLeaves(m[name], full+"."+name, errs)
	}
}

// noSectionHint says what to do about a key under section, a section the
// loader was not given: the usual cause is a plugin that is not in the
// binary, or whose section was not passed to the loader.
func noSectionHint(section string) string {
	return "no section " + section + " is loaded; if a plugin reads it, give app.Main the plugin's module " +
		"(app.WithModules; the module registers its section with config.ProvideSection), " +
		"or pass the section in config.LoadOptions.Sections"
}

// knownPrefix says whether some known variable starts like name up to its
// second "_" (MMMQ_ORDERS_ for MMMQ_ORDERS_ORDER_HOST): whether name's
// first segment names a section.
func knownPrefix(envTab map[string]leaf, name string) bool {
	seg, _, _ := strings.Cut(strings.TrimPrefix(name, "MMMQ_"), "_")
	prefix := "MMMQ_" + seg + "_"
	for v := range envTab {
		if strings.HasPrefix(v, prefix) || v == "MMMQ_"+seg {
			return true
		}
	}
	return false
}

// envOverrides turns the MMMQ_ variables into a flat key -> value map with
// values already of the key's type, and remembers which variable set which
// key. envTab maps each known variable to its key; lists are the sections'
// list keys (file only, as the core lists). Kubernetes service links
// that name no key are skipped and returned in ignored, sorted; one naming
// a key with a <proto>://<IP>:<port> value is an error naming the Service.
func envOverrides(env map[string]string, envTab map[string]leaf, lists []string) (out map[string]any, fromEnv map[string]string, ignored []string, err error) {
	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	slices.Sort(names)

	out = map[string]any{}
	fromEnv = map[string]string{}
	var errs []error
	for _, name := range names {
		if reservedVar(name) {
			continue
		}
		val := env[name]
		l, ok := envTab[name]
		if !ok {
			if isServiceLink(name, val) {
				ignored = append(ignored, name)
				continue
			}
			problem := "matches no key (rule: MMMQ_ + key without leading \"mmmq.\", upper-cased, \".\" and \"-\" as \"_\")"
			switch {
			case name == EnvVar(dispatchersKey) || strings.HasPrefix(name, EnvVar(dispatchersKey)+"_"):
				problem = "mmmq.broker.dispatchers can only be set in the YAML file"
			case fileOnlyList(lists, name) != "":
				problem = fileOnlyList(lists, name) + " can only be set in the YAML file"
			case name == EnvVar(authTokensKey) || strings.HasPrefix(name, EnvVar(authTokensKey)+"_"):
				problem = "mmmq.auth.tokens can only be set in the YAML file"
			case serviceLinkNamed(name):
				problem += fmt.Sprintf("; it is named like a Kubernetes service link, but its value %q is not what Kubernetes sets there", val)
			case !knownPrefix(envTab, name):
				seg, _, _ := strings.Cut(strings.TrimPrefix(name, "MMMQ_"), "_")
				problem += "; " + noSectionHint("mmmq."+strings.ToLower(seg))
			}
			errs = append(errs, unknownVar(name, problem))
			continue
		}
		if svc, ok := linkService(name, val); ok {
			errs = append(errs, &KeyError{Key: l.key, Var: name, kind: ErrInvalidValue, Problem: fmt.Sprintf(
				"got %q, a Kubernetes service link: a Service named %q in the pod's namespace injects %s; "+
					"set enableServiceLinks: false in the pod spec or rename the Service", val, svc, name)})
			continue
		}
		v, err := parseEnvValue(l.typ, val)
		if err != nil {
			errs = append(errs, &KeyError{Key: l.key, Var: name, Problem: err.Error(), kind: ErrInvalidValue})
			continue
		}
		out[l.key] = v
		fromEnv[l.key] = name
	}
	return out, fromEnv, ignored, errors.Join(errs...)
}

// fileOnlyList returns the list key among lists whose variable name is,
// or starts ("MMMQ_BROKER_RETENTION_TOPICS_0_PATTERN"), or "".
func fileOnlyList(lists []string, name string) string {
	for _, key := range lists {
		if v := EnvVar(key); name == v || strings.HasPrefix(name, v+"_") {
			return key
		}
	}
	return ""
}

func parseEnvValue(t reflect.Type, s string) (any, error) {
	switch {
	case t == durationType:
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("not a duration like \"30s\": %q", s)
		}
		return d, nil
	case t.Kind() == reflect.String:
		return s, nil
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("not a boolean (true/false): %q", s)
		}
		return b, nil
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		n, err := strconv.ParseInt(s, 10, t.Bits())
		if err != nil {
			return nil, fmt.Errorf("not a base-10 integer: %q", s)
		}
		return n, nil
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		f, err := strconv.ParseFloat(s, t.Bits())
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("not a decimal number like \"0.25\": %q", s)
		}
		return f, nil
	}
	return nil, fmt.Errorf("type %s cannot be set from the environment", t)
}

// decode unmarshals k onto out (a pointer to a struct holding the defaults)
// strictly: no unused keys, no weak typing, durations only as strings with a
// unit. prefix is put before the keys named in errors ("mmmq.lineproto." for
// a section's sub-tree, "" for the whole configuration).
func decode(k *koanf.Koanf, out any, prefix string) error {
	return decodeAt(k, "", out, prefix)
}

// decodeAt is decode of the value at path ("" for all of k): a list
// section's list, whose element keys are named prefix + "[i].key".
func decodeAt(k *koanf.Koanf, path string, out any, prefix string) error {
	dc := mapstructure.DecoderConfig{
		TagName:          "koanf",
		ErrorUnused:      true,
		WeaklyTypedInput: false,
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, integerHook),
	}
	err := k.UnmarshalWithConf(path, out, koanf.UnmarshalConf{Tag: "koanf", DecoderConfig: &dc})
	if err == nil {
		return nil
	}
	var errs []error
	for _, e := range flatten(err) {
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			var ue *mapstructure.UnconvertibleTypeError
			if errors.As(de, &ue) {
				errs = append(errs, invalid(prefix+de.Name(), "must be %s; got %s", typeWords(ue.Expected.Type()), valueWords(ue.Value)))
				continue
			}
			if msg := de.Unwrap().Error(); strings.HasPrefix(msg, "source data must be an array or slice") {
				errs = append(errs, invalid(prefix+de.Name(), "must be a list (in brackets, or one \"- \" line per element); got %s", strings.TrimPrefix(msg, "source data must be an array or slice, got ")))
				continue
			}
			errs = append(errs, invalid(prefix+de.Name(), "%v", de.Unwrap()))
			continue
		}
		errs = append(errs, fmt.Errorf("config: decode: %w", e))
	}
	return errors.Join(errs...)
}

// typeWords names what a value of t is in the file's terms: "a string",
// "a whole number", "a list", "a mapping", ...
func typeWords(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "a list of " + strings.TrimPrefix(typeWords(t.Elem()), "a ") + "s"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "of type " + t.String()
}

// valueWords shows a file value: a scalar as it is, a list or mapping by
// its shape.
func valueWords(v any) string {
	switch x := v.(type) {
	case []any:
		return fmt.Sprintf("a list of %d", len(x))
	case map[string]any:
		return "a mapping"
	case string:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprintf("%v", v)
}

// integerHook refuses a fraction where a whole number is wanted
// ("port: 80.5", "max-topics: 1e3" is fine): mapstructure would truncate it
// silently even without weak typing.
func integerHook(from, to reflect.Type, data any) (any, error) {
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
	default:
		return data, nil
	}
	switch from.Kind() {
	case reflect.Float32, reflect.Float64:
		f := reflect.ValueOf(data).Float()
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("must be a whole number; got %v", data)
		}
	}
	return data, nil
}

// durationHook parses Go duration strings ("30s", "1m30s") and refuses
// numbers, which would otherwise decode as nanoseconds ("timeout: 30" = 30ns).
// It serves time.Duration and a duration type of a module's own (an int64
// type whose pointer has UnmarshalText, such as dispatcher.Duration).
func durationHook(from, to reflect.Type, data any) (any, error) {
	if !isDuration(to) || from == to {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		d, err := time.ParseDuration(reflect.ValueOf(data).String())
		if err != nil {
			return nil, fmt.Errorf("must be a duration with a unit such as \"30s\"; got %q", data)
		}
		return reflect.ValueOf(d).Convert(to).Interface(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return nil, fmt.Errorf("must be a duration with a unit such as \"30s\"; got bare number %v", data)
	}
	return data, nil
}

// isDuration says whether t is time.Duration or an int64 type whose
// pointer is an encoding.TextUnmarshaler (a module's own duration type).
func isDuration(t reflect.Type) bool {
	return t == durationType || t.Kind() == reflect.Int64 && reflect.PointerTo(t).Implements(textUnmarshalerType)
}

var textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()

// Problems returns the problems of err, a validation error of this package
// or of a section's check: the leaves of its errors.Join tree, each
// usually a [*KeyError]; nil for a nil err.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	return flatten(err)
}

// flatten expands errors.Join trees into their leaves.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// attributeVars marks validation errors for keys that came from the
// environment with the variable's name.
func attributeVars(err error, fromEnv map[string]string) error {
	for _, e := range flatten(err) {
		var ke *KeyError
		if errors.As(e, &ke) && ke.Var == "" {
			ke.Var = fromEnv[ke.Key]
		}
	}
	return err
}
