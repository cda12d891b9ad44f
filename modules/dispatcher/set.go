package dispatcher

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.uber.org/fx"
)

// DispatcherTag is the Fx value group every *Dispatcher is contributed to
// (NewSet reads it). Use it with fx.ResultTags, or use Provide.
const DispatcherTag = `group:"dispatchers"`

// Provide registers ctor, a constructor returning *Dispatcher (optionally
// with an error, and with any Fx-supplied parameters), as a member of the
// dispatchers value group:
//
//	dispatcher.Provide(func() *dispatcher.Dispatcher {
//		return dispatcher.New("order-dispatcher",
//			dispatcher.Host{Protocol: dispatcher.HTTP, Address: "localhost", Port: 8081},
//			dispatcher.MustPattern("order.**"))
//	})
//
// A constructor may return nil to contribute nothing (NewSet skips nil).
//
// The dispatcher is labelled with its source, "Go provider <package
// path>.<function name>" (see WithSource), unless the constructor set one:
// a duplicate name then says where each copy came from.
func Provide(ctor any) fx.Option {
	label := "Go provider " + funcName(ctor)
	// The constructor's result goes under a private name, and a second
	// provider labels it into the group: Fx still names ctor itself in its
	// errors.
	tag := `name:"mmmq.dispatcher.provide.` + strconv.FormatInt(provideSeq.Add(1), 10) + `"`
	return fx.Options(
		fx.Provide(fx.Annotate(ctor, fx.ResultTags(tag))),
		fx.Provide(fx.Annotate(func(d *Dispatcher) *Dispatcher {
			if d == nil || d.source != "" {
				return d
			}
			return d.WithSource(label)
		}, fx.ParamTags(tag), fx.ResultTags(DispatcherTag))),
	)
}

// provideSeq numbers the private names of Provide's constructors.
var provideSeq atomic.Int64

// funcName is the package-qualified name of the function f, or its type
// when f is not a function (fx then reports the error).
func funcName(f any) string {
	v := reflect.ValueOf(f)
	if v.Kind() != reflect.Func {
		return fmt.Sprintf("%T", f)
	}
	if fn := runtime.FuncForPC(v.Pointer()); fn != nil {
		return fn.Name()
	}
	return v.Type().String()
}

// WithSource returns a copy of d labelled with where it was declared, for
// error messages: configdispatchers sets "config
// mmmq.broker.dispatchers[<i>]", Provide "Go provider <function>". Any
// short human-readable text will do; "" means unknown.
func (d *Dispatcher) WithSource(label string) *Dispatcher {
	c := *d
	c.source = label
	return &c
}

// Source is the label set by WithSource, "" when none was.
func (d *Dispatcher) Source() string { return d.source }

// Origins of a dispatcher (Origin): declared in Go code, in the
// configuration file, or created through the admin API.
const (
	OriginGo     = "go"
	OriginConfig = "config"
	OriginAPI    = "api"
)

// SourceAPI is the source label of dispatchers created through the admin
// API (WithSource); they are the only ones the API may change.
const SourceAPI = "api (dispatchers.json)"

// Origin is where d was declared, from its source label: OriginConfig
// ("config ..."), OriginAPI (SourceAPI), else OriginGo.
func (d *Dispatcher) Origin() string {
	switch {
	case strings.HasPrefix(d.source, "config "):
		return OriginConfig
	case d.source == SourceAPI:
		return OriginAPI
	}
	return OriginGo
}

// SetParams is what NewSet takes from the Fx graph: every member of the
// dispatchers value group, in random order.
type SetParams struct {
	fx.In

	// Dispatchers are the group's members; nil members are allowed.
	Dispatchers []*Dispatcher `group:"dispatchers"`
}

// Set is the validated, duplicate-free set of dispatchers, sorted by name.
// Put and Remove change it while the broker runs (the admin API); readers
// see a consistent snapshot without locking.
type Set struct {
	mu   sync.Mutex                    // serialises Put and Remove
	list atomic.Pointer[[]*Dispatcher] // sorted by name; replaced, never modified
}

// NewSet builds the Set from the value group: nil members are skipped, every
// other member must pass Dispatcher.Validate and have a unique name. The
// error names every invalid or duplicated dispatcher, and for a duplicate
// the source of each copy (see WithSource), e.g.
//
//	duplicate dispatcher name "orders" (provided 2 times: config
//	mmmq.broker.dispatchers[0]; Go provider example.com/orders.New)
func NewSet(p SetParams) (*Set, error) { return SetOf(p.Dispatchers...) }

// SetOf is NewSet for callers without Fx.
func SetOf(ds ...*Dispatcher) (*Set, error) {
	var errs []error
	count := make(map[string]int)
	sources := make(map[string][]string)
	list := make([]*Dispatcher, 0, len(ds))
	for _, d := range ds {
		if d == nil {
			continue
		}
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		count[d.name]++
		sources[d.name] = append(sources[d.name], d.source)
		if count[d.name] == 1 {
			list = append(list, d)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	for _, d := range list {
		if n := count[d.name]; n > 1 {
			errs = append(errs, fmt.Errorf("duplicate dispatcher name %q (provided %d times%s)", d.name, n, describeSources(sources[d.name])))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("dispatcher set: %w", errors.Join(errs...))
	}
	s := &Set{}
	s.list.Store(&list)
	return s, nil
}

func (s *Set) snapshot() []*Dispatcher { return *s.list.Load() }

// All returns the dispatchers sorted by name (a copy).
func (s *Set) All() []*Dispatcher { return append([]*Dispatcher(nil), s.snapshot()...) }

// Len is the number of dispatchers.
func (s *Set) Len() int { return len(s.snapshot()) }

// Get returns the dispatcher named name.
func (s *Set) Get(name string) (*Dispatcher, bool) {
	list := s.snapshot()
	i := sort.Search(len(list), func(i int) bool { return list[i].name >= name })
	if i < len(list) && list[i].name == name {
		return list[i], true
	}
	return nil, false
}

// Matching returns the dispatchers, sorted by name, whose patterns match
// topic.
func (s *Set) Matching(topic string) []*Dispatcher {
	var out []*Dispatcher
	for _, d := range s.snapshot() {
		if d.Matches(topic) {
			out = append(out, d)
		}
	}
	return out
}

// Put adds d, or replaces the dispatcher of the same name, and returns the
// one it replaced (nil when d is new). d must pass Validate.
func (s *Set) Put(d *Dispatcher) (*Dispatcher, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snapshot()
	list := make([]*Dispatcher, 0, len(old)+1)
	var prev *Dispatcher
	for _, x := range old {
		if x.name == d.name {
			prev = x
			continue
		}
		list = append(list, x)
	}
	list = append(list, d)
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	s.list.Store(&list)
	return prev, nil
}

// Remove takes the dispatcher named name out of the set and returns it.
func (s *Set) Remove(name string) (*Dispatcher, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snapshot()
	list := make([]*Dispatcher, 0, len(old))
	var prev *Dispatcher
	for _, x := range old {
		if x.name == name {
			prev = x
			continue
		}
		list = append(list, x)
	}
	s.list.Store(&list)
	return prev, prev != nil
}

// describeSources lists the sources of a duplicated name, sorted (the value
// group's order is random): ": a; b", or "" when none is labelled.
func describeSources(srcs []string) string {
	labelled := false
	out := make([]string, len(srcs))
	for i, s := range srcs {
		labelled = labelled || s != ""
		out[i] = s
		if s == "" {
			out[i] = "unlabelled (no WithSource)"
		}
	}
	if !labelled {
		return ""
	}
	sort.Strings(out)
	return ": " + strings.Join(out, "; ")
}
