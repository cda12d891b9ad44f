package httpapi

import (
	"net/http"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// ReopenResponse is the 200 body of POST /topics/{topic}/reopen:
//
//	{"topic":"order.created","highWatermark":17,"reopened":true}
type ReopenResponse struct {
	Topic         string `json:"topic"`
	HighWatermark int64  `json:"highWatermark"` // the next offset; the same as before the failure
	Reopened      bool   `json:"reopened"`
}

// handleReopen serves POST /topics/{topic}/reopen (topicqueue.Registry.Reopen):
// 200 ReopenResponse; 400 invalid name; 404 NOT_FOUND unknown topic; 409
// TOPIC_NOT_FAILED a topic that has not failed; 409 TOPIC_BUSY (with
// Retry-After) while it is being reopened; 503 TOPIC_FAILED when recovery
// failed (the topic stays failed; the error says why).
func (s *Server) handleReopen(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["topic"]
	if err := authorizeTopic(r, contract.ActionAdmin, name); err != nil {
		contract.WriteErr(w, err)
		return
	}
	hw, err := s.reg.Reopen(name)
	if err != nil {
		if c := contract.Classify(err); c.Status >= 500 {
			s.log.Warn("reopen failed", zap.String("topic", name), zap.Int("status", c.Status), zap.Error(err))
		}
		contract.WriteErr(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, ReopenResponse{Topic: name, HighWatermark: hw, Reopened: true})
}
