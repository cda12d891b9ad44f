package schedule

import (
	"fmt"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/contract"
)

// Route serves DELETE /topics/{topic}/scheduled/{scheduleId}: 200
// {"topic":"t","scheduleId":"...","cancelled":true} once the message's
// cancelled record is fsynced (it is never delivered); 404 NOT_FOUND when
// the id is unknown, another topic's, already delivered or being delivered
// now; 400 for an invalid topic name; 501 where scheduling is unsupported.
// It needs the publish permission on the topic.
type Route struct{ s *Scheduler }

// NewRoute returns the cancel route of s.
func NewRoute(s *Scheduler) *Route { return &Route{s: s} }

// Register implements contract.Route.
func (rt *Route) Register(r *mux.Router) {
	r.HandleFunc("/topics/{topic}/scheduled/{scheduleId}", rt.cancel).Methods(http.MethodDelete)
}

func (rt *Route) cancel(w http.ResponseWriter, r *http.Request) {
	topic, id := mux.Vars(r)["topic"], mux.Vars(r)["scheduleId"]
	if err := contract.ValidateTopic(topic); err != nil {
		contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return
	}
	if err := contract.Authorize(r.Context(), contract.ActionPublish, topic, ""); err != nil {
		contract.WriteErr(w, err)
		return
	}
	if u := rt.s.opts.Unsupported; u != "" {
		contract.WriteErr(w, contract.NotImplemented("scheduled messages are not supported here: %s", u))
		return
	}
	ok, err := rt.s.Cancel(topic, id)
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	if !ok {
		contract.WriteError(w, http.StatusNotFound, contract.CodeNotFound,
			fmt.Sprintf("no pending scheduled message %q in topic %q (unknown, cancelled, already delivered or being delivered)", truncate(id, 64), topic))
		return
	}
	contract.WriteJSON(w, http.StatusOK, map[string]any{"topic": topic, "scheduleId": id, "cancelled": true})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
