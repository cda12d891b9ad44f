package dispatcher

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Outcome is a consumer's normal answer to a delivery: a 2xx response whose
// JSON body is {"acknowledgement":"ACK"} or {"acknowledgement":"NACK"}
// (AckBody), or a status AckStatus reads as one.
type Outcome string

const (
	// ACK: the consumer processed the message; the worker commits and moves on.
	ACK Outcome = "ACK"
	// NACK: the consumer refused the message; the worker resends it, at most
	// Options.MaxResends times (the original Java mmmq's rule: 3 resends, 4
	// attempts in all), then appends it to the dispatcher's dead-letter
	// topic (or, with dead letters off, logs it), commits and moves on.
	NACK Outcome = "NACK"
)

// Delivery is one attempt to deliver one message.
type Delivery struct {
	// Dispatcher is the dispatcher delivering (host, path, timeout, name).
	Dispatcher *Dispatcher
	// Topic is the topic name (mmmq-topic header).
	Topic string
	// Incarnation is the topic's incarnation id (mmmq-topic-incarnation
	// header, omitted when empty): a topic deleted and created again starts
	// at offset 0 under a new one, so (Incarnation, Offset) names a message
	// for good.
	Incarnation string
	// Offset is the message's offset in Topic (mmmq-offset header).
	Offset int64
	// Attempt counts the sends of this message by this dispatcher, from 1,
	// abnormal ones included (mmmq-attempt header). It restarts at 1 after a
	// broker restart.
	Attempt int
	// LeaseEpoch is the epoch of the lease under which the worker delivers
	// (mmmq-lease-epoch header, omitted when 0: the backend needs no
	// lease). A consumer fed by several broker nodes may drop a push whose
	// epoch is older than the newest it has seen for the topic: it comes
	// from a node that lost its lease and has not noticed yet.
	LeaseEpoch uint64
	// MessageID is the producer message id from the stored JSON ("" when
	// absent or not usable as a header value) (mmmq-message-id header).
	MessageID string
	// Key is the message's ordering key from the stored JSON ("" when it
	// has none, or one that is not a valid key) (mmmq-key header, in a
	// push of one message; in a batch each message's stored JSON carries
	// its own "key").
	Key string
	// Body is the stored message JSON, sent as is. It must not be modified.
	Body []byte
}

// Sender makes one delivery attempt. It returns ACK or NACK with a nil error
// for a normal response, and a non-nil error for anything abnormal (then the
// Outcome is ""): an *AbnormalError for a response that is not a normal one,
// or the transport error (connection refused, timeout, cancelled context).
// Send must honour ctx: when ctx is done it returns promptly.
//
// The default implementation is *HTTPSender, which is also a PushSender
// (batches, the status of normal answers). The Fx module provides it as
// Sender, so tests and plugins may replace it with
// fx.Decorate(func(dispatcher.Sender) dispatcher.Sender { ... }) or
// fx.Replace(fx.Annotate(mySender, fx.As(new(dispatcher.Sender)))). A
// replacement that is not a PushSender gets one Send per message: batches
// are then sent message by message.
type Sender interface {
	Send(ctx context.Context, d Delivery) (Outcome, error)
}

// Push is one request to a consumer: one message, or a batch of them.
type Push struct {
	// Messages are the deliveries, in offset order (at least one); they
	// share Dispatcher, Topic and Incarnation.
	Messages []Delivery
	// Batch sends Messages as a JSON array (the dispatcher has a Batch),
	// even when there is only one.
	Batch bool
}

// Answer is a consumer's normal answer to a Push.
type Answer struct {
	// Status is the HTTP status code (0 when the sender has none).
	Status int
	// Outcomes holds one ACK or NACK per message of the push, in order.
	Outcomes []Outcome
	// RetryAfter holds, per message in the same order, how long a NACKed
	// message asks to wait before it is sent again (the answer's
	// "retryAfter", or a NACK's Retry-After under AckStatus); 0, or a nil
	// slice, is no wish: the ordering's rule applies.
	RetryAfter []time.Duration
}

// retryAfter is the wait message i of the push asked for (0 for none).
func (a Answer) retryAfter(i int) time.Duration {
	if i < len(a.RetryAfter) {
		return a.RetryAfter[i]
	}
	return 0
}

// PushSender is a Sender that also sends a Push in one request. The worker
// uses it when the Sender has it.
type PushSender interface {
	Sender
	Push(ctx context.Context, p Push) (Answer, error)
}

// AbnormalError is a response that is not a normal one (3xx,
// 4xx, 5xx, a 2xx whose body is not {"acknowledgement":"ACK"|"NACK"}, a body
// over the size cap).
type AbnormalError struct {
	// StatusCode is the HTTP status (0 when no status applies).
	StatusCode int
	// Reason says what was wrong, e.g. `body is not {"acknowledgement":"ACK"|"NACK"}`.
	Reason string
	// RetryAfter is the wait a 429 or 503 asked for in its Retry-After
	// header (seconds or an HTTP date); 0 when absent or unreadable. The
	// worker waits at least this long, at most Options.BackoffMax.
	RetryAfter time.Duration
}

// Error returns "dispatcher: abnormal response: HTTP <status>: <reason>".
func (e *AbnormalError) Error() string {
	return fmt.Sprintf("dispatcher: abnormal response: HTTP %d: %s", e.StatusCode, e.Reason)
}

// Header names of a delivery (the push request's headers). They are sent in
// exactly this (lower) case.
const (
	// HeaderConsumerID carries the dispatcher name.
	HeaderConsumerID = "mmmq-consumer-id"
	// HeaderInstanceID carries the pushing broker's instance id
	// (Options.InstanceID): a broker refuses a publish carrying its own
	// (508 LOOP); omitted when empty.
	HeaderInstanceID = contract.HeaderInstanceID
	// HeaderTopic carries the topic name.
	HeaderTopic = "mmmq-topic"
	// HeaderTopicIncarnation carries the topic's incarnation id (32 hex
	// digits), different after the topic is deleted and created again;
	// omitted when the storage backend has none.
	HeaderTopicIncarnation = "mmmq-topic-incarnation"
	// HeaderOffset carries the message offset in its topic, in decimal.
	HeaderOffset = "mmmq-offset"
	// HeaderAttempt carries Delivery.Attempt (1-based), in decimal; in a
	// batch, the highest attempt of its messages.
	HeaderAttempt = "mmmq-attempt"
	// HeaderLeaseEpoch carries Delivery.LeaseEpoch, in decimal; omitted
	// when 0.
	HeaderLeaseEpoch = "mmmq-lease-epoch"
	// HeaderMessageID carries the producer message id; omitted when empty.
	HeaderMessageID = "mmmq-message-id"
	// HeaderKey carries the message's ordering key (Delivery.Key) as it
	// was published (a valid key is a header value as it stands); omitted
	// when the message has none, and in batch pushes, whose body carries
	// each message's "key" in its stored JSON.
	HeaderKey = "mmmq-key"
	// HeaderBatchSize carries the number of messages of a batch push.
	HeaderBatchSize = "mmmq-batch-size"
	// HeaderFirstOffset and HeaderLastOffset carry the first and last
	// offsets of a batch push.
	HeaderFirstOffset = "mmmq-first-offset"
	HeaderLastOffset  = "mmmq-last-offset"
)

// HTTPSender is the default Sender and PushSender: it POSTs the stored
// message JSON (or a batch: a JSON array of them) to <host><path> with the
// mmmq-* delivery headers above, the dispatcher's own headers, User-Agent
// Options.UserAgent and, when the dispatcher has them, CloudEvents headers
// and Standard Webhooks signatures, and reads the answer per the
// dispatcher's AckMode.
// Redirects are never followed (a 3xx is abnormal); each attempt is bounded by the
// dispatcher's timeout (default Options.DefaultTimeout, 30 s), which covers
// connecting, sending, waiting for headers and reading the body, so a
// consumer trickling its body cannot hold a worker longer; at most
// Options.MaxResponseBytes (default 64 KiB) of the response are read and a
// longer body is abnormal (with AckBody; AckStatus ignores the body). Safe
// for concurrent use.
type HTTPSender struct {
	client      *http.Client
	transport   *http.Transport // the shared one, cloned for TLS settings
	tlsMu       sync.Mutex
	tlsClients  map[string]tlsClient // by dispatcher name (clientFor)
	maxBody     int64
	timeout     time.Duration
	defaultPath string
	userAgent   string
	nodeName    string
	instanceID  string
	now         func() time.Time
	trace       TraceFunc // nil: StoredTrace
}

// TraceFunc computes the W3C trace headers one push attempt of d sends
// (traceparent, tracestate; "" leaves a header out) from the ones stored
// with the message (contract.MessageTrace: valid, or ""). It is called
// once per attempt of a push of one message, with the attempt's context,
// and once per attempt of a batch push with traceparent and tracestate ""
// (the batch's own span, when traced; each message's stored values are in
// the body): StoredTrace then sends none.
//
// This is the seam of trace propagation: StoredTrace, the default, sends
// the stored values byte for byte (tracing off). A tracing module
// replaces it with HTTPSender.SetTrace, returning its push span's context
// (a child of the stored one) while the stored headers keep the
// publisher's value.
type TraceFunc func(ctx context.Context, d Delivery, traceparent, tracestate string) (string, string)

// StoredTrace is the default TraceFunc: the stored values, unchanged.
func StoredTrace(_ context.Context, _ Delivery, traceparent, tracestate string) (string, string) {
	return traceparent, tracestate
}

// SetTrace makes s compute every push's trace headers with f (nil:
// StoredTrace). Call it before the first push; it is not safe to call
// while pushes are under way.
func (s *HTTPSender) SetTrace(f TraceFunc) { s.trace = f }

// outgoingTrace is the trace headers of a push of the single message d:
// the stored ones, through s.trace.
func (s *HTTPSender) outgoingTrace(ctx context.Context, d Delivery) (traceparent, tracestate string) {
	traceparent, tracestate = contract.MessageTrace(d.Body)
	if s.trace != nil {
		return s.trace(ctx, d, traceparent, tracestate)
	}
	return traceparent, tracestate
}

// NewHTTPSender returns an HTTPSender using opts.DefaultTimeout,
// opts.MaxResponseBytes, opts.DefaultPath, opts.UserAgent, opts.NodeName and opts.InstanceID
// (zero fields take the defaults, see Options). Its transport keeps up to
// 64 idle connections per consumer host (enough for max-in-flight pushes of
// several topics), dials with a 10 s timeout and reads at most 64 KiB of
// response headers.
func NewHTTPSender(opts Options) *HTTPSender {
	opts = opts.WithDefaults()
	tr := &http.Transport{
		Proxy:                  http.ProxyFromEnvironment,
		DialContext:            (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           512,
		MaxIdleConnsPerHost:    64,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &HTTPSender{
		transport: tr,
		client: &http.Client{
			Transport: tr,
			// Redirects are never followed; the 3xx is returned
			// to Send, which reports it as abnormal.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		maxBody:     opts.MaxResponseBytes,
		timeout:     opts.DefaultTimeout,
		defaultPath: opts.DefaultPath,
		userAgent:   opts.UserAgent,
		nodeName:    opts.NodeName,
		instanceID:  opts.InstanceID,
		now:         time.Now,
	}
}

// CloseIdleConnections closes the idle keep-alive connections, those of
// the dispatchers' own TLS transports too; the Fx module calls it on stop.
func (s *HTTPSender) CloseIdleConnections() {
	s.client.CloseIdleConnections()
	s.tlsMu.Lock()
	defer s.tlsMu.Unlock()
	for _, c := range s.tlsClients {
		c.client.CloseIdleConnections()
	}
}

// URL returns the URL a delivery by d is posted to: host + path (or the
// default path).
func (s *HTTPSender) URL(d *Dispatcher) string {
	p := d.Path()
	if p == "" {
		p = s.defaultPath
	}
	return d.Host().String() + p
}

// Send implements Sender: a Push of d alone.
func (s *HTTPSender) Send(ctx context.Context, d Delivery) (Outcome, error) {
	a, err := s.Push(ctx, Push{Messages: []Delivery{d}})
	if err != nil {
		return "", err
	}
	return a.Outcomes[0], nil
}

// Push implements PushSender.
func (s *HTTPSender) Push(ctx context.Context, p Push) (Answer, error) {
	if len(p.Messages) == 0 {
		return Answer{}, errors.New("dispatcher: empty push")
	}
	first := p.Messages[0]
	d := first.Dispatcher
	timeout := d.Timeout()
	if timeout <= 0 {
		timeout = s.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := s.URL(d)
	body, webhookID := s.render(p)
	// A *bytes.Reader body gives the request its Content-Length.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Answer{}, fmt.Errorf("build request for %s: %w", url, err)
	}
	s.setHeaders(ctx, req.Header, p)
	if d.dl.signer != nil {
		d.dl.signer.SetHeaders(req.Header, webhookID, s.now(), body)
	}
	resp, err := s.clientFor(d).Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	rbody, err := io.ReadAll(io.LimitReader(resp.Body, s.maxBody+1))
	if err != nil {
		return Answer{}, fmt.Errorf("read response from %s (HTTP %d): %w", url, resp.StatusCode, err)
	}
	return s.answer(p, resp, rbody)
}

// setHeaders sets the delivery headers of p on h. Raw map keys, so that
// the names go out exactly as the Header constants spell them (lower case;
// Header.Set would canonicalise them).
func (s *HTTPSender) setHeaders(ctx context.Context, h http.Header, p Push) {
	first, last := p.Messages[0], p.Messages[len(p.Messages)-1]
	d := first.Dispatcher
	for k, v := range d.dl.headers {
		h.Set(k, v)
	}
	if _, own := h["User-Agent"]; !own {
		h["User-Agent"] = []string{s.userAgent}
	}
	h["Content-Type"] = []string{"application/json"}
	h[HeaderConsumerID] = []string{d.Name()}
	if s.instanceID != "" {
		h[HeaderInstanceID] = []string{s.instanceID}
	}
	h[HeaderTopic] = []string{first.Topic}
	if first.Incarnation != "" && contract.ValidHeaderValue(first.Incarnation) {
		h[HeaderTopicIncarnation] = []string{first.Incarnation}
	}
	if first.LeaseEpoch > 0 {
		h[HeaderLeaseEpoch] = []string{strconv.FormatUint(first.LeaseEpoch, 10)}
	}
	if p.Batch {
		attempt := 0
		for _, m := range p.Messages {
			attempt = max(attempt, m.Attempt)
		}
		h[HeaderBatchSize] = []string{strconv.Itoa(len(p.Messages))}
		h[HeaderFirstOffset] = []string{strconv.FormatInt(first.Offset, 10)}
		h[HeaderLastOffset] = []string{strconv.FormatInt(last.Offset, 10)}
		h[HeaderAttempt] = []string{strconv.Itoa(attempt)}
		if s.trace != nil {
			// Traced: the batch push span's own context (each message's
			// stored one is in the body).
			if tp, ts := s.trace(ctx, first, "", ""); tp != "" && contract.ValidHeaderValue(tp) {
				h[contract.TraceparentHeader] = []string{tp}
				if ts != "" && contract.ValidHeaderValue(ts) {
					h[contract.TracestateHeader] = []string{ts}
				}
			}
		}
		return
	}
	h[HeaderOffset] = []string{strconv.FormatInt(first.Offset, 10)}
	h[HeaderAttempt] = []string{strconv.Itoa(first.Attempt)}
	if first.MessageID != "" && contract.ValidHeaderValue(first.MessageID) {
		h[HeaderMessageID] = []string{first.MessageID}
	}
	if first.Key != "" && contract.ValidHeaderValue(first.Key) {
		h[HeaderKey] = []string{first.Key}
	}
	if tp, ts := s.outgoingTrace(ctx, first); tp != "" && contract.ValidHeaderValue(tp) {
		h[contract.TraceparentHeader] = []string{tp}
		if ts != "" && contract.ValidHeaderValue(ts) {
			h[contract.TracestateHeader] = []string{ts}
		}
	}
	if d.dl.cloudEvents {
		setCloudEvents(h, first, s.nodeName)
	}
}

// render returns the request body of p and its webhook id.
func (s *HTTPSender) render(p Push) (body []byte, id string) {
	first := p.Messages[0]
	if !p.Batch {
		if first.Dispatcher.dl.cloudEvents {
			return contentOf(first.Body), webhookID(p)
		}
		return first.Body, webhookID(p)
	}
	n := 2
	for _, m := range p.Messages {
		n += len(m.Body) + 32
	}
	b := make([]byte, 0, n)
	b = append(b, '[')
	for i, m := range p.Messages {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendWithOffset(b, m.Body, m.Offset)
	}
	b = append(b, ']')
	return b, webhookID(p)
}

// webhookID is the webhook-id of p: the same on every attempt of the same
// messages, different for any other message of any topic, and made only of
// [A-Za-z0-9_-] (no ".", the separator of the signed text, and nothing a
// producer chose): "msg_<topic key>_<offset>" for one message,
// "batch_<topic key>_<first>_<last>_<count>" for a batch, where the topic
// key is 16 hex digits of SHA-256 over the topic name and its incarnation.
func webhookID(p Push) string {
	first, last := p.Messages[0], p.Messages[len(p.Messages)-1]
	sum := sha256.Sum256([]byte(first.Topic + "\x00" + first.Incarnation))
	key := hex.EncodeToString(sum[:8])
	if !p.Batch {
		return "msg_" + key + "_" + strconv.FormatInt(first.Offset, 10)
	}
	return fmt.Sprintf("batch_%s_%d_%d_%d", key, first.Offset, last.Offset, len(p.Messages))
}

// appendWithOffset appends the stored message JSON body with "offset":off
// as its first member (a stored message is always a JSON object; anything
// else is appended unchanged).
func appendWithOffset(b, body []byte, off int64) []byte {
	t := bytes.TrimLeft(body, " \t\r\n")
	if len(t) == 0 || t[0] != '{' {
		return append(b, body...)
	}
	b = append(b, `{"offset":`...)
	b = strconv.AppendInt(b, off, 10)
	rest := bytes.TrimLeft(t[1:], " \t\r\n")
	if len(rest) > 0 && rest[0] != '}' {
		b = append(b, ',')
	}
	return append(b, rest...)
}

// answer reads the consumer's response to p per the dispatcher's AckMode.
func (s *HTTPSender) answer(p Push, resp *http.Response, body []byte) (Answer, error) {
	code := resp.StatusCode
	n := len(p.Messages)
	all := func(o Outcome) Answer {
		a := Answer{Status: code, Outcomes: make([]Outcome, n)}
		for i := range a.Outcomes {
			a.Outcomes[i] = o
		}
		return a
	}
	if p.Messages[0].Dispatcher.AckMode() == AckStatus {
		if o, ok := statusOutcome(code); ok {
			a := all(o)
			if ra := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); o == NACK && ra > 0 {
				a.RetryAfter = slices.Repeat([]time.Duration{ra}, n)
			}
			return a, nil
		}
		return Answer{}, abnormal(resp, body)
	}
	if int64(len(body)) > s.maxBody {
		return Answer{}, &AbnormalError{StatusCode: code, Reason: fmt.Sprintf("response body over %d bytes", s.maxBody)}
	}
	if code < 200 || code > 299 {
		return Answer{}, abnormal(resp, body)
	}
	if !p.Batch {
		o, ra, err := parseAnswer(body)
		if err != nil {
			return Answer{}, &AbnormalError{StatusCode: code, Reason: err.Error() + snippet(body)}
		}
		a := all(o)
		if ra > 0 {
			a.RetryAfter = []time.Duration{ra}
		}
		return a, nil
	}
	outs, ras, err := parseBatchAnswer(body, p.Messages)
	if err != nil {
		return Answer{}, &AbnormalError{StatusCode: code, Reason: err.Error() + snippet(body)}
	}
	return Answer{Status: code, Outcomes: outs, RetryAfter: ras}, nil
}

// statusOutcome is AckStatus's reading of a status code: 2xx is ACK; a 4xx
// other than 408 (timeout), 409 (conflict), 425 (too early) and 429 (too
// many requests), which ask for a later retry, is NACK; anything else is
// abnormal (ok false).
func statusOutcome(code int) (Outcome, bool) {
	switch {
	case code >= 200 && code <= 299:
		return ACK, true
	case code == 408 || code == 409 || code == 425 || code == 429:
		return "", false
	case code >= 400 && code <= 499:
		return NACK, true
	}
	return "", false
}

// abnormal describes a response that is not a normal answer, with the
// Retry-After of a 429 or 503.
func abnormal(resp *http.Response, body []byte) *AbnormalError {
	e := &AbnormalError{StatusCode: resp.StatusCode, Reason: http.StatusText(resp.StatusCode)}
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		e.Reason = "a 2xx is not an answer here"
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		e.Reason += " (redirect to " + loc + " not followed)"
	}
	e.Reason += snippet(body)
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		e.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return e
}

// maxRetryAfter bounds a Retry-After before the worker caps it at
// backoff-max.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (RFC 9110 10.2.3). delay-seconds is any run of digits, however long
// ("10^30" is valid): more than a day is a day, so that the worker's cap
// at backoff-max applies. It returns 0 for an empty, negative, past or
// unreadable value.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if digits(v) {
		secs, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil: // beyond int64: a valid, very long wait
			return maxRetryAfter
		case secs <= 0:
			return 0
		}
		return time.Duration(min(secs, int64(maxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// parseAnswer reads a normal answer: a JSON object (whitespace and other
// members allowed) whose "acknowledgement" is the string "ACK" or "NACK",
// and, with a NACK, an optional "retryAfter" (see readRetryAfter).
func parseAnswer(body []byte) (Outcome, time.Duration, error) {
	var a struct {
		Acknowledgement *string         `json:"acknowledgement"`
		RetryAfter      json.RawMessage `json:"retryAfter"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.Acknowledgement == nil {
		return "", 0, errors.New(`body is not {"acknowledgement":"ACK"|"NACK"}`)
	}
	o, err := outcome(*a.Acknowledgement)
	if err != nil {
		return "", 0, err
	}
	ra, err := readRetryAfter(a.RetryAfter, o)
	return o, ra, err
}

// ParseRetryAfter reads a NACK's "retryAfter" as readRetryAfter does (a
// duration string or a number of seconds, 0..86400 s; left out or null:
// 0): the shared consumer groups' nack uses the same rule.
func ParseRetryAfter(raw json.RawMessage) (time.Duration, error) { return readRetryAfter(raw, NACK) }

// readRetryAfter reads a NACK's "retryAfter": a duration string ("30s",
// "1m30s") or a number of seconds, at least 0; the message is sent again
// no sooner (capped by the dispatcher's backoff-max). Left out or null: 0.
// With an ACK it is ignored.
func readRetryAfter(raw json.RawMessage, o Outcome) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" || o != NACK {
		return 0, nil
	}
	var secs float64
	if err := json.Unmarshal(raw, &secs); err == nil {
		if secs < 0 || secs > maxRetryAfter.Seconds() {
			return 0, fmt.Errorf(`"retryAfter" %v is not 0..%d seconds`, secs, int64(maxRetryAfter.Seconds()))
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, errors.New(`"retryAfter" is neither a duration string such as "30s" nor a number of seconds`)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf(`"retryAfter" %q is not a duration >= 0 such as "30s"`, s)
	}
	return min(d, maxRetryAfter), nil
}

func outcome(s string) (Outcome, error) {
	switch o := Outcome(s); o {
	case ACK, NACK:
		return o, nil
	}
	return "", fmt.Errorf("acknowledgement %q is neither ACK nor NACK", s)
}

// parseBatchAnswer reads the answer to a batch: {"acknowledgement":...} for
// every message, or {"results":[{"offset":o,"acknowledgement":...},...]}
// naming every offset of the batch exactly once.
func parseBatchAnswer(body []byte, ms []Delivery) ([]Outcome, []time.Duration, error) {
	var a struct {
		Acknowledgement *string         `json:"acknowledgement"`
		RetryAfter      json.RawMessage `json:"retryAfter"`
		Results         *[]struct {
			Offset          *int64          `json:"offset"`
			Acknowledgement string          `json:"acknowledgement"`
			RetryAfter      json.RawMessage `json:"retryAfter"`
		} `json:"results"`
	}
	const want = `body is not {"acknowledgement":"ACK"|"NACK"} nor {"results":[{"offset":o,"acknowledgement":"ACK"|"NACK"},...]}`
	if err := json.Unmarshal(body, &a); err != nil || (a.Acknowledgement == nil) == (a.Results == nil) {
		return nil, nil, errors.New(want)
	}
	outs, ras := make([]Outcome, len(ms)), make([]time.Duration, len(ms))
	if a.Acknowledgement != nil {
		o, err := outcome(*a.Acknowledgement)
		if err != nil {
			return nil, nil, err
		}
		ra, err := readRetryAfter(a.RetryAfter, o)
		if err != nil {
			return nil, nil, err
		}
		for i := range outs {
			outs[i], ras[i] = o, ra
		}
		return outs, ras, nil
	}
	at := make(map[int64]int, len(ms))
	for i, m := range ms {
		at[m.Offset] = i
	}
	for _, r := range *a.Results {
		if r.Offset == nil {
			return nil, nil, errors.New(`a result has no "offset"`)
		}
		i, ok := at[*r.Offset]
		if !ok {
			return nil, nil, fmt.Errorf("result for offset %d, which is not in this batch (or is given twice)", *r.Offset)
		}
		delete(at, *r.Offset)
		o, err := outcome(r.Acknowledgement)
		if err != nil {
			return nil, nil, fmt.Errorf("offset %d: %w", *r.Offset, err)
		}
		ra, err := readRetryAfter(r.RetryAfter, o)
		if err != nil {
			return nil, nil, fmt.Errorf("offset %d: %w", *r.Offset, err)
		}
		outs[i], ras[i] = o, ra
	}
	for _, m := range ms {
		if _, missing := at[m.Offset]; missing {
			return nil, nil, fmt.Errorf("no result for offset %d", m.Offset)
		}
	}
	return outs, ras, nil
}

// snippet quotes the start of a response body for an error message.
func snippet(body []byte) string {
	if len(body) == 0 {
		return ""
	}
	const n = 120
	if len(body) > n {
		return fmt.Sprintf(": body %q...", body[:n])
	}
	return fmt.Sprintf(": body %q", body)
}
