package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
)

// MaxBatch is the most messages one AppendBatch may hold: the NATS
// server's default bound of an atomic batch (jetstream.limits
// max_batch_size, default 1000). A server configured lower refuses larger
// batches with the same error (ErrBatchTooLarge).
const MaxBatch = 1000

// maxPendingAsync bounds the ACCEPTED appends (single messages or batches)
// of one log whose acknowledgement has not come back (nor failed).
const maxPendingAsync = 1 << 16

// headerReserve is the room kept for the NATS headers of one message
// (subject-independent: expected stream, batch id, sequence and commit,
// and a message id of up to contract.MaxMessageIDBytes) when checking a
// payload against the connection's max_payload.
const headerReserve = 256 + contract.MaxMessageIDBytes

// JetStream publish headers (the server's JSExpectedStream, JSBatchId,
// JSBatchSeq, JSBatchCommit).
const (
	hdrExpectedStream = "Nats-Expected-Stream"
	hdrBatchID        = "Nats-Batch-Id"
	hdrBatchSeq       = "Nats-Batch-Sequence"
	hdrBatchCommit    = "Nats-Batch-Commit"
	// hdrMsgID is JetStream's duplicate detection: a second message with
	// the same id within the stream's Duplicates window is not stored, and
	// its answer is the first one's sequence.
	hdrMsgID = "Nats-Msg-Id"
)

// Append stores one message JSON. Durable and Written send it with a
// request and answer with its offset (the acknowledged sequence minus 1)
// once JetStream acknowledged it: stored by a majority of the stream's
// replicas, in their page caches or on disk as the servers' sync_interval
// decides (JetStream's own durability point; there is no earlier point
// where a message is written but not replicated, so Written answers as
// Durable does, never claiming more than happened). Accepted sends it and
// returns -1 at once: the message sits in the client's write buffer
// (flushed within milliseconds), then on the wire; a crash of this broker,
// or a lost connection, before the servers stored it loses it, silently
// for the producer, and a refusal by the servers (or no answer within the
// request timeout) is only logged.
//
// Errors (nothing acknowledged): contract.ErrEmptyRecord, contract.ErrRecordTooLarge,
// contract.ErrClosed, ErrQueueFull and contract.ErrOverloaded (ACCEPTED bytes over
// Options.Budget) before anything is sent; ErrNoSpace,
// ErrTimeout or ErrUnavailable from the cluster (stored or not: unknown
// for the last two).
func (l *Log) Append(ctx context.Context, payload []byte, level contract.AckLevel) (int64, error) {
	return l.AppendBatch(ctx, [][]byte{payload}, level)
}

// AppendBatch stores payloads with consecutive offsets, all or none: one
// JetStream atomic batch (the stream allows atomic publish; every message
// carries Nats-Batch-Id and Nats-Batch-Sequence, the last one
// Nats-Batch-Commit and the request for the acknowledgement), which the
// stream stores in one step, so no other message lands between them. A
// single payload is one plain publish. It returns the first offset (-1 for Accepted).
// Errors: those of Append, and ErrBatchTooLarge for more than MaxBatch
// payloads (or the servers' lower bound).
func (l *Log) AppendBatch(ctx context.Context, payloads [][]byte, level contract.AckLevel) (int64, error) {
	if err := l.check(payloads); err != nil {
		return -1, err
	}
	if level == contract.Accepted {
		return -1, l.sendAsync(payloads, level, nil)
	}
	msgs := l.messages(payloads)
	ctx, cancel := context.WithTimeout(ctx, l.opts.RequestTimeout)
	defer cancel()
	for _, m := range msgs[:len(msgs)-1] {
		if err := l.nc.PublishMsg(m); err != nil {
			return -1, fmt.Errorf("append to topic %s: %w", l.topic, classify(err))
		}
	}
	var last int64
	for wait := time.Duration(0); ; {
		resp, err := l.nc.RequestMsgWithContext(ctx, msgs[len(msgs)-1])
		if err != nil {
			return -1, fmt.Errorf("append to topic %s: %w", l.topic, classify(err))
		}
		if last, err = parseAck(resp.Data, len(msgs)); err == nil {
			break
		}
		// The same id through another broker, not stored yet: wait for
		// its outcome, then this copy is answered as its duplicate.
		if wait = nextDuplicateWait(wait); !inProcess(err) || !sleepCtx(ctx, wait) {
			return -1, fmt.Errorf("append to topic %s: %w", l.topic, err)
		}
	}
	l.advance(last)
	return last - int64(len(msgs)), nil
}

// check refuses what must not be sent: a closed log, a connection down
// (reconnecting), an empty or oversized payload, a batch over MaxBatch.
func (l *Log) check(payloads [][]byte) error {
	if l.closed.Load() {
		return fmt.Errorf("append to topic %s: %w", l.topic, contract.ErrClosed)
	}
	if !l.nc.IsConnected() {
		return fmt.Errorf("append to topic %s: %w", l.topic, classify(nats.ErrReconnectBufExceeded))
	}
	switch {
	case len(payloads) == 0:
		return fmt.Errorf("append: %w: no payload", contract.ErrEmptyRecord)
	case len(payloads) > MaxBatch:
		return fmt.Errorf("append to topic %s: %w: %d messages, at most %d in one batch", l.topic, ErrBatchTooLarge, len(payloads), MaxBatch)
	}
	maxNATS := l.nc.MaxPayload() - headerReserve
	for i, p := range payloads {
		switch {
		case len(p) < contract.MinPayloadBytes:
			return fmt.Errorf("append payload %d: %w: %d bytes, minimum %d", i, contract.ErrEmptyRecord, len(p), contract.MinPayloadBytes)
		case l.opts.MaxRecordBytes > 0 && len(p) > l.opts.MaxRecordBytes:
			return fmt.Errorf("append payload %d: %w: %d bytes, maximum %d", i, contract.ErrRecordTooLarge, len(p), l.opts.MaxRecordBytes)
		case int64(len(p)) > maxNATS:
			return fmt.Errorf("append payload %d: %w: %d bytes, the NATS servers take at most %d (their max_payload less %d for headers)",
				i, contract.ErrRecordTooLarge, len(p), maxNATS, headerReserve)
		}
	}
	return nil
}

// messages builds the NATS messages of payloads: one plain publish for a
// single payload, an atomic batch for several.
func (l *Log) messages(payloads [][]byte) []*nats.Msg {
	msgs := make([]*nats.Msg, len(payloads))
	id := ""
	if len(payloads) > 1 {
		id = nuid.Next()
	}
	for i, p := range payloads {
		m := &nats.Msg{Subject: l.subject, Data: p, Header: nats.Header{}}
		m.Header.Set(hdrExpectedStream, l.stream)
		if id == "" && l.opts.DedupWindow > 0 {
			// The producer's message id (every stored message has one):
			// a retry through another broker, whose own window has not
			// seen it, is recognised by JetStream and answered with the
			// first offset. Not in atomic batches: JetStream refuses a
			// whole batch that holds one id it has seen (error 10201)
			// instead of answering that message as a duplicate.
			if mid := contract.MessageID(p); mid != "" {
				m.Header.Set(hdrMsgID, mid)
			}
		}
		if id != "" {
			m.Header.Set(hdrBatchID, id)
			m.Header.Set(hdrBatchSeq, strconv.Itoa(i+1))
			if i == len(payloads)-1 {
				m.Header.Set(hdrBatchCommit, "1")
			}
		}
		msgs[i] = m
	}
	return msgs
}

// AppendBatchNotify appends payloads as AppendBatch does and returns once
// they are sent: nil, or the error that refused them before anything was
// sent (notify is then never called). notify is called exactly once, from
// the NATS client's goroutine, with the first offset once JetStream
// acknowledged the whole batch (every level: ACCEPTED payloads are
// reported once stored) or with -1 and the error (refused, no answer
// within the request timeout, connection lost: stored or not, unknown).
// Calls from one goroutine are sent, and so get offsets, in call order.
// notify must not block or call into the log. The registry uses it for
// publishes with producer ids (the idempotent-publish window learns their
// outcome) instead of a goroutine per publish.
func (l *Log) AppendBatchNotify(payloads [][]byte, level contract.AckLevel, notify func(first int64, err error)) error {
	if err := l.check(payloads); err != nil {
		return err
	}
	return l.sendAsync(payloads, level, &pendingAsync{fn: notify})
}

// AppendBatchNotifyDuplicate is AppendBatchNotify whose notify also says
// whether JetStream recognised the message as one it stored before: a
// single payload whose message id (Nats-Msg-Id, sent when
// Options.DedupWindow > 0) the stream saw within its duplicate window,
// through any broker. Then nothing was stored and first is the earlier
// message's offset. A batch is never reported a duplicate (batches carry
// no ids). The registry uses it so that a retry through another broker is
// answered "duplicate": true.
func (l *Log) AppendBatchNotifyDuplicate(payloads [][]byte, level contract.AckLevel, notify func(first int64, duplicate bool, err error)) error {
	if err := l.check(payloads); err != nil {
		return err
	}
	return l.sendAsync(payloads, level, &pendingAsync{dupFn: notify})
}

// pendingAsync is an asynchronous append awaiting its ack, keyed by the
// last message sent (the one acknowledged).
type pendingAsync struct {
	n        int64                        // messages in the batch
	budgeted int64                        // bytes taken from Options.Budget (ACCEPTED)
	fn       func(first int64, err error) // AppendBatchNotify's; may be nil
	// dupFn is AppendBatchNotifyDuplicate's (then fn is nil).
	dupFn func(first int64, duplicate bool, err error)
	// deadline ends the waits for a copy with the same id (retryDuplicate):
	// the first send plus the request timeout. wait is the last wait.
	deadline time.Time
	wait     time.Duration
}

// nextDuplicateWait is the wait after wait before sending again a message
// refused while a copy with its id is stored (codeDuplicateInProcess):
// duplicateWait, doubling up to duplicateWaitMax.
func nextDuplicateWait(wait time.Duration) time.Duration {
	return min(max(2*wait, duplicateWait), duplicateWaitMax)
}

// sleepCtx waits d; false when ctx ends first (or would, its deadline
// falling within d).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryDuplicate sends m again after a wait when it was refused because a
// message with its id is being stored (typically the same producer id
// through another broker at the same moment) and its append has time
// left: the answer is then that copy's offset, as a duplicate, or, if that
// copy failed, this one's. False (the error is the append's outcome) when
// m has no pending append or its time is up.
func (l *Log) retryDuplicate(m *nats.Msg) bool {
	v, ok := l.notifies.Load(m)
	if !ok {
		return false
	}
	pa := v.(*pendingAsync)
	pa.wait = nextDuplicateWait(pa.wait)
	if time.Now().Add(pa.wait).After(pa.deadline) {
		return false
	}
	time.AfterFunc(pa.wait, func() {
		if _, err := l.ajs.PublishMsgAsync(m); err != nil {
			l.asyncDone(m, -1, false, fmt.Errorf("append to topic %s: %w", l.topic, classify(err)))
		}
	})
	return true
}

// sendAsync sends payloads, the last message (the only one of a single
// payload, the commit of a batch) through the log's asynchronous publisher
// (newAsyncPublisher), which holds it pending until its acknowledgement,
// an error or the request timeout; pa's callback (none for a nil pa) is
// told the outcome. ACCEPTED payloads hold their bytes of Options.Budget
// until then: contract.ErrOverloaded (nothing sent) when they do not fit.
func (l *Log) sendAsync(payloads [][]byte, level contract.AckLevel, pa *pendingAsync) error {
	if pa == nil {
		pa = &pendingAsync{}
	}
	pa.n = int64(len(payloads))
	pa.deadline = time.Now().Add(l.opts.RequestTimeout)
	if level == contract.Accepted {
		for _, p := range payloads {
			pa.budgeted += int64(len(p))
		}
		if !l.opts.Budget.TryAcquire(pa.budgeted) {
			return l.opts.Budget.Overloaded("ACCEPTED append to topic "+l.topic, pa.budgeted)
		}
	}
	msgs := l.messages(payloads)
	last := msgs[len(msgs)-1]
	var err error
	for _, m := range msgs[:len(msgs)-1] {
		if err = l.nc.PublishMsg(m); err != nil {
			break
		}
	}
	if err == nil {
		l.notifies.Store(last, pa)
		if _, err = l.ajs.PublishMsgAsync(last); err != nil {
			l.notifies.Delete(last)
		}
	}
	if err != nil {
		l.opts.Budget.Release(pa.budgeted)
	}
	switch {
	case errors.Is(err, jetstream.ErrTooManyStalledMsgs):
		return fmt.Errorf("append to topic %s: %w: %d accepted appends await their acknowledgement", l.topic, ErrQueueFull, l.ajs.PublishAsyncPending())
	case err != nil:
		return fmt.Errorf("append to topic %s: %w", l.topic, classify(err))
	}
	return nil
}

// asyncDone ends the pending append of m: its budget is released and its
// callback told (last is the acknowledged sequence, duplicate the ack's
// flag); false when m has none.
func (l *Log) asyncDone(m *nats.Msg, last int64, duplicate bool, err error) bool {
	v, ok := l.notifies.LoadAndDelete(m)
	if !ok {
		return false
	}
	pa := v.(*pendingAsync)
	l.opts.Budget.Release(pa.budgeted)
	first := last
	if err == nil {
		first -= pa.n
	}
	switch {
	case pa.fn != nil:
		pa.fn(first, err)
	case pa.dupFn != nil:
		pa.dupFn(first, duplicate && err == nil, err)
	default:
		return false
	}
	return true
}

// newAsyncPublisher is the JetStream context of a log's asynchronous
// appends (ACCEPTED, and AppendBatchNotify): at most maxPendingAsync
// unacknowledged (more wait up to 200ms, then fail with ErrQueueFull),
// each failed after timeout or when the connection is lost. An
// acknowledgement raises the high watermark; a failure is logged. Either
// goes to the append's callback when it has one (asyncDone).
func (l *Log) newAsyncPublisher(timeout time.Duration) (jetstream.JetStream, error) {
	return jetstream.New(l.nc,
		jetstream.WithPublishAsyncMaxPending(maxPendingAsync),
		jetstream.WithPublishAsyncTimeout(timeout),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
			l.advance(int64(ack.Sequence))
			l.asyncDone(m, int64(ack.Sequence), ack.Duplicate, nil)
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			if inProcess(err) && l.retryDuplicate(m) {
				return
			}
			err = fmt.Errorf("append to topic %s: %w", l.topic, classify(err))
			if !l.asyncDone(m, -1, false, err) && l.opts.Logger != nil {
				l.opts.Logger.Warn("an accepted append may not be stored", zap.String("topic", l.topic), zap.Error(err))
			}
		}),
	)
}

// pubAck is a JetStream publish answer: the server's PubAck (with the
// batch's size for an atomic batch) or an API error.
type pubAck struct {
	Error     *apiError `json:"error,omitempty"`
	Stream    string    `json:"stream"`
	Seq       int64     `json:"seq"`
	Duplicate bool      `json:"duplicate,omitempty"`
	Count     int64     `json:"count,omitempty"`
}

// errNoAck is an empty answer: the no-responders status (no stream
// listens on the subject, or its leader is being elected).
var errNoAck = errors.New("jetstream: empty publish answer (no responders: no stream leader)")

// parseAck returns the last sequence an answer acknowledges; n > 0 is
// how many messages it must cover.
func parseAck(data []byte, n int) (int64, error) {
	if len(data) == 0 {
		return 0, classify(errNoAck)
	}
	var a pubAck
	if err := json.Unmarshal(data, &a); err != nil {
		return 0, classify(fmt.Errorf("decode publish answer: %w", err))
	}
	if a.Error != nil {
		return 0, classify(a.Error)
	}
	if n > 1 && a.Count != int64(n) {
		return 0, classify(fmt.Errorf("batch of %d acknowledged as %d messages", n, a.Count))
	}
	if a.Seq < int64(max(n, 1)) {
		return 0, classify(fmt.Errorf("publish answer with sequence %d", a.Seq))
	}
	return a.Seq, nil
}
