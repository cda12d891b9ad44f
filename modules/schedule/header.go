package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"sort"

	"github.com/mmmq/mmmq/modules/contract"
)

var errNotObject = errors.New("schedule: stored message is not a JSON object")

// withScheduleID returns stored (a stored message JSON object) with the
// header HeaderScheduleID set to id: added to its "headers" member, or
// that member added last. Other members keep their order and bytes.
func withScheduleID(stored []byte, id string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(stored))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errNotObject
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, err
		}
		at := dec.InputOffset()
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if k != "headers" {
			continue
		}
		end := dec.InputOffset()
		var h map[string]string
		if err := json.Unmarshal(v, &h); err != nil {
			return nil, err
		}
		if h == nil {
			h = map[string]string{}
		}
		h[HeaderScheduleID] = id
		start := at + int64(bytes.IndexByte(stored[at:end], ':')) + 1
		out := append(append([]byte(nil), stored[:start]...), appendHeaders(nil, h)...)
		return append(out, stored[end:]...), nil
	}
	i := bytes.LastIndexByte(stored, '}')
	if i < 0 {
		return nil, errNotObject
	}
	out := append([]byte(nil), stored[:i]...)
	if len(bytes.TrimSpace(out)) > 1 {
		out = append(out, ',')
	}
	out = append(out, `"headers":`...)
	out = appendHeaders(out, map[string]string{HeaderScheduleID: id})
	return append(out, stored[i:]...), nil
}

// appendHeaders appends h as a JSON object, keys sorted.
func appendHeaders(dst []byte, h map[string]string) []byte {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = contract.AppendJSONString(dst, k)
		dst = append(dst, ':')
		dst = contract.AppendJSONString(dst, h[k])
	}
	return append(dst, '}')
}

// scheduleIDOf is the HeaderScheduleID header of a stored message, "" for
// none.
func scheduleIDOf(stored []byte) string { return contract.StoredScheduleID(stored) }
