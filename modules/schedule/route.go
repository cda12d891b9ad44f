package schedule

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/mmmq/mmmq/modules/contract"
)

// Route serves DELETE /topics/{topic}/scheduled/{scheduleId}: 200
// {"topic":"t","scheduleId":"...","cancelled":true} once the message's
// cancelled record is fsynced (it is never delivered); 404 NOT_FOUND when
// the id is unknown, another topic's, already delivered or being delivered
// now; 400 for an invalid topic name; 501 where scheduling is unsupported.
// It needs the publish permission on the topic.
//
// It also serves GET (and HEAD) /topics/{topic}/scheduled, the listing of
// the topic's pending scheduled messages (see list): it needs the read
// permission.
type Route struct{ s *Scheduler }

// NewRoute returns the cancel and listing routes of s.
func NewRoute(s *Scheduler) *Route { return &Route{s: s} }

// Register implements contract.Route.
func (rt *Route) Register(r *mux.Router) {
	r.HandleFunc("/topics/{topic}/scheduled/{scheduleId}", rt.cancel).Methods(http.MethodDelete)
	r.HandleFunc("/topics/{topic}/scheduled", rt.list).Methods(http.MethodGet)
}

// Listing limits: the default and largest limit, and the most content
// bytes of a page with content=true (at least one message).
const (
	ListDefaultLimit   = 100
	ListMaxLimit       = 1000
	ListMaxContentSize = 4 << 20
)

// listItem is one message of the listing's answer.
type listItem struct {
	ScheduleID  string            `json:"scheduleId"`
	DeliverAt   string            `json:"deliverAt"`
	DeliverAtMs int64             `json:"deliverAtMs"`
	ID          string            `json:"id"`
	Key         string            `json:"key,omitempty"`
	Size        int               `json:"size"`
	Headers     map[string]string `json:"headers,omitempty"`
	Content     json.RawMessage   `json:"content,omitempty"`
}

// list serves GET /topics/{topic}/scheduled?limit=&after=&content=: 200
// {"topic":"t","pending":n,"items":[...],"next":"<cursor>"} in due-time
// order, next absent on the last page; a topic with nothing pending
// (existing or not) is 200 with no items. 400 for an invalid topic name,
// limit, after or content; 501 where scheduling is unsupported.
func (rt *Route) list(w http.ResponseWriter, r *http.Request) {
	topic := mux.Vars(r)["topic"]
	if err := contract.ValidateTopic(topic); err != nil {
		contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return
	}
	if err := contract.Authorize(r.Context(), contract.ActionRead, topic, ""); err != nil {
		contract.WriteErr(w, err)
		return
	}
	if u := rt.s.opts.Unsupported; u != "" {
		contract.WriteErr(w, contract.NotImplemented("scheduled messages are not supported here: %s", u))
		return
	}
	q := r.URL.Query()
	if err := contract.RepeatedQuery(q, "limit", "after", "content"); err != nil {
		contract.WriteErr(w, err)
		return
	}
	o := ListOptions{Limit: ListDefaultLimit, MaxBytes: ListMaxContentSize}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > ListMaxLimit {
			contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, fmt.Sprintf("query parameter limit must be an integer in 1..%d, not %q", ListMaxLimit, truncate(v, 64)))
			return
		}
		o.Limit = n
	}
	if v := q.Get("after"); v != "" {
		c, err := ParseCursor(v)
		if err != nil {
			contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, fmt.Sprintf("query parameter after %q is %s", truncate(v, 64), err))
			return
		}
		o.After = &c
	}
	if v := q.Get("content"); v != "" {
		if v != "true" && v != "false" {
			contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, fmt.Sprintf("query parameter content must be true or false, not %q", truncate(v, 64)))
			return
		}
		o.Content = v == "true"
	}
	page, err := rt.s.List(topic, o)
	if err != nil {
		contract.WriteErr(w, err)
		return
	}
	items := make([]listItem, len(page.Items))
	for i, l := range page.Items {
		items[i] = listItem{ScheduleID: l.ScheduleID, DeliverAt: contract.FormatMillis(l.DeliverAt), DeliverAtMs: l.DeliverAt,
			ID: l.ID, Key: l.Key, Size: l.Size, Headers: l.Headers, Content: l.Content}
		if o.Content && l.Content == nil {
			items[i].Content = json.RawMessage("null")
		}
	}
	ans := map[string]any{"topic": topic, "pending": page.Pending, "items": items}
	if page.Next != nil {
		ans["next"] = page.Next.String()
	}
	contract.WriteJSON(w, http.StatusOK, ans)
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
