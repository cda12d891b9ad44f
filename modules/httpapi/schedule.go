package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/tracing"
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
// is always fsynced before the answer. A producer id already scheduled on
// the topic within mmmq.broker.dedup.window is answered with the first
// schedule's scheduleId and deliverAt and "duplicate":true; nothing is
// stored. A ttl counts from the publish (expiresAt = publish time + ttl):
// a deliverAt at or after it is 400 (the message would expire before it
// is due).
func (s *Server) publishScheduled(w http.ResponseWriter, r *http.Request, d contract.Decoded, span tracing.Span) {
	start := time.Now()
	if err := contract.CheckSchedule(s.opts.Scheduler, d.ScheduledBy, d.DeliverAt, d.ExpiresAt); err != nil {
		span.EndPublish(-1, contract.Durable, 0, false, true, err)
		s.fail(w, err)
		return
	}
	producerID := ""
	if d.FromProducer {
		producerID = d.ID
	}
	res, err := contract.Schedule(r.Context(), s.opts.Scheduler, d.ScheduledBy, d.Topic, producerID, d.Stored, d.DeliverAt)
	span.EndPublish(-1, contract.Durable, time.Since(start), res.Duplicate, true, err)
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
	b = appendScheduled(b, res)
	b = append(b, "}\n"...)
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// appendScheduled appends the members of a scheduled publish's answer:
// ,"scheduled":true,"scheduleId":"...","deliverAt":"<RFC 3339>","deliverAtMs":<ms>
// and ,"duplicate":true for a duplicate.
func appendScheduled(b []byte, res contract.Scheduled) []byte {
	b = append(b, `,"scheduled":true,"scheduleId":`...)
	b = contract.AppendJSONString(b, res.ID)
	b = append(b, `,"deliverAt":"`...)
	b = contract.AppendMillis(b, res.DeliverAt.UnixMilli())
	b = append(b, `","deliverAtMs":`...)
	b = strconv.AppendInt(b, res.DeliverAt.UnixMilli(), 10)
	if res.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	return b
}
