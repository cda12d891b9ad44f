package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
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
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
	Status    int    `json:"status,omitempty"`
}

// BatchResponse is the body of POST /messages/batch. Validation is all or
// nothing: when any message is invalid, nothing is stored and the status is
// that of the first invalid message (400 or 413). Otherwise each topic's
// messages are appended as one unit; Acknowledgement is ACK only when every
// message reached the requested level (200), else the status of the first
// storage failure, and Results tells which messages were stored (with their
// offsets) and which were not.
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
	return fmt.Sprintf("%d of %d messages were not stored; first: %s (the others were stored: their offsets are in results)", failed, count, first)
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
	groups := s.decodeBatch(b, msgs)
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
	topics := make([]string, len(groups))
	for i, g := range groups {
		topics[i] = g.topic
	}
	if err := s.publishAllowed(r, len(msgs), topics...); err != nil {
		contract.WriteErr(w, err)
		return
	}
	s.storeBatch(r.Context(), b, groups, lvl)
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

// decodeBatch validates every message, recording failures in b, and
// groups the stored messages by topic in order of first appearance.
func (s *Server) decodeBatch(b *batch, msgs []json.RawMessage) []*topicGroup {
	var groups []*topicGroup
	byTopic := map[string]*topicGroup{}
	now := time.Now()
	for i, m := range msgs {
		d, err := contract.DecodeMessage(m, now, nil)
		topic := d.Topic
		if err == nil && d.Scheduled {
			err = contract.BadRequest(`"deliverAt" and "delay" are not supported in batches yet; publish a scheduled message alone on POST /messages`)
		}
		if err == nil {
			err = s.checkSize(d.Stored)
		}
		if err != nil {
			b.setErr(i, fmt.Errorf("message %d: %w", i, err))
			continue
		}
		b.resp.Results[i].Topic, b.resp.Results[i].ID = topic, d.ID
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
	return groups
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
	for gi, g := range groups {
		done[gi] = make(chan outcome, 1)
		if _, exists := s.reg.Get(g.topic); !exists {
			if room == 0 {
				done[gi] <- outcome{err: fmt.Errorf("publish to topic %s: %w: the batch's earlier new topics took the room left (mmmq.broker.storage.max-topics)", g.topic, topicqueue.ErrTooManyTopics)}
				continue
			}
			room--
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
