package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// RedriveRequest is the optional body of POST
// /mmmq/dispatchers/{name}/redrive: the offsets [From, To) of the
// dispatcher's dead-letter topic to publish again to their original
// topics. From left out is the topic's first offset, To left out its high
// watermark; no body (or {}) redrives every dead letter (up to
// dispatcher.MaxRedrive per call: the answer's "next" says where to go on).
type RedriveRequest struct {
	From *int64 `json:"from,omitempty"`
	To   *int64 `json:"to,omitempty"`
}

// parseRedrive reads a redrive body: empty, or a JSON object with "from"
// and "to", each an integer >= 0 when present. It returns -1 for a field
// left out (dispatcher.Manager.Redrive's default). Errors are 400s naming
// the field; unknown fields are refused.
func parseRedrive(body []byte) (from, to int64, err error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return -1, -1, nil
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&fields); err != nil || fields == nil || dec.More() {
		return 0, 0, contract.BadRequest(`invalid redrive: the body must be empty or a JSON object {"from": <offset>, "to": <offset>}`)
	}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		if k != "from" && k != "to" {
			return 0, 0, contract.BadRequest("invalid redrive: unknown field %q (want \"from\" and \"to\")", k)
		}
	}
	offset := func(name string) (int64, error) {
		raw, ok := fields[name]
		if !ok {
			return -1, nil
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
		if err != nil || n < 0 {
			return 0, contract.BadRequest("invalid redrive: field %q must be an integer >= 0 (an offset of the dead-letter topic); got %s", name, raw)
		}
		return n, nil
	}
	if from, err = offset("from"); err != nil {
		return 0, 0, err
	}
	if to, err = offset("to"); err != nil {
		return 0, 0, err
	}
	return from, to, nil
}

// redrive is POST /mmmq/dispatchers/{name}/redrive. Any dispatcher may be
// redriven, whatever declared it: it changes no dispatcher, it publishes.
// Once started it runs to its end even if the client goes away, so that
// what it did is logged whole.
func (rt *Route) redrive(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	b, err := readBody(r)
	var from, to int64
	if err == nil {
		from, to, err = parseRedrive(b)
	}
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	res, err := rt.a.m.Redrive(context.WithoutCancel(r.Context()), name, from, to)
	log := rt.a.log.With(zap.String("dispatcher", name), zap.String("dead-letter-topic", res.DeadLetterTopic),
		zap.Int("redriven", len(res.Redriven)), zap.Int("skipped", len(res.Skipped)), zap.Int64("next", res.Next))
	if err != nil {
		if len(res.Redriven) > 0 {
			log.Warn("redrive stopped on an error after publishing some dead letters again", zap.Error(err))
		}
		contract.WriteErr(w, err)
		return
	}
	log.Info("dead letters redriven", zap.Int64("from", res.From), zap.Int64("to", res.To))
	contract.WriteJSON(w, http.StatusOK, res)
}
