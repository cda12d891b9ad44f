package config

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/knadh/koanf/v2"
)

// Section is a module's or a plugin's configuration section: the keys under
// "mmmq.<path>", with their defaults, validation and environment overrides
// (same rule as every key: MMMQ_<PATH>_<KEY>, e.g.
// MMMQ_BROKER_DISPATCH_BACKOFF_MAX for mmmq.broker.dispatch.backoff-max).
// Build one with [NewSection]; the module that reads it registers it with
// [ProvideSection], and the loader gets it from there (config.Module when it
// loads; [FindSections] for a binary that loads before building the
// application). Only this package implements Section.
type Section interface {
	// Name is the section's path under "mmmq.", e.g. "lineproto" or
	// "broker.dispatch".
	Name() string
	// Key is the section's full key, "mmmq." + Name().
	Key() string
	// Defaults maps each scalar key of the section, in full
	// ("mmmq.lineproto.addr"), to its default value, typed as its field
	// (string, bool, int64, time.Duration...; a string type of the
	// module's own, an enum, as a plain string). A new map on each call.
	Defaults() map[string]any

	typ() reflect.Type
	// listWant is what one element of a list section must be ("a mapping
	// with name, host and patterns"), "" for a section of keys.
	listWant() string
	// inheritedFrom maps an element field of a list section ("path") to
	// the key whose value it takes when absent (see WithInherited).
	inheritedFrom() map[string]string
	decode(k *koanf.Koanf) (any, error)
	fileCheck(raw map[string]any) error
	normalize(v any, w View) any
	check(v any) error
	checkAcross(v any, w View) error
}

// sectionValue is one decoded section held by a Config.
type sectionValue struct {
	sec    Section
	value  any  // the section's T
	loaded bool // decoded by Load (not set with SetSectionValue)
}

// sectionNameRE is the allowed section path: one or more lower-case key
// segments joined by ".".
var sectionNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}(\.[a-z][a-z0-9-]{0,62})*$`)

// SectionOf is a [Section] whose decoded value has type T. T is a struct
// whose koanf tags are the keys under mmmq.<path>, like [ServerConfig]:
// fields are strings, booleans, integers, time.Duration, nested structs of
// those, or slices (file only, default nil).
type SectionOf[T any] struct {
	name     string
	defaults T
	validate func(*T) error
	across   func(*T, View) error
	file     func(map[string]any) error
	norm     func(*T, View)

	// A list section (NewListSection): what an element must be, the
	// element defaults that fill an element's zero fields, and the fields
	// inherited from other keys.
	want     string
	elem     reflect.Value
	inherits map[string]string
}

// NewSection returns the section "mmmq."+path with the given defaults and
// validation. path is one key segment ("lineproto") or several joined by
// "." ("broker.dispatch": the section owns the subtree mmmq.broker.dispatch
// inside the core mapping mmmq.broker, whose other keys stay unknown unless
// a section or a core field owns them). validate (may be nil) gets the
// decoded value after the file and the environment were applied and
// returns nil or the problems found; it should build them with
// [InvalidValue] (or [CheckListenAddr], [CheckIntRange]) naming the full
// key, e.g. "mmmq.lineproto.addr", and join several with errors.Join. An
// error that is not a [*KeyError] is reported under the section's key.
// validate must not keep or modify the value.
//
// NewSection panics (a programming error, at package initialisation) when
// path does not match ^[a-z][a-z0-9-]{0,62}(\.[a-z][a-z0-9-]{0,62})*$,
// when mmmq.<path> is a core key or mapping ("broker"), lies under a core
// key, or holds one, when T is not a struct, or when a slice or map default
// is not nil.
func NewSection[T any](path string, defaults T, validate func(*T) error) *SectionOf[T] {
	name := path
	if !sectionNameRE.MatchString(name) {
		panic(fmt.Sprintf("config: NewSection: path %q does not match %s", name, sectionNameRE))
	}
	if err := coreOverlap("mmmq." + name); err != "" {
		panic(fmt.Sprintf("config: NewSection: mmmq.%s %s", name, err))
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: NewSection(%q): %s is not a struct", name, t))
	}
	checkNilCollections(reflect.ValueOf(defaults), name)
	return &SectionOf[T]{name: name, defaults: defaults, validate: validate}
}

// NewListSection returns the section "mmmq."+path whose value is a list of
// mappings, L a slice of the struct E, such as mmmq.broker.dispatchers (a
// list of dispatcher.Settings). Like every list it is set in the file only
// (an environment variable naming it is refused, naming the key); its
// default is the empty list. Each element is checked against E's koanf
// keys (an unknown key is named in full, "mmmq.broker.dispatchers[0].hots";
// an element that is not a mapping is refused as "must be "+want), then
// decoded, and its zero fields, nested structs field by field, take the
// value of the same field of elem (the element defaults: a dispatcher's
// commit.max-count 1000). validate is as [NewSection]'s, given the whole
// list; it should name an element's keys in full
// ("mmmq.broker.dispatchers[1].name").
//
// NewListSection panics as NewSection does, and when E is not a struct.
func NewListSection[L ~[]E, E any](path, want string, elem E, validate func(*L) error) *SectionOf[L] {
	if !sectionNameRE.MatchString(path) {
		panic(fmt.Sprintf("config: NewListSection: path %q does not match %s", path, sectionNameRE))
	}
	if err := coreOverlap("mmmq." + path); err != "" {
		panic(fmt.Sprintf("config: NewListSection: mmmq.%s %s", path, err))
	}
	if et := reflect.TypeFor[E](); et.Kind() != reflect.Struct {
		panic(fmt.Sprintf("config: NewListSection(%q): element %s is not a struct", path, et))
	}
	if want == "" {
		panic(fmt.Sprintf("config: NewListSection(%q): say what an element must be", path))
	}
	return &SectionOf[L]{name: path, validate: validate, want: want, elem: reflect.ValueOf(elem)}
}

// WithInherited returns a copy of the list section s in which an element
// field (a koanf key of the element, "path") that is absent or zero takes
// the value of another key, named in full ("mmmq.broker.dispatch.path"),
// when the configuration is normalized; mmmq config check shows that key
// as the field's source. The field and the key must have the same type.
// Call it once, where the section is declared. It panics when s is not a
// list section.
func (s *SectionOf[T]) WithInherited(fields map[string]string) *SectionOf[T] {
	if s.want == "" {
		panic(fmt.Sprintf("config: WithInherited: %s is not a list section", s.Key()))
	}
	c := *s
	c.inherits = maps.Clone(fields)
	return &c
}

// coreOverlap says how key overlaps the core schema ("" when it does not):
// it is a core key or mapping, lies under a core key, or holds one.
func coreOverlap(key string) string {
	if configSchema.sections[key] || configSchema.leaves[key].key != "" {
		return "is a core key"
	}
	for i := range len(key) {
		if key[i] == '.' && configSchema.leaves[key[:i]].key != "" {
			return "lies under the core key " + key[:i]
		}
	}
	for k := range configSchema.leaves {
		if strings.HasPrefix(k, key+".") {
			return "holds the core key " + k
		}
	}
	return ""
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

// Name returns the section's path under "mmmq.", e.g. "lineproto" or
// "broker.dispatch".
func (s *SectionOf[T]) Name() string { return s.name }

// Key returns "mmmq." + the section's name.
func (s *SectionOf[T]) Key() string { return "mmmq." + s.name }

// Default returns a copy of the section's defaults.
func (s *SectionOf[T]) Default() T { return s.defaults }

// Defaults maps each key of the section, in full, to its default value,
// typed as its field; a list (a file-only key, empty by default: a slice
// field, or a list section's own key) has the value []any(nil).
func (s *SectionOf[T]) Defaults() map[string]any {
	out := map[string]any{}
	if s.want != "" {
		out[s.Key()] = []any(nil)
		return out
	}
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
		case reflect.Slice:
			out[prefix+tag] = []any(nil)
		case reflect.Map:
		default:
			out[prefix+tag] = plainValue(f)
		}
	}
}

// plainValue is f's value, a field of a string type of its own (an enum
// such as topicqueue.OnCorruption) as a plain string, so that a key's
// value has the same type whether a section holds it or the stock list
// ([StockPluginKeys], which cannot name the module's types) does.
func plainValue(f reflect.Value) any {
	if f.Kind() == reflect.String && f.Type() != reflect.TypeFor[string]() {
		return f.String()
	}
	return f.Interface()
}

// WithCrossCheck returns a copy of s that also runs across, a check of
// the section against other keys (core or of other sections), e.g.
// mmmq.broker.memory.max-inflight-bytes against
// mmmq.broker.segment.max-record-bytes. across runs after every section's
// own validation and the core checks, so that [View.Failed] knows which
// keys already have a problem; it returns nil or the problems found, built
// as validate's are (a problem that is not a [*KeyError] is reported under
// the section's key). It must not keep or modify the value. Call it once,
// where the section is declared:
//
//	var MemorySection = config.NewSection("broker.memory", MemoryConfig{...}, nil).WithCrossCheck(checkMemory)
func (s *SectionOf[T]) WithCrossCheck(across func(*T, View) error) *SectionOf[T] {
	c := *s
	c.across = across
	return &c
}

// WithFileCheck returns a copy of s that also runs file, a check of the
// section's mapping as the file wrote it (raw YAML values, before
// decoding), for what decoding cannot tell apart: mmmq.auth refuses an
// explicit empty "topics: []", which would decode like an omitted list
// and grant every topic. file gets the mapping at the section's key when
// the file has one and returns nil or the problems found, built as
// validate's are; they stop the load before decoding. Call it once, where
// the section is declared.
func (s *SectionOf[T]) WithFileCheck(file func(raw map[string]any) error) *SectionOf[T] {
	c := *s
	c.file = file
	return &c
}

func (s *SectionOf[T]) fileCheck(raw map[string]any) error {
	if s.file == nil {
		return nil
	}
	return s.underKey(s.file(raw))
}

// WithNormalize returns a copy of s whose value norm may complete when the
// configuration is normalized (after decoding, before every check): a
// default that follows another key, for example. norm gets the decoded
// value and a read-only View ([View.IsSet] says whether the file or the
// environment gave a key); it must not keep the value. Call it once,
// where the section is declared:
//
//	// max-record-bytes, when not set, follows a smaller segment size.
//	var SegmentSection = config.NewSection("broker.segment", SegmentConfig{...}, validate).WithNormalize(fit)
func (s *SectionOf[T]) WithNormalize(norm func(*T, View)) *SectionOf[T] {
	c := *s
	c.norm = norm
	return &c
}

// View is the read-only view of the whole configuration that a cross
// check (see [SectionOf.WithCrossCheck]) gets.
type View struct {
	c *Config
	v *validator
}

// Value returns the value of the scalar key (in full, e.g.
// "mmmq.broker.segment.max-record-bytes"), typed as its field (string,
// bool, int, int64, time.Duration...): the value of the section owning it
// when the Config holds that section, else the key's stock default (see
// [StockPluginKeys]), else the core field; nil when no such key is known.
func (w View) Value(key string) any { return w.c.lookup(key) }

// Failed reports whether key (in full) already has a problem, found by
// its own section's validation or the core checks: a check whose bound
// comes from key is then skipped, so that only the first cause is
// reported.
func (w View) Failed(key string) bool { return w.v != nil && w.v.failed(key) }

// IsSet reports whether the file or the environment gave key (in full),
// as opposed to its default. False for every key of a Config built in
// code (Default, SetSectionValue).
func (w View) IsSet(key string) bool { return w.c.set[key] }

func (s *SectionOf[T]) typ() reflect.Type { return reflect.TypeFor[T]() }

func (s *SectionOf[T]) listWant() string { return s.want }

func (s *SectionOf[T]) inheritedFrom() map[string]string { return s.inherits }

// decode unmarshals the section's sub-tree of k (the whole configuration)
// onto a copy of the defaults, strictly as the core keys are; a list
// section's list onto an empty list.
func (s *SectionOf[T]) decode(k *koanf.Koanf) (any, error) {
	v := s.defaults
	if s.want != "" {
		if !k.Exists(s.Key()) || k.Get(s.Key()) == nil {
			return v, nil
		}
		if err := decodeAt(k, s.Key(), &v, s.Key()); err != nil {
			return nil, err
		}
		return v, nil
	}
	if err := decode(k.Cut(s.Key()), &v, s.Key()+"."); err != nil {
		return nil, err
	}
	return v, nil
}

// normalize returns v completed by the section's WithNormalize function,
// and, for a list section, with its element defaults and inherited fields
// filled (see NewListSection and WithInherited; the list is a copy).
func (s *SectionOf[T]) normalize(v any, w View) any {
	t, ok := v.(T)
	if ok && s.norm != nil {
		s.norm(&t, w)
		v = t
	}
	if !ok || s.want == "" || reflect.ValueOf(t).Len() == 0 {
		return v
	}
	src := reflect.ValueOf(t)
	out := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
	reflect.Copy(out, src)
	for i := range out.Len() {
		el := out.Index(i)
		fillZero(el, s.elem)
		for field, from := range s.inherits {
			f := fieldByKey(el, field)
			val := w.Value(from)
			if f.IsValid() && f.IsZero() && val != nil && reflect.TypeOf(val).ConvertibleTo(f.Type()) {
				f.Set(reflect.ValueOf(val).Convert(f.Type()))
			}
		}
	}
	return out.Interface()
}

// fillZero sets every zero field of dst (nested structs field by field)
// to the same field of def.
func fillZero(dst, def reflect.Value) {
	for i := range dst.NumField() {
		f := dst.Field(i)
		switch {
		case f.Kind() == reflect.Struct:
			fillZero(f, def.Field(i))
		case f.IsZero() && !def.Field(i).IsZero():
			f.Set(def.Field(i))
		}
	}
}

// fieldByKey returns the field of the struct v whose koanf tag is key,
// the zero Value when there is none.
func fieldByKey(v reflect.Value, key string) reflect.Value {
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("koanf") == key {
			return v.Field(i)
		}
	}
	return reflect.Value{}
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
	return s.underKey(s.validate(&t))
}

// checkAcross runs the cross check (see WithCrossCheck), like check.
func (s *SectionOf[T]) checkAcross(v any, w View) error {
	t, ok := v.(T)
	if s.across == nil || !ok {
		return nil // a wrong type is check's to report
	}
	return s.underKey(s.across(&t, w))
}

// underKey reports the problems of err that are not a *KeyError under the
// section's key.
func (s *SectionOf[T]) underKey(err error) error {
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

// EditSection sets the value of sec in cfg to its current value (see
// [SectionValue]) changed by edit, for a Config built in code (tests):
//
//	config.EditSection(cfg, dispatcher.ConfigSection, func(d *dispatcher.Config) { d.MaxResends = 0 })
func EditSection[T any](cfg *Config, sec *SectionOf[T], edit func(*T)) {
	v := SectionValue(cfg, sec)
	edit(&v)
	SetSectionValue(cfg, sec, v)
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

// validateSections checks every held section with its own validation, in
// name order, marking the keys with a problem in v, and returns the
// problems.
func (c *Config) validateSections(v *validator) []error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(c.sections)) {
		sv := c.sections[name]
		if err := sv.sec.check(sv.value); err != nil {
			for _, e := range flatten(err) {
				v.mark(e)
				errs = append(errs, e)
			}
		}
	}
	return errs
}

// crossCheckSections runs the cross checks of the held sections (see
// SectionOf.WithCrossCheck), in name order, after every other check, and
// returns their problems (marked in v).
func (c *Config) crossCheckSections(v *validator) []error {
	var errs []error
	w := View{c: c, v: v}
	for _, name := range slices.Sorted(maps.Keys(c.sections)) {
		sv := c.sections[name]
		if err := sv.sec.checkAcross(sv.value, w); err != nil {
			for _, e := range flatten(err) {
				v.mark(e)
				errs = append(errs, e)
			}
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
		for _, o := range out {
			if strings.HasPrefix(s.Key(), o.Key()+".") || strings.HasPrefix(o.Key(), s.Key()+".") {
				return nil, fmt.Errorf("config: sections %s and %s overlap: one key belongs to one section", o.Key(), s.Key())
			}
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

// CheckDurationRange returns nil when lo <= d <= hi, else a [*KeyError]
// naming key, the bounds and d as durations ("must be between 1s and 24h;
// got 500ms").
func CheckDurationRange(key string, d, lo, hi time.Duration) error {
	if d >= lo && d <= hi {
		return nil
	}
	return InvalidValue(key, "must be between %s and %s; got %s", shortDuration(lo), shortDuration(hi), shortDuration(d))
}

// shortDuration is d as time.Duration.String writes it without the zero
// units at its end: 24h, 1m30s, 500ms.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// CheckPositive returns nil when d > 0, else a [*KeyError] naming key
// ("must be a duration > 0 such as \"30s\"").
func CheckPositive(key string, d time.Duration) error {
	var v validator
	v.positive(key, d)
	return errors.Join(v.errs...)
}

// CheckNonNegative returns nil when d >= 0, else a [*KeyError] naming key;
// zero says what 0 means for the key ("off", "keep forever").
func CheckNonNegative(key string, d time.Duration, zero string) error {
	var v validator
	v.nonNegative(key, d, zero)
	return errors.Join(v.errs...)
}

// CheckPath returns nil when p is a request path (starts with "/", no
// query, fragment or spaces), else a [*KeyError] naming key.
func CheckPath(key, p string) error {
	var v validator
	v.path(key, p)
	return errors.Join(v.errs...)
}

// lookup returns the value of the scalar key (in full): from the section
// owning it that c holds, else the key's stock default (see
// [StockPluginKeys]; a Config built by Default holds no section), else the
// core field; nil when no such key is known.
func (c *Config) lookup(key string) any {
	for _, sv := range c.sections {
		if rest, ok := strings.CutPrefix(key, sv.sec.Key()+"."); ok {
			return fieldAt(reflect.ValueOf(sv.value), rest)
		}
	}
	for _, p := range stockPluginKeys {
		if p.Key == key {
			return p.Default
		}
	}
	if key, ok := strings.CutPrefix(key, "mmmq."); ok {
		return fieldAt(reflect.ValueOf(c.MMMQ), key)
	}
	return fieldAt(reflect.ValueOf(*c), key)
}

// fieldAt returns the field of the struct v at the koanf key rel
// ("tls.ca-file"), nil when there is none.
func fieldAt(v reflect.Value, rel string) any {
	name, rest, nested := strings.Cut(rel, ".")
	for i := range v.NumField() {
		if v.Type().Field(i).Tag.Get("koanf") != name {
			continue
		}
		f := v.Field(i)
		switch {
		case nested && f.Kind() == reflect.Struct:
			return fieldAt(f, rest)
		case !nested && f.Kind() != reflect.Struct:
			return plainValue(f)
		}
		return nil
	}
	return nil
}
