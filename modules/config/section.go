package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"

	"github.com/knadh/koanf/v2"
)

// Section is a plugin's configuration section: the keys under
// "mmmq.<name>", with their defaults, validation and environment overrides
// (same rule as every key: MMMQ_<NAME>_<KEY>). Build one with [NewSection];
// register it with the loader through [LoadOptions].Sections (when the
// configuration is loaded before the Fx graph) or [ProvideSection] (when
// config.Module loads it). Only this package implements Section.
type Section interface {
	// Name is the section's name, e.g. "lineproto".
	Name() string
	// Key is the section's full key, "mmmq." + Name().
	Key() string
	// Defaults maps each scalar key of the section, in full
	// ("mmmq.lineproto.addr"), to its default value, typed as its field
	// (string, bool, int64, time.Duration...). A new map on each call.
	Defaults() map[string]any

	typ() reflect.Type
	decode(k *koanf.Koanf) (any, error)
	check(v any) error
}

// sectionValue is one decoded section held by a Config.
type sectionValue struct {
	sec    Section
	value  any  // the section's T
	loaded bool // decoded by Load (not set with SetSectionValue)
}

// sectionNameRE is the allowed section name: one lower-case key segment.
var sectionNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

// SectionOf is a [Section] whose decoded value has type T. T is a struct
// whose koanf tags are the keys under mmmq.<name>, like [StorageConfig]:
// fields are strings, booleans, integers, time.Duration, nested structs of
// those, or slices (file only, default nil).
type SectionOf[T any] struct {
	name     string
	defaults T
	validate func(*T) error
}

// NewSection returns the section "mmmq."+name with the given defaults and
// validation. validate (may be nil) gets the decoded value after the file and
// the environment were applied and returns nil or the problems found; it
// should build them with [InvalidValue] (or [CheckListenAddr],
// [CheckIntRange]) naming the full key, e.g. "mmmq.lineproto.addr", and join
// several with errors.Join. An error that is not a [*KeyError] is reported
// under the section's key. validate must not keep or modify the value.
//
// NewSection panics (a programming error, at package initialisation) when
// name does not match ^[a-z][a-z0-9-]{0,62}$, when name is "broker" (a core
// section), when T is not a struct, or when a slice or map default is not nil.
func NewSection[T any](name string, defaults T, validate func(*T) error) *SectionOf[T] {
	if !sectionNameRE.MatchString(name) {
		panic(fmt.Sprintf("config: NewSection: name %q does not match %s", name, sectionNameRE))
	}
	if configSchema.sections["mmmq."+name] || configSchema.leaves["mmmq."+name].key != "" {
		panic(fmt.Sprintf("config: NewSection: mmmq.%s is a core key", name))
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: NewSection(%q): %s is not a struct", name, t))
	}
	checkNilCollections(reflect.ValueOf(defaults), name)
	return &SectionOf[T]{name: name, defaults: defaults, validate: validate}
}

func checkNilCollections(v reflect.Value, name string) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Struct:
			checkNilCollections(f, name)
		case reflect.Slice, reflect.Map:
			if !f.IsNil() {
				panic(fmt.Sprintf("config: NewSection(%q): default of %s must be nil", name, v.Type().Field(i).Name))
			}
		}
	}
}

// Name returns the section's name, e.g. "lineproto".
func (s *SectionOf[T]) Name() string { return s.name }

// Key returns "mmmq." + the section's name.
func (s *SectionOf[T]) Key() string { return "mmmq." + s.name }

// Default returns a copy of the section's defaults.
func (s *SectionOf[T]) Default() T { return s.defaults }

// Defaults maps each scalar key of the section, in full, to its default
// value, typed as its field. Slices (file-only keys) are left out.
func (s *SectionOf[T]) Defaults() map[string]any {
	out := map[string]any{}
	collectDefaults(reflect.ValueOf(s.defaults), s.Key()+".", out)
	return out
}

func collectDefaults(v reflect.Value, prefix string, out map[string]any) {
	t := v.Type()
	for i := range t.NumField() {
		tag := t.Field(i).Tag.Get("koanf")
		if tag == "" || tag == "-" {
			continue
		}
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Struct:
			collectDefaults(f, prefix+tag+".", out)
		case reflect.Slice, reflect.Map:
		default:
			out[prefix+tag] = f.Interface()
		}
	}
}

func (s *SectionOf[T]) typ() reflect.Type { return reflect.TypeFor[T]() }

// decode unmarshals k (the sub-tree under Key, keys relative) onto a copy of
// the defaults, strictly as the core keys are.
func (s *SectionOf[T]) decode(k *koanf.Koanf) (any, error) {
	v := s.defaults
	if err := decode(k, &v, s.Key()+"."); err != nil {
		return nil, err
	}
	return v, nil
}

// check runs validate; problems that are not a *KeyError are reported under
// the section's key.
func (s *SectionOf[T]) check(v any) error {
	if s.validate == nil {
		return nil
	}
	t, ok := v.(T)
	if !ok {
		return invalid(s.Key(), "holds %T, want %s", v, reflect.TypeFor[T]())
	}
	err := s.validate(&t)
	if err == nil {
		return nil
	}
	var errs []error
	for _, e := range flatten(err) {
		var ke *KeyError
		if !errors.As(e, &ke) {
			e = invalid(s.Key(), "%v", e)
		}
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}

// SectionValue returns the value of sec held by cfg: what Load decoded when
// sec was among LoadOptions.Sections (or set with [SetSectionValue]), else
// sec's defaults (also for a nil cfg).
func SectionValue[T any](cfg *Config, sec *SectionOf[T]) T {
	if cfg != nil {
		if sv, ok := cfg.sections[sec.name]; ok && sv.sec == Section(sec) {
			if v, ok := sv.value.(T); ok {
				return v
			}
		}
	}
	return sec.defaults
}

// SetSectionValue stores v as the value of sec in cfg, for a Config built in
// code (tests, embedding applications). It is not validated here: [Supply]
// and [Config.Validate] check it with sec's validation.
func SetSectionValue[T any](cfg *Config, sec *SectionOf[T], v T) {
	if cfg.sections == nil {
		cfg.sections = map[string]sectionValue{}
	}
	cfg.sections[sec.name] = sectionValue{sec: sec, value: v}
}

// validateSections checks every held section, in name order.
func (c *Config) validateSections() []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.sections)) {
		sv := c.sections[name]
		if err := sv.sec.check(sv.value); err != nil {
			errs = append(errs, flatten(err)...)
		}
	}
	return errs
}

// uniqueSections drops repeated sections (the same value given twice) and
// refuses two different sections with one name.
func uniqueSections(in []Section) ([]Section, error) {
	var out []Section
	byName := map[string]Section{}
	for _, s := range in {
		if s == nil {
			return nil, errors.New("config: nil Section in LoadOptions.Sections")
		}
		if prev, ok := byName[s.Name()]; ok {
			if prev != s {
				return nil, fmt.Errorf("config: two different sections are named %s", s.Key())
			}
			continue
		}
		byName[s.Name()] = s
		out = append(out, s)
	}
	return out, nil
}

// InvalidValue returns a [*KeyError] for key (in full, e.g.
// "mmmq.lineproto.addr") wrapping [ErrInvalidValue]; its text is
// "config: <key>: <problem>", plus the environment variable when the value
// came from one. For a section's validate function.
func InvalidValue(key, format string, args ...any) error {
	return invalid(key, format, args...)
}

// CheckListenAddr returns nil when addr is "" (off) or host:port with a port
// of 0..65535, else a [*KeyError] naming key.
func CheckListenAddr(key, addr string) error {
	var v validator
	v.listenAddr(key, addr)
	return errors.Join(v.errs...)
}

// CheckIntRange returns nil when lo <= n <= hi, else a [*KeyError] naming key
// ("must be between lo and hi", or "at least lo" when hi is math.MaxInt64).
func CheckIntRange(key string, n, lo, hi int64) error {
	var v validator
	v.intRange(key, n, lo, hi)
	return errors.Join(v.errs...)
}
