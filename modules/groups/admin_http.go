package groups

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

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

// parseSeek reads a seek body: {"to": "earliest"}, {"to": "latest"},
// {"to": <offset>} (an integer >= 0) or {"to": {"timestamp": <unix ms>}}
// (an integer >= 0). Unknown members, at either level, and anything after
// the object are refused. Errors are 400 *contract.InputError saying what
// is wrong.
func parseSeek(body []byte) (SeekTarget, error) {
	var req struct {
		To json.RawMessage `json:"to"`
	}
	if err := decodeStrict(body, &req); err != nil {
		return SeekTarget{}, contract.BadRequest("%s: %v", seekShape, err)
	}
	to := bytes.TrimSpace(req.To)
	if len(to) == 0 || string(to) == "null" {
		return SeekTarget{}, contract.BadRequest(`%s: "to" is missing`, seekShape)
	}
	switch to[0] {
	case '"':
		var s string
		if err := json.Unmarshal(to, &s); err != nil {
			return SeekTarget{}, contract.BadRequest("%s: %v", seekShape, err)
		}
		switch s {
		case "earliest":
			return SeekTarget{Kind: SeekEarliest}, nil
		case "latest":
			return SeekTarget{Kind: SeekLatest}, nil
		}
		return SeekTarget{}, contract.BadRequest(`%s: unknown "to" %q`, seekShape, s)
	case '{':
		var ts struct {
			Timestamp json.RawMessage `json:"timestamp"`
		}
		if err := decodeStrict(to, &ts); err != nil {
			return SeekTarget{}, contract.BadRequest("%s: %v", seekShape, err)
		}
		ms, err := nonNegative(ts.Timestamp, "timestamp")
		if err != nil {
			return SeekTarget{}, err
		}
		return SeekTarget{Kind: SeekTimestamp, Time: time.UnixMilli(ms)}, nil
	}
	off, err := nonNegative(to, `"to" offset`)
	if err != nil {
		return SeekTarget{}, err
	}
	return SeekTarget{Kind: SeekOffset, Offset: off}, nil
}

// decodeStrict unmarshals one JSON object into v, refusing unknown members
// and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON object")
	}
	return nil
}

// nonNegative parses raw as a JSON integer >= 0; what names it in errors.
func nonNegative(raw json.RawMessage, what string) (int64, error) {
	s := string(bytes.TrimSpace(raw))
	if s == "" || s == "null" {
		return 0, contract.BadRequest("%s: %s is missing", seekShape, what)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, contract.BadRequest("%s: %s must be an integer >= 0; got %s", seekShape, what, s)
	}
	return n, nil
}
