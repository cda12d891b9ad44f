package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// Outcome is a consumer's normal answer to a delivery: a 2xx response whose
// JSON body is {"acknowledgement":"ACK"} or {"acknowledgement":"NACK"}.
type Outcome string

const (
	// ACK: the consumer processed the message; the worker commits and moves on.
	ACK Outcome = "ACK"
	// NACK: the consumer refused the message; the worker resends it, at most
	// Options.MaxResends times (the original Java mmmq's rule: 3 resends, 4
	// attempts in all), then logs it, commits and moves on.
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
	// MessageID is the producer message id from the stored JSON ("" when
	// absent or not usable as a header value) (mmmq-message-id header).
	MessageID string
	// Body is the stored message JSON, sent as is. It must not be modified.
	Body []byte
}

// Sender makes one delivery attempt. It returns ACK or NACK with a nil error
// for a normal response, and a non-nil error for anything abnormal (then the
// Outcome is ""): an *AbnormalError for a response that is not a normal one,
// or the transport error (connection refused, timeout, cancelled context).
// Send must honour ctx: when ctx is done it returns promptly.
//
// The default implementation is *HTTPSender. The Fx module provides it as
// Sender, so tests and plugins may replace it with
// fx.Decorate(func(dispatcher.Sender) dispatcher.Sender { ... }) or
// fx.Replace(fx.Annotate(mySender, fx.As(new(dispatcher.Sender)))).
type Sender interface {
	Send(ctx context.Context, d Delivery) (Outcome, error)
}

// AbnormalError is a response that is not a normal one (3xx,
// 4xx, 5xx, a 2xx whose body is not {"acknowledgement":"ACK"|"NACK"}, a body
// over the size cap).
type AbnormalError struct {
	// StatusCode is the HTTP status (0 when no status applies).
	StatusCode int
	// Reason says what was wrong, e.g. `body is not {"acknowledgement":"ACK"|"NACK"}`.
	Reason string
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
	// HeaderTopic carries the topic name.
	HeaderTopic = "mmmq-topic"
	// HeaderTopicIncarnation carries the topic's incarnation id (32 hex
	// digits), different after the topic is deleted and created again;
	// omitted when the storage backend has none.
	HeaderTopicIncarnation = "mmmq-topic-incarnation"
	// HeaderOffset carries the message offset in its topic, in decimal.
	HeaderOffset = "mmmq-offset"
	// HeaderAttempt carries Delivery.Attempt (1-based), in decimal.
	HeaderAttempt = "mmmq-attempt"
	// HeaderMessageID carries the producer message id; omitted when empty.
	HeaderMessageID = "mmmq-message-id"
)

// HTTPSender is the default Sender: it POSTs the stored message JSON to
// <host><path> with the mmmq-* delivery headers above and reads the answer.
// Redirects are never followed (a 3xx is abnormal); each attempt is bounded by the
// dispatcher's timeout (default Options.DefaultTimeout, 30 s), which covers
// connecting, sending, waiting for headers and reading the body, so a
// consumer trickling its body cannot hold a worker longer; at most
// Options.MaxResponseBytes (default 64 KiB) of the response are read and a
// longer body is abnormal. Safe for concurrent use.
type HTTPSender struct {
	client      *http.Client
	maxBody     int64
	timeout     time.Duration
	defaultPath string
}

// NewHTTPSender returns an HTTPSender using opts.DefaultTimeout,
// opts.MaxResponseBytes and opts.DefaultPath (zero fields take the defaults,
// see Options). Its transport keeps up to 64 idle connections per consumer
// host (a worker has at most one request in flight), dials with a 10 s timeout and reads at most 64 KiB of response
// headers.
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
		client: &http.Client{
			Transport: tr,
			// Redirects are never followed; the 3xx is returned
			// to Send, which reports it as abnormal.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		maxBody:     opts.MaxResponseBytes,
		timeout:     opts.DefaultTimeout,
		defaultPath: opts.DefaultPath,
	}
}

// CloseIdleConnections closes the idle keep-alive connections; the Fx
// module calls it on stop.
func (s *HTTPSender) CloseIdleConnections() { s.client.CloseIdleConnections() }

// URL returns the URL a delivery by d is posted to: host + path (or the
// default path).
func (s *HTTPSender) URL(d *Dispatcher) string {
	p := d.Path()
	if p == "" {
		p = s.defaultPath
	}
	return d.Host().String() + p
}

// Send implements Sender.
func (s *HTTPSender) Send(ctx context.Context, d Delivery) (Outcome, error) {
	timeout := d.Dispatcher.Timeout()
	if timeout <= 0 {
		timeout = s.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := s.URL(d.Dispatcher)
	// A *bytes.Reader body gives the request its Content-Length.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(d.Body))
	if err != nil {
		return "", fmt.Errorf("build request for %s: %w", url, err)
	}
	// Raw map keys so that the names go out exactly as the Header constants
	// spell them (lower case; Header.Set would canonicalise them).
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header[HeaderConsumerID] = []string{d.Dispatcher.Name()}
	req.Header[HeaderTopic] = []string{d.Topic}
	req.Header[HeaderOffset] = []string{strconv.FormatInt(d.Offset, 10)}
	if d.Incarnation != "" && contract.ValidHeaderValue(d.Incarnation) {
		req.Header[HeaderTopicIncarnation] = []string{d.Incarnation}
	}
	req.Header[HeaderAttempt] = []string{strconv.Itoa(d.Attempt)}
	if d.MessageID != "" && contract.ValidHeaderValue(d.MessageID) {
		req.Header[HeaderMessageID] = []string{d.MessageID}
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("post %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, s.maxBody+1))
	if err != nil {
		return "", fmt.Errorf("read response from %s (HTTP %d): %w", url, resp.StatusCode, err)
	}
	if int64(len(body)) > s.maxBody {
		return "", &AbnormalError{StatusCode: resp.StatusCode, Reason: fmt.Sprintf("response body over %d bytes", s.maxBody)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		reason := http.StatusText(resp.StatusCode)
		if loc := resp.Header.Get("Location"); loc != "" {
			reason += " (redirect to " + loc + " not followed)"
		}
		return "", &AbnormalError{StatusCode: resp.StatusCode, Reason: reason + snippet(body)}
	}
	o, err := parseAnswer(body)
	if err != nil {
		return "", &AbnormalError{StatusCode: resp.StatusCode, Reason: err.Error() + snippet(body)}
	}
	return o, nil
}

// parseAnswer reads a normal answer: a JSON object (whitespace and other
// members allowed) whose "acknowledgement" is the string "ACK" or "NACK".
func parseAnswer(body []byte) (Outcome, error) {
	var a struct {
		Acknowledgement *string `json:"acknowledgement"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.Acknowledgement == nil {
		return "", errors.New(`body is not {"acknowledgement":"ACK"|"NACK"}`)
	}
	switch o := Outcome(*a.Acknowledgement); o {
	case ACK, NACK:
		return o, nil
	}
	return "", fmt.Errorf("acknowledgement %q is neither ACK nor NACK", *a.Acknowledgement)
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
