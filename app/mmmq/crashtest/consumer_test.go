package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// delivery is one message the consumer received: a push of one message,
// or one element of a batch push.
type delivery struct {
	Round      int // which broker run sent it (one listener per run)
	Dispatcher string
	Topic      string
	Offset     int64
	Attempt    int
	ID         string
	// Body is the stored message JSON as the log holds it: the request
	// body of a single push; for a batch element, the element without the
	// "offset" member the broker added first.
	Body []byte
	// Batch is the number of messages of the batch push it came in; 0 for
	// a push of one message.
	Batch int
	// Acked: the consumer answered ACK for it (NACK otherwise).
	Acked bool
}

// consumer records every push, in arrival order, and answers ACK, or NACK
// for the messages nack selects. It understands batch pushes (a JSON array
// of stored messages, each with "offset" added as its first member, and the
// mmmq-batch-size, mmmq-first-offset and mmmq-last-offset headers): it
// records one delivery per element and answers either
// {"acknowledgement":...} (when every element gets the same answer, every
// other batch) or {"results":[{"offset":o,"acknowledgement":...},...]}.
// A push that breaks that format is answered 400 and recorded in
// violations. Each broker run gets its own listener (listen), so a
// delivery is attributed to exactly one run even if a dead process's
// request is read late.
type consumer struct {
	mu      sync.Mutex
	seen    []delivery
	bad     []string
	batches int
	// Per worker: pushes being handled now (per run), the most at once
	// in any run, and batch pushes of more than one message.
	busy        map[busyKey]int
	peak, multi map[wkey]int
	// nack, if set, selects the messages answered NACK.
	nack func(delivery) bool
	// beforeAnswer, if set, is called once per push (outside mu) with its
	// messages, after they are recorded and before the answer is written.
	beforeAnswer func([]delivery)
}

// listen starts a listener on 127.0.0.1 for round and returns its port and
// a func closing it (bounded).
func (c *consumer) listen(t testing.TB, round int) (port int, closeFn func()) {
	t.Helper()
	return listenRound(t, round, func(w http.ResponseWriter, r *http.Request) { c.serve(w, r, round) })
}

// listenRound serves h on a new listener on 127.0.0.1 for round (one
// broker run) and returns its port and a func closing it (bounded).
func listenRound(t testing.TB, round int, h http.HandlerFunc) (port int, closeFn func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	closeFn = func() {
		once.Do(func() {
			_ = srv.Close()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Errorf("consumer listener of round %d did not close", round)
			}
		})
	}
	t.Cleanup(closeFn)
	return ln.Addr().(*net.TCPAddr).Port, closeFn
}

// serve handles one push of round.
func (c *consumer) serve(w http.ResponseWriter, r *http.Request, round int) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		// The broker died while sending: nothing was received.
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	att, _ := strconv.Atoi(r.Header.Get("mmmq-attempt"))
	base := delivery{
		Round:      round,
		Dispatcher: r.Header.Get("mmmq-consumer-id"),
		Topic:      r.Header.Get("mmmq-topic"),
		Attempt:    att,
	}
	var ds []delivery
	isBatch := r.Header.Get("mmmq-batch-size") != ""
	if isBatch {
		ds, err = splitBatch(base, r.Header, body)
	} else {
		d := base
		d.Offset, err = strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
		d.ID, d.Body = r.Header.Get("mmmq-message-id"), body
		ds = []delivery{d}
	}
	if err != nil {
		c.mu.Lock()
		c.bad = append(c.bad, fmt.Sprintf("run %d: push by %s of %s: %v", round, base.Dispatcher, base.Topic, err))
		c.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	acks, nacks := 0, 0
	for i := range ds {
		ds[i].Acked = c.nack == nil || !c.nack(ds[i])
		if ds[i].Acked {
			acks++
		} else {
			nacks++
		}
	}
	c.mu.Lock()
	c.seen = append(c.seen, ds...)
	alt := false
	if isBatch {
		c.batches++
		alt = c.batches%2 == 0
	}
	if c.busy == nil {
		c.busy, c.peak, c.multi = map[busyKey]int{}, map[wkey]int{}, map[wkey]int{}
	}
	k := wkey{base.Dispatcher, base.Topic}
	bk := busyKey{round, k}
	c.busy[bk]++
	c.peak[k] = max(c.peak[k], c.busy[bk])
	if len(ds) > 1 {
		c.multi[k]++
	}
	c.mu.Unlock()
	// Before the handler returns, so before net/http sends the answer
	// (buffered until then): the broker cannot have seen it yet.
	defer func() {
		c.mu.Lock()
		c.busy[bk]--
		c.mu.Unlock()
	}()
	if c.beforeAnswer != nil {
		c.beforeAnswer(ds)
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case !isBatch || (alt && (acks == 0 || nacks == 0)):
		o := "ACK"
		if acks == 0 {
			o = "NACK"
		}
		_, _ = fmt.Fprintf(w, `{"acknowledgement":%q}`, o)
	default:
		type result struct {
			Offset          int64  `json:"offset"`
			Acknowledgement string `json:"acknowledgement"`
		}
		res := make([]result, len(ds))
		for i, d := range ds {
			res[i] = result{d.Offset, "ACK"}
			if !d.Acked {
				res[i].Acknowledgement = "NACK"
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"results": res})
	}
}

// splitBatch reads a batch push: a JSON array whose every element is a
// stored message with "offset":N added as its first member; the elements
// in increasing offset order; their number, first and last offsets as
// the batch headers say.
func splitBatch(base delivery, h http.Header, body []byte) ([]delivery, error) {
	var elems []json.RawMessage
	if err := json.Unmarshal(body, &elems); err != nil {
		return nil, fmt.Errorf("batch body is not a JSON array: %v", err)
	}
	size, err1 := strconv.Atoi(h.Get("mmmq-batch-size"))
	first, err2 := strconv.ParseInt(h.Get("mmmq-first-offset"), 10, 64)
	last, err3 := strconv.ParseInt(h.Get("mmmq-last-offset"), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return nil, fmt.Errorf("batch headers size %q first %q last %q", h.Get("mmmq-batch-size"), h.Get("mmmq-first-offset"), h.Get("mmmq-last-offset"))
	}
	if len(elems) == 0 || len(elems) != size {
		return nil, fmt.Errorf("batch of %d elements, mmmq-batch-size %d", len(elems), size)
	}
	ds := make([]delivery, len(elems))
	for i, e := range elems {
		off, raw, err := cutOffset(e)
		if err != nil {
			return nil, fmt.Errorf("batch element %d: %v", i, err)
		}
		if i > 0 && off <= ds[i-1].Offset {
			return nil, fmt.Errorf("batch element %d: offset %d after %d", i, off, ds[i-1].Offset)
		}
		s, err := parseStored(raw)
		if err != nil {
			return nil, fmt.Errorf("batch element %d (offset %d): %v", i, off, err)
		}
		d := base
		d.Offset, d.ID, d.Body, d.Batch = off, s.ID, raw, len(elems)
		ds[i] = d
	}
	if ds[0].Offset != first || ds[len(ds)-1].Offset != last {
		return nil, fmt.Errorf("batch offsets %d..%d, headers say %d..%d", ds[0].Offset, ds[len(ds)-1].Offset, first, last)
	}
	return ds, nil
}

// cutOffset splits a batch element {"offset":N,<rest> into N and the
// stored message {<rest> it was made from.
func cutOffset(e []byte) (int64, []byte, error) {
	const prefix = `{"offset":`
	if !bytes.HasPrefix(e, []byte(prefix)) {
		return 0, nil, fmt.Errorf("does not start with %s: %.60s", prefix, e)
	}
	rest := e[len(prefix):]
	n := 0
	for n < len(rest) && (rest[n] >= '0' && rest[n] <= '9') {
		n++
	}
	off, err := strconv.ParseInt(string(rest[:n]), 10, 64)
	if err != nil || n == len(rest) {
		return 0, nil, fmt.Errorf("bad offset member: %.60s", e)
	}
	rest = rest[n:]
	switch rest[0] {
	case ',':
		rest = rest[1:]
	case '}':
	default:
		return 0, nil, fmt.Errorf("bad offset member: %.60s", e)
	}
	return off, append([]byte{'{'}, rest...), nil
}

// deliveries returns a copy of everything received so far.
func (c *consumer) deliveries() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.seen...)
}

// violations returns the pushes that broke the push format.
func (c *consumer) violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.bad...)
}

// busyKey is one worker in one run.
type busyKey struct {
	round int
	k     wkey
}

// stats returns, per worker, the most pushes handled at once (in one run)
// and the number of batch pushes of more than one message.
func (c *consumer) stats() (peak, batched map[wkey]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	peak, batched = map[wkey]int{}, map[wkey]int{}
	for d, n := range c.peak {
		peak[d] = n
	}
	for d, n := range c.multi {
		batched[d] = n
	}
	return peak, batched
}
