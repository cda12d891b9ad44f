package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// publishScheduled answers a single publish with "deliverAt" or "delay" in
// the future: the message goes to the Scheduler (fsynced there before the
// answer), which appends it to its topic when due, at a new offset. The
// answer has no offset:
//
//	{"acknowledgement":"ACK","topic":"t","level":"DURABLE","id":"...","scheduled":true,
//	 "scheduleId":"...","deliverAt":"2026-12-04T10:00:00.000Z","deliverAtMs":1796378400000}
//
// deliverAt is RFC 3339 in UTC with milliseconds, deliverAtMs the same in
// Unix ms. The level is DURABLE whatever ?ack= asked: a scheduled message
// is always fsynced before the answer. A ttl with a schedule is 400 (not
// supported yet: its expiresAt would count from the publish, not the
// delivery).
func (s *Server) publishScheduled(w http.ResponseWriter, r *http.Request, d contract.Decoded) {
	if d.TTL != 0 {
		s.fail(w, contract.BadRequest(`"ttl" together with "deliverAt" or "delay" is not supported yet; publish the scheduled message without a ttl`))
		return
	}
	if s.opts.Scheduler == nil {
		s.fail(w, contract.NotImplemented(`scheduled messages ("deliverAt", "delay") are not available: this broker has no scheduler module`))
		return
	}
	at := time.UnixMilli(d.DeliverAt)
	id, err := s.opts.Scheduler.Schedule(r.Context(), d.Topic, d.Stored, at)
	if err != nil {
		s.fail(w, err)
		return
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"acknowledgement":"ACK","topic":"`...)
	b = append(b, d.Topic...)
	b = append(b, `","level":"`...)
	b = append(b, contract.Durable.String()...)
	b = append(b, `","id":`...)
	b = contract.AppendJSONString(b, d.ID)
	b = append(b, `,"scheduled":true,"scheduleId":`...)
	b = contract.AppendJSONString(b, id)
	b = append(b, `,"deliverAt":"`...)
	b = at.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	b = append(b, `","deliverAtMs":`...)
	b = strconv.AppendInt(b, d.DeliverAt, 10)
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}
