package dispatcher

import (
	"errors"
	"fmt"
	"sort"

	"go.uber.org/fx"
)

// DispatcherTag is the Fx value group every *Dispatcher is contributed to
// (DESIGN §5). Use it with fx.ResultTags, or use Provide.
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
func Provide(ctor any) fx.Option {
	return fx.Provide(fx.Annotate(ctor, fx.ResultTags(DispatcherTag)))
}

// SetParams is what NewSet takes from the Fx graph: every member of the
// dispatchers value group, in random order.
type SetParams struct {
	fx.In

	// Dispatchers are the group's members; nil members are allowed.
	Dispatchers []*Dispatcher `group:"dispatchers"`
}

// Set is the validated, duplicate-free set of dispatchers, sorted by name.
// It is immutable after NewSet.
type Set struct {
	list []*Dispatcher
}

// NewSet builds the Set from the value group: nil members are skipped, every
// other member must pass Dispatcher.Validate and have a unique name. The
// error names every invalid or duplicated dispatcher (DESIGN §5: "Duplicate
// names fail at startup").
func NewSet(p SetParams) (*Set, error) { return SetOf(p.Dispatchers...) }

// SetOf is NewSet for callers without Fx.
func SetOf(ds ...*Dispatcher) (*Set, error) {
	var errs []error
	count := make(map[string]int)
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
		if count[d.name] == 1 {
			list = append(list, d)
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].name < list[j].name })
	for _, d := range list {
		if n := count[d.name]; n > 1 {
			errs = append(errs, fmt.Errorf("duplicate dispatcher name %q (provided %d times)", d.name, n))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("dispatcher set: %w", errors.Join(errs...))
	}
	return &Set{list: list}, nil
}

// All returns the dispatchers sorted by name (a copy).
func (s *Set) All() []*Dispatcher { return append([]*Dispatcher(nil), s.list...) }

// Len is the number of dispatchers.
func (s *Set) Len() int { return len(s.list) }

// Get returns the dispatcher named name.
func (s *Set) Get(name string) (*Dispatcher, bool) {
	i := sort.Search(len(s.list), func(i int) bool { return s.list[i].name >= name })
	if i < len(s.list) && s.list[i].name == name {
		return s.list[i], true
	}
	return nil, false
}

// Matching returns the dispatchers, sorted by name, whose patterns match
// topic.
func (s *Set) Matching(topic string) []*Dispatcher {
	var out []*Dispatcher
	for _, d := range s.list {
		if d.Matches(topic) {
			out = append(out, d)
		}
	}
	return out
}
