package admin

import (
	"context"
	"net/http"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
)

// RedriveRequest is the optional body of POST
// /mmmq/dispatchers/{name}/redrive: the offsets [From, To) of the
// dispatcher's dead-letter topic to publish again to their original
// topics. From left out is the topic's first offset, To left out its high
// watermark; no body (or {}) redrives every dead letter (up to
// dispatcher.MaxRedrive per call: the answer's "next" says where to go on).
// Rate, when present, is the replay rate in messages per second (> 0, at
// most dispatcher.MaxReplayRate): the republishing is not paced, the
// dispatcher's delivery of the redriven backlog is
// (dispatcher.Manager.RedriveAt).
type RedriveRequest struct {
	From *int64   `json:"from,omitempty"`
	To   *int64   `json:"to,omitempty"`
	Rate *float64 `json:"rate,omitempty"`
}

// redrive is POST /mmmq/dispatchers/{name}/redrive. Any dispatcher may be
// redriven, whatever declared it: it changes no dispatcher, it publishes.
// Once started it runs to its end even if the client goes away, so that
// what it did is logged whole.
func (rt *Route) redrive(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["name"]
	b, err := readBody(r)
	var req dispatcher.RedriveParams
	if err == nil {
		req, err = dispatcher.ParseRedriveAt(b)
	}
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	res, err := rt.a.m.RedriveAt(context.WithoutCancel(r.Context()), name, req.From, req.To, req.Rate)
	log := rt.a.log.With(zap.String("dispatcher", name), zap.String("dead-letter-topic", res.DeadLetterTopic),
		zap.Int("redriven", len(res.Redriven)), zap.Int("skipped", len(res.Skipped)), zap.Int64("next", res.Next))
	if err != nil {
		if len(res.Redriven) > 0 {
			log.Warn("redrive stopped on an error after publishing some dead letters again", zap.Error(err))
		}
		contract.WriteErr(w, err)
		return
	}
	log.Info("dead letters redriven", zap.Int64("from", res.From), zap.Int64("to", res.To), zap.Float64("replay-rate", req.Rate))
	contract.WriteJSON(w, http.StatusOK, res)
}
