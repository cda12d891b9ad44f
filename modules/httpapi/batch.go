package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/storage"
)

// MaxBatchMessages caps the messages of one POST /messages/batch.
const MaxBatchMessages = 10000

// BatchResult is one message's outcome in a batch response: its topic and
// offset (absent for ACCEPTED), or its error with the HTTP status it would
// have had alone.
type BatchResult struct {
	Topic  string `json:"topic,omitempty"`
	Offset *int64 `json:"offset,omitempty"`
	Error  string `json:"error,omitempty"`
	Status int    `json:"status,omitempty"`
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
	// (DESIGN §2): the first failure; Results has each message's.
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
	var out []json.RawMessage
	if ct == "application/x-ndjson" {
		// Lines are sub-slices of body (no copy, no reused scanner buffer).
		for rest := body; len(rest) > 0; {
			line := rest
			if i := bytes.IndexByte(rest, '\n'); i >= 0 {
				line, rest = rest[:i], rest[i+1:]
			} else {
				rest = nil
			}
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			if len(out) >= MaxBatchMessages {
				return nil, badRequest("batch has more than %d messages", MaxBatchMessages)
			}
			out = append(out, json.RawMessage(line))
		}
		if len(out) == 0 {
			return nil, badRequest("batch is empty")
		}
		return out, nil
	}
	// A JSON array: one scanner pass finds (and validates) every element;
	// each is decoded again by decodeMessage, without reflection.
	sc := scanner{b: body}
	sc.ws()
	if sc.i >= len(body) || body[sc.i] != '[' {
		return nil, badRequest("batch body must be a JSON array of messages (or NDJSON with Content-Type: application/x-ndjson)")
	}
	sc.i++
	sc.depth = 1
	sc.ws()
	if sc.i < len(body) && body[sc.i] == ']' {
		sc.i++
	} else {
		for {
			if len(out) >= MaxBatchMessages {
				return nil, badRequest("batch has more than %d messages", MaxBatchMessages)
			}
			sc.ws()
			start := sc.i
			if err := sc.value(); err != nil {
				return nil, badRequest("batch message %d: %v", len(out), err)
			}
			out = append(out, json.RawMessage(body[start:sc.i]))
			sc.ws()
			if sc.i < len(body) && body[sc.i] == ',' {
				sc.i++
				continue
			}
			if sc.i < len(body) && body[sc.i] == ']' {
				sc.i++
				break
			}
			return nil, badRequest("batch body: %v", sc.fail("expected ',' or ']' after message %d", len(out)-1))
		}
	}
	sc.ws()
	if sc.i != len(body) {
		return nil, badRequest("batch body has data after the closing ']'")
	}
	if len(out) == 0 {
		return nil, badRequest("batch is empty")
	}
	return out, nil
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
	resp := BatchResponse{Acknowledgement: "ACK", Level: lvl.String(), Count: len(msgs), Results: make([]BatchResult, len(msgs))}
	firstStatus := 0
	setErr := func(i int, err error) {
		st, code := classify(err)
		resp.Results[i].Error, resp.Results[i].Status = err.Error(), st
		resp.Failed++
		if firstStatus == 0 {
			firstStatus = st
			resp.Error, resp.Code = fmt.Sprintf("%d of %d messages failed; first: %v", 1, len(msgs), err), code
		}
	}
	// Validate everything first, grouping by topic in arrival order.
	type group struct {
		topic    string
		idx      []int
		payloads [][]byte
	}
	var groups []*group
	byTopic := map[string]*group{}
	now := time.Now()
	for i, m := range msgs {
		topic, _, stored, err := decodeMessage(m, now, nil)
		if err == nil {
			err = s.checkSize(stored)
		}
		if err != nil {
			setErr(i, fmt.Errorf("message %d: %w", i, err))
			continue
		}
		resp.Results[i].Topic = topic
		g := byTopic[topic]
		if g == nil {
			g = &group{topic: topic}
			byTopic[topic] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.payloads = append(g.payloads, stored)
	}
	// Validation is all or nothing: one bad message and nothing is stored.
	if resp.Failed > 0 {
		for i := range resp.Results {
			if resp.Results[i].Error == "" {
				resp.Results[i].Error = "not stored: another message of the batch is invalid"
			}
		}
		resp.Acknowledgement = "NACK"
		resp.Error = fmt.Sprintf("batch rejected, nothing stored: %d of %d messages are invalid; first: %s", resp.Failed, len(msgs), firstErr(resp.Results))
		WriteJSON(w, firstStatus, resp)
		return
	}
	// One AppendBatch (one group commit) per topic, topics in parallel.
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.PublishTimeout)
	defer cancel()
	errs := make([]error, len(groups))
	firsts := make([]int64, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := s.reg.GetOrCreate(g.topic)
			if err != nil {
				errs[gi] = err
				return
			}
			firsts[gi], errs[gi] = q.OfferBatch(ctx, g.payloads, lvl)
		}()
	}
	wg.Wait()
	for gi, g := range groups {
		for k, i := range g.idx {
			if errs[gi] != nil {
				setErr(i, errs[gi])
				continue
			}
			if lvl != storage.Accepted {
				off := firsts[gi] + int64(k)
				resp.Results[i].Offset = &off
			}
		}
	}
	status := http.StatusOK
	if resp.Failed > 0 {
		resp.Acknowledgement, status = "NACK", firstStatus
		resp.Error = fmt.Sprintf("%d of %d messages were not stored; first: %s (the others have offsets in results)", resp.Failed, len(msgs), firstErr(resp.Results))
		if status >= 500 {
			s.log.Sugar().Warnw("batch publish partly failed", "failed", resp.Failed, "count", resp.Count)
		}
	}
	WriteJSON(w, status, resp)
}

func firstErr(rs []BatchResult) string {
	for _, r := range rs {
		if r.Error != "" && r.Status != 0 {
			return r.Error
		}
	}
	return ""
}
