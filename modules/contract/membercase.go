package contract

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
)

// MemberCase is a member name of a JSON body that names a member of the
// type the body decodes into only when case is ignored: encoding/json
// matches member names without regard to case (even with
// DisallowUnknownFields), so "Rate-Limit" would set "rate-limit" silently.
// Sent and Want are dotted under the objects they are in, as sent and as
// spelt ("commit.Max-Count", "commit.max-count"; "[i]" for an array
// element).
type MemberCase struct {
	Sent string // the name as the body has it
	Want string // the member's name
}

// FindMemberCase returns the first member name of the JSON text body, in
// the body's order and depth first, that matches a member of t (the type
// the body decodes into) only when case is ignored; ok is false when every
// name matches exactly or matches no member at all (the decoder's
// DisallowUnknownFields names those).
//
// The members of a struct are its fields' JSON names as encoding/json
// reads them (the json tag's name, else the Go field name; untagged
// embedded structs flattened; "-" and unexported fields left out). The
// check goes into the values of struct members, pointers, slices, arrays
// and map values; the keys of a map are the caller's own and are not
// checked, nor is anything a type reads itself (json.Unmarshaler,
// encoding.TextUnmarshaler, json.RawMessage, any). A body that is not
// valid JSON, or whose shape differs from t's, is not an error here: the
// decoder reports it.
func FindMemberCase(body []byte, t reflect.Type) (mc MemberCase, ok bool) {
	return findMemberCase(body, t, "", "")
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func findMemberCase(raw []byte, t reflect.Type, sent, want string) (mc MemberCase, ok bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if readsItself(t) {
		return MemberCase{}, false
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return MemberCase{}, false
	}
	switch {
	case t.Kind() == reflect.Struct && raw[0] == '{':
		ms := membersOf(t)
		eachValue(raw, func(name string, v []byte) bool {
			if ft, exact := ms.types[name]; exact {
				mc, ok = findMemberCase(v, ft, sent+name+".", want+name+".")
				return !ok
			}
			for _, m := range ms.names {
				if strings.EqualFold(m, name) {
					mc, ok = MemberCase{Sent: sent + name, Want: want + m}, true
					return false
				}
			}
			return true
		})
	case t.Kind() == reflect.Map && raw[0] == '{':
		eachValue(raw, func(key string, v []byte) bool {
			mc, ok = findMemberCase(v, t.Elem(), sent+key+".", want+key+".")
			return !ok
		})
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && raw[0] == '[':
		i := 0
		eachValue(raw, func(_ string, v []byte) bool {
			at := "[" + strconv.Itoa(i) + "]."
			i++
			mc, ok = findMemberCase(v, t.Elem(), strings.TrimSuffix(sent, ".")+at, strings.TrimSuffix(want, ".")+at)
			return !ok
		})
	}
	return mc, ok
}

// readsItself reports whether a value of t decodes itself (its own
// UnmarshalJSON or UnmarshalText, json.RawMessage) or is an interface:
// its members, if any, are not t's fields.
func readsItself(t reflect.Type) bool {
	if t.Kind() == reflect.Interface {
		return true
	}
	pt := reflect.PointerTo(t)
	return t.Implements(jsonUnmarshaler) || pt.Implements(jsonUnmarshaler) ||
		t.Implements(textUnmarshaler) || pt.Implements(textUnmarshaler)
}

// eachValue calls fn with each member (name, value) of the JSON object
// raw, or each element ("", value) of the JSON array raw, in order, until
// fn returns false. Text that is not valid JSON ends it quietly.
func eachValue(raw []byte, fn func(name string, v []byte) bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	open, err := dec.Token()
	if err != nil {
		return
	}
	object := open == json.Delim('{')
	for dec.More() {
		name := ""
		if object {
			tok, err := dec.Token()
			if err != nil {
				return
			}
			name, _ = tok.(string)
		}
		var v json.RawMessage
		if dec.Decode(&v) != nil || !fn(name, v) {
			return
		}
	}
}

// members are the JSON member names of a struct type: names in field
// order (embedded structs' in place), types by name.
type members struct {
	names []string
	types map[string]reflect.Type
}

var membersCache sync.Map // reflect.Type -> *members

// membersOf returns t's members as encoding/json reads them: a name given
// at several depths is the shallowest one's.
func membersOf(t reflect.Type) *members {
	if m, ok := membersCache.Load(t); ok {
		return m.(*members)
	}
	ms := &members{types: map[string]reflect.Type{}}
	depth := map[string]int{}
	var walk func(t reflect.Type, d int)
	walk = func(t reflect.Type, d int) {
		for f := range t.Fields() {
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					walk(et, d+1)
					continue
				}
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if old, seen := depth[name]; seen && old <= d {
				continue
			} else if !seen {
				ms.names = append(ms.names, name)
			}
			depth[name], ms.types[name] = d, ft
		}
	}
	walk(t, 0)
	m, _ := membersCache.LoadOrStore(t, ms)
	return m.(*members)
}
