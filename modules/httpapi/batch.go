package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// MaxBatchMessages caps the messages of one POST /messages/batch.
const MaxBatchMessages = 10000

// BatchResult is one message's outcome in a batch response: its topic and
// offset (absent for ACCEPTED), or its error with the HTTP status it would
// have had alone.
type BatchResult struct {
	Topic  string `json:"topic,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	// ID is the message id: the producer's, or the one the broker
	// generated (absent for an invalid message).
	ID string `json:"id,omitempty"`
	// Duplicate: the message's producer id was already published to the
	// topic within mmmq.broker.dedup.window, or earlier in this batch;
	// nothing was stored and Offset is the first message's.
	Duplicate bool `json:"duplicate,omitempty"`
	// Scheduled: the message had "deliverAt" or "delay" in the future and
	// is kept until then (no Offset: it gets one when it enters its topic).
	// ScheduleID is what DELETE /topics/{t}/scheduled/{scheduleId}
	// cancels; DeliverAt (RFC 3339, UTC, ms) and DeliverAtMs (Unix ms) are
	// its due time; Level is then DURABLE whatever the batch's level (a
	// scheduled message is fsynced before the answer). With Duplicate, the
	// producer id was already scheduled on the topic within the window
	// (or earlier in this batch): these are the first schedule's.
	Scheduled   bool   `json:"scheduled,omitempty"`
	ScheduleID  string `json:"scheduleId,omitempty"`
	DeliverAt   string `json:"deliverAt,omitempty"`
	DeliverAtMs int64  `json:"deliverAtMs,omitempty"`
	Level       string `json:"level,omitempty"`
	Error       string `json:"error,omitempty"`
	Status      int    `json:"status,omitempty"`
}

// BatchResponse is the body of POST /messages/batch. Validation is all or
// nothing: when any message is invalid, nothing is stored and the status is
// that of the first invalid message (400, 413, or 501 for a scheduled
// member where the broker cannot schedule). The schedule rules are part of
// validation: "deliverAt" with "delay", a due time beyond
// mmmq.broker.schedule.max-delay, a ttl that ends at or before the due time.
// Otherwise the scheduled members (a due time in the future) are stored
// first, one after the other in batch order, each fsynced before the
// answer; then each topic's other messages are appended as one unit.
// Acknowledgement is ACK only when every message reached its level (200),
// else the status of the first storage failure (a scheduled member's
// included: 507 TOO_MANY_SCHEDULED, 503), and Results tells which messages
// were stored (with their offsets or schedule ids) and which were not.
type BatchResponse struct {
	Acknowledgement string `json:"acknowledgement"`
	// Error and Code summarise a NACK like every other error body
	// (acknowledgement, error, code): the first failure; Results has each message's.
	Error   string        `json:"error,omitempty"`
	Code    string        `json:"code,omitempty"`
	Level   string        `json:"level"`
	Count   int           `json:"count"`
	Failed  int           `json:"failed"`
	Results []BatchResult `json:"results"`
}

// splitBatch returns the raw messages of a batch body: a JSON array of
// publish requests, or NDJSON (one per line) when the Content-Type is
// application/x-ndjson.
func splitBatch(r *http.Request, body []byte) ([]json.RawMessage, error) {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return contract.SplitBatch(body, ct == "application/x-ndjson", MaxBatchMessages)
}

// storeFailure is the error of a batch some of whose messages (failed of
// count) storage did not store; first is the first failure.
func storeFailure(failed, count int, first string) string {
	if failed == count {
		return fmt.Sprintf("none of the %d messages was stored; first: %s", count, first)
	}
	return fmt.Sprintf("%d of %d messages were not stored; first: %s (the others were stored: results give each one's offset, or scheduleId for a scheduled one)", failed, count, first)
}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) {
	lvl, bp, ok := s.publishRequest(w, r)
	if !ok {
		return
	}
	defer s.putBuf(bp)
	msgs, err := splitBatch(r, *bp)
	if err != nil {
		s.fail(w, err)
		return
	}
	b := &batch{resp: BatchResponse{Acknowledgement: "ACK", Level: lvl.String(), Count: len(msgs), Results: make([]BatchResult, len(msgs))}}
	tc := batchTrace(r)
	tc.Root = s.traceRoot
	groups, sched := s.decodeBatch(b, msgs, tc)
	// Validation is all or nothing: one bad message and nothing is stored.
	if b.resp.Failed > 0 {
		for i := range b.resp.Results {
			if b.resp.Results[i].Error == "" {
				b.resp.Results[i].Error = "not stored: another message of the batch is invalid"
			}
		}
		b.resp.Acknowledgement = "NACK"
		b.resp.Error = fmt.Sprintf("batch rejected, nothing stored: %d of %d messages are invalid; first: %s", b.resp.Failed, len(msgs), firstErr(b.resp.Results))
		contract.WriteJSON(w, b.firstStatus, b.resp)
		return
	}
	// Authorization is all or nothing too: one topic the principal may not
	// publish to (403), or a batch over its publish rate (429), and
	// nothing is stored.
	topics := make([]string, 0, len(groups)+len(sched))
	for _, g := range groups {
		topics = append(topics, g.topic)
	}
	for _, m := range sched {
		topics = append(topics, m.topic)
	}
	if err := s.publishAllowed(r, len(msgs), topics...); err != nil {
		contract.WriteErr(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.PublishTimeout)
	defer cancel()
	start := time.Now()
	spans := s.startBatchSpans(r.Context(), len(msgs), groups, sched, start)
	s.storeScheduled(ctx, b, sched)
	s.storeBatch(ctx, b, groups, lvl)
	endBatchSpans(spans, b, lvl, time.Since(start))
	status := http.StatusOK
	if b.resp.Failed > 0 {
		b.resp.Acknowledgement, status = "NACK", b.firstStatus
		b.resp.Error = storeFailure(b.resp.Failed, len(msgs), firstErr(b.resp.Results))
		if status >= 500 {
			s.log.Sugar().Warnw("batch publish failed, in part or whole", "failed", b.resp.Failed, "count", b.resp.Count)
		}
		if b.resp.Code == contract.CodeNoSpace {
			w.Header().Set("Retry-After", contract.NoSpaceRetryAfter) // as a single publish's 507
		}
	}
	contract.WriteJSON(w, status, b.resp)
}

// batch is a batch response being built.
type batch struct {
	resp        BatchResponse
	firstStatus int // status of the first failure, 0 while none
}

// setErr records message i's failure; the first one also sets the
// response's Error and Code.
func (b *batch) setErr(i int, err error) {
	c := contract.Classify(err)
	b.resp.Results[i].Error, b.resp.Results[i].Status = err.Error(), c.Status
	b.resp.Failed++
	if b.firstStatus == 0 {
		b.firstStatus = c.Status
		b.resp.Error, b.resp.Code = fmt.Sprintf("%d of %d messages failed; first: %v", 1, len(b.resp.Results), err), c.Code
	}
}

// topicGroup is the messages of a batch for one topic, in arrival order.
type topicGroup struct {
	topic string
	idx   []int // their positions in the batch
	msgs  []topicqueue.Message
}

// scheduledMember is a batch member with a due time in the future.
type scheduledMember struct {
	i          int // its position in the batch
	topic      string
	producerID string // "" for a generated id
	stored     []byte
	at         int64 // due time, Unix ms
	by         contract.ScheduleBy
}

// batchTrace is the trace context of a batch request's traceparent and
// tracestate HTTP headers: it applies to the members whose own headers
// have no traceparent.
func batchTrace(r *http.Request) contract.TraceContext {
	tc := contract.TraceFromHTTP(r.Header)
	tc.Fallback = true
	return tc
}

// decodeBatch validates every message (the schedule rules included),
// recording failures in b, and groups the messages to store now by topic
// in order of first appearance; the scheduled ones are returned apart, in
// batch order. tc is the request's trace context (batchTrace).
func (s *Server) decodeBatch(b *batch, msgs []json.RawMessage, tc contract.TraceContext) ([]*topicGroup, []scheduledMember) {
	var groups []*topicGroup
	var sched []scheduledMember
	byTopic := map[string]*topicGroup{}
	now := time.Now()
	for i, m := range msgs {
		d, err := contract.DecodeMessageTrace(m, now, nil, tc)
		topic := d.Topic
		if err == nil {
			err = s.checkSize(d)
		}
		later := err == nil && d.Scheduled && d.DeliverAt > 0
		if later {
			err = contract.CheckSchedule(s.opts.Scheduler, d.ScheduledBy, d.DeliverAt, d.ExpiresAt)
		}
		if err != nil {
			b.setErr(i, fmt.Errorf("message %d: %w", i, err))
			continue
		}
		b.resp.Results[i].Topic, b.resp.Results[i].ID = topic, d.ID
		if later {
			m := scheduledMember{i: i, topic: topic, stored: d.Stored, at: d.DeliverAt, by: d.ScheduledBy}
			if d.FromProducer {
				m.producerID = d.ID
			}
			sched = append(sched, m)
			continue
		}
		g := byTopic[topic]
		if g == nil {
			g = &topicGroup{topic: topic}
			byTopic[topic] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		msg := topicqueue.Message{Stored: d.Stored}
		if d.FromProducer {
			msg.ID = d.ID
		}
		g.msgs = append(g.msgs, msg)
	}
	return groups, sched
}

// storeScheduled hands the scheduled members to the Scheduler one after
// the other, in batch order (each fsynced before Schedule returns), and
// records their schedule ids, duplicates or failures in b. Members left
// when ctx ends are not stored (503 TIMEOUT).
func (s *Server) storeScheduled(ctx context.Context, b *batch, sched []scheduledMember) {
	for _, m := range sched {
		if err := ctx.Err(); err != nil {
			b.setErr(m.i, fmt.Errorf("message %d: not scheduled (nothing stored): the batch's time (server.publish-timeout) ran out before its turn: %w", m.i, err))
			continue
		}
		res, err := contract.Schedule(ctx, s.opts.Scheduler, m.by, m.topic, m.producerID, m.stored, m.at)
		if err != nil {
			b.setErr(m.i, fmt.Errorf("message %d: %w", m.i, err))
			continue
		}
		r := &b.resp.Results[m.i]
		r.Scheduled, r.ScheduleID, r.Duplicate = true, res.ID, res.Duplicate
		r.DeliverAt, r.DeliverAtMs = contract.FormatMillis(res.DeliverAt.UnixMilli()), res.DeliverAt.UnixMilli()
		r.Level = contract.Durable.String()
	}
}

// storeBatch appends each topic's messages with one AppendBatch (one group
// commit; duplicates of producer ids left out), topics in parallel, and
// records offsets, duplicates or failures in b.
func (s *Server) storeBatch(ctx context.Context, b *batch, groups []*topicGroup, lvl contract.AckLevel) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
	defer cancel()
	// One goroutine per topic, at most batchParallelTopics publishing at
	// once (creating a topic fsyncs directories: a batch of 1,000 new
	// topics must not start 1,000 of them). The answer is written by the
	// deadline whatever the storage does: a topic not done by then is 503
	// TIMEOUT (its outcome unknown, as for a lost reply), so net/http's
	// write timeout never drops the reply.
	type outcome struct {
		res []topicqueue.Published
		err error
	}
	done := make([]chan outcome, len(groups))
	slots := make(chan struct{}, batchParallelTopics)
	// Topics are created in parallel, but which new topics fit under
	// max-topics follows batch order: the first that fit are created, the
	// later ones are refused without trying.
	room := s.reg.Room()
	taken := 0 // new topics of this batch given room
	for gi, g := range groups {
		done[gi] = make(chan outcome, 1)
		if _, exists := s.reg.Get(g.topic); !exists {
			if room == 0 {
				why := "the broker has as many topics as it may open"
				if taken > 0 {
					why = fmt.Sprintf("the batch's %d earlier new topics took the room left", taken)
				}
				done[gi] <- outcome{err: fmt.Errorf("publish to topic %s: %w: %s (mmmq.broker.storage.max-topics)", g.topic, topicqueue.ErrTooManyTopics, why)}
				continue
			}
			room--
			taken++
		}
		go func() {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				done[gi] <- outcome{err: ctx.Err()}
				return
			}
			defer func() { <-slots }()
			// A topic deleted meanwhile is created anew.
			res := make([]topicqueue.Published, len(g.msgs))
			_, err := s.reg.PublishMessages(ctx, g.topic, g.msgs, lvl, res)
			done[gi] <- outcome{res, err}
		}()
	}
	errs := make([]error, len(groups))
	results := make([][]topicqueue.Published, len(groups))
	for gi := range groups {
		var o outcome
		select {
		case o = <-done[gi]:
		case <-ctx.Done():
			select { // an outcome that is in wins over the deadline
			case o = <-done[gi]:
			default:
				o = outcome{err: fmt.Errorf("publish to topic %s: no outcome within %s (it may still be stored): %w", groups[gi].topic, s.opts.PublishTimeout, context.DeadlineExceeded)}
			}
		}
		results[gi], errs[gi] = o.res, o.err
	}
	for gi, g := range groups {
		for k, i := range g.idx {
			if errs[gi] != nil {
				b.setErr(i, errs[gi])
				continue
			}
			p := results[gi][k]
			b.resp.Results[i].Duplicate = p.Duplicate
			if lvl != contract.Accepted {
				b.resp.Results[i].Offset = &p.Offset
			}
		}
	}
}

// startBatchSpans starts the publish span of each of the n members of a
// batch (nil when tracing is off), from their stored JSON.
func (s *Server) startBatchSpans(ctx context.Context, n int, groups []*topicGroup, sched []scheduledMember, start time.Time) []tracing.Span {
	tr := s.opts.Tracer
	if tr == nil {
		return nil
	}
	spans := make([]tracing.Span, n)
	for _, g := range groups {
		for k, i := range g.idx {
			spans[i] = tr.StartPublish(ctx, tracing.MessageOf(g.topic, g.msgs[k].Stored), tracing.TransportHTTPBatch, start)
		}
	}
	for _, m := range sched {
		spans[m.i] = tr.StartPublish(ctx, tracing.MessageOf(m.topic, m.stored), tracing.TransportHTTPBatch, start)
	}
	return spans
}

// endBatchSpans ends each member's publish span with its result in b;
// wait is the time the batch took to store.
func endBatchSpans(spans []tracing.Span, b *batch, lvl contract.AckLevel, wait time.Duration) {
	for i, sp := range spans {
		if !sp.On() {
			continue
		}
		r := b.resp.Results[i]
		off := int64(-1)
		if r.Offset != nil {
			off = *r.Offset
		}
		var err error
		if r.Error != "" {
			err = errors.New(r.Error)
		}
		level := lvl
		if r.Scheduled {
			level = contract.Durable
		}
		sp.EndPublish(off, level, wait, r.Duplicate, r.Scheduled, err)
	}
}

// batchParallelTopics is how many topics of one batch are published (and,
// when new, created) at once.
const batchParallelTopics = 16

func firstErr(rs []BatchResult) string {
	for _, r := range rs {
		if r.Error != "" && r.Status != 0 {
			return r.Error
		}
	}
	return ""
}
