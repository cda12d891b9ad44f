package groups

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/contract"
)

// maxSeekBody caps the body of a seek request, in bytes.
const maxSeekBody = 4096

// seekShape is the accepted seek body, for error messages.
const seekShape = `body must be {"to": "earliest" | "latest" | <offset> | {"timestamp": <unix ms>}}`

// SeekResponse is the 200 body of POST .../seek, sent after the fsync:
// the group's committed offset now and before the seek.
type SeekResponse struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Committed int64  `json:"committed"`
	Previous  int64  `json:"previous"`
}

// handleList answers GET (and HEAD) /topics/{topic}/groups with the
// topic's Listing.
func (rt *Route) handleList(w http.ResponseWriter, r *http.Request) {
	l, err := rt.c.List(mux.Vars(r)["topic"])
	if err != nil {
		rt.fail(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, l)
}

// handleSeek answers POST /topics/{topic}/groups/{group}/seek.
func (rt *Route) handleSeek(w http.ResponseWriter, r *http.Request) {
	v := mux.Vars(r)
	topic, group := v["topic"], v["group"]
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSeekBody))
	if err != nil {
		rt.fail(w, contract.BadRequest("read body (at most %d bytes): %v", maxSeekBody, err))
		return
	}
	to, err := parseSeek(body)
	if err != nil {
		rt.fail(w, err)
		return
	}
	s, err := rt.c.SeekCommitted(topic, group, to)
	if err != nil {
		rt.fail(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, SeekResponse{Topic: topic, Group: group, Committed: s.Committed, Previous: s.Previous})
}

// parseSeek reads a seek body, {"to": ...} and nothing else (unknown
// members and anything after the object are refused), with "to" read by
// contract.ParseSeekTo. Errors are 400 *contract.InputError saying what is
// wrong.
func parseSeek(body []byte) (contract.SeekTarget, error) {
	var req struct {
		To json.RawMessage `json:"to"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return contract.SeekTarget{}, contract.BadRequest("%s: %v", seekShape, err)
	}
	return contract.ParseSeekTo(req.To)
}

// decodeStrict unmarshals one JSON object into v (a pointer), refusing
// unknown members, a member name that differs from one of v's only in
// case ("Offsets": encoding/json alone would take it), and trailing data.
func decodeStrict(data []byte, v any) error {
	if p, ok := contract.FindRepeatedMember(data); ok {
		return fmt.Errorf("field %q is given more than once", p)
	}
	if mc, ok := contract.FindMemberCase(data, reflect.TypeOf(v).Elem()); ok {
		return fmt.Errorf("unknown field %q (the member is %q)", mc.Sent, mc.Want)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			// Not encoding/json's "cannot unmarshal string into Go
			// struct field AckRequest.offset of type int64".
			got := te.Value
			if got == "bool" {
				got = "boolean"
			}
			return fmt.Errorf("field %q: a JSON %s where a %s belongs", te.Field, got, contract.JSONKindOf(te.Type.Kind()))
		}
		return errors.New(contract.JSONDecodeText(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}
