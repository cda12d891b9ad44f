package pgconsumer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// SessionHeader carries the consumer-group session id: the broker returns it
// on a fetch and expects it on every later fetch, ack and release of the same
// consumer.
const SessionHeader = "mmmq-session"

// Error codes of the groups API that the consumer reacts to.
const (
	CodeGroupBusy      = "GROUP_BUSY"      // another live session holds the group
	CodeSessionExpired = "SESSION_EXPIRED" // our lease ran out; start a new session
	CodeNotDelivered   = "NOT_DELIVERED"   // ack beyond what was fetched (a bug here)
)

// TopicRef is the topic of a stored message: {"name": "t"} in the stored
// JSON (the Java mmmq shape); a plain string is accepted too.
type TopicRef struct {
	Name string `json:"name"`
}

// UnmarshalJSON accepts {"name": "t"} and "t".
func (t *TopicRef) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &t.Name)
	}
	type plain TopicRef
	return json.Unmarshal(b, (*plain)(t))
}

// Message is the stored message JSON:
// {"topic":{"name":…},"content":…,"id":…,"timestamp":…,"headers":…}.
type Message struct {
	Topic     TopicRef          `json:"topic"`
	Content   json.RawMessage   `json:"content"`
	ID        string            `json:"id"`
	Timestamp int64             `json:"timestamp"`
	Headers   map[string]string `json:"headers,omitempty"`
}

// Delivery is one fetched message with its log offset. Error is set instead
// of Message when the stored record is not valid JSON (written by another
// tool); it is still delivered so it can be acknowledged.
type Delivery struct {
	Offset  int64   `json:"offset"`
	Message Message `json:"message"`
	Error   string  `json:"error,omitempty"`
}

// FetchResult is the body of a successful fetch.
type FetchResult struct {
	Topic     string     `json:"topic"`
	Group     string     `json:"group"`
	Session   string     `json:"session"`
	Messages  []Delivery `json:"messages"`
	Committed int64      `json:"committed"`
	// Next is where the session's next fetch starts (the broker's
	// delivered-up-to offset).
	Next int64 `json:"next"`
	// Incarnation is the topic's incarnation id: offsets start at 0 again
	// when a topic is deleted and created anew, under a new id. Empty from
	// a broker without incarnation ids.
	Incarnation string `json:"incarnation"`
}

// APIError is a non-2xx answer of the broker. Code is the machine-readable
// "code" of the error body (e.g. GROUP_BUSY), empty when the body had none.
type APIError struct {
	Op      string // "fetch", "ack", "release"
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = "-"
	}
	return fmt.Sprintf("%s: HTTP %d %s: %s", e.Op, e.Status, code, e.Message)
}

// HasCode reports whether err is an *APIError with the given code.
func HasCode(err error, code string) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// Client speaks the consumer-group HTTP API for one topic and group and
// remembers the session id between calls. It is not safe for concurrent use:
// a group has one consumer at a time.
type Client struct {
	base    string
	topic   string
	group   string
	http    *http.Client
	session string
	// expect is the offset this client expects next in its session (-1:
	// none yet). It is sent as from= so that a fetch whose response was
	// lost is delivered again rather than acknowledged unseen.
	expect int64
}

// NewClient returns a client for broker base URL (e.g. http://localhost:8080).
// hc may be nil; redirects are never followed.
func NewClient(base, topic, group string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{}
	}
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{base: strings.TrimRight(base, "/"), topic: topic, group: group, http: &c, expect: -1}
}

// Session is the current session id ("" before the first fetch or after
// ResetSession).
func (c *Client) Session() string { return c.session }

// ResetSession forgets the session id; the next fetch starts a new session
// at the group's committed offset.
func (c *Client) ResetSession() { c.session, c.expect = "", -1 }

func (c *Client) url(suffix string) string {
	return c.base + "/topics/" + url.PathEscape(c.topic) + "/groups/" + url.PathEscape(c.group) + suffix
}

// Fetch asks for up to limit messages, long-polling up to wait when none is
// available. A 200 with no messages means the group is caught up.
func (c *Client) Fetch(ctx context.Context, limit int, wait time.Duration) (*FetchResult, error) {
	q := url.Values{}
	q.Set("max", strconv.Itoa(limit))
	q.Set("wait", strconv.FormatInt(wait.Milliseconds(), 10))
	if c.session != "" && c.expect >= 0 {
		q.Set("from", strconv.FormatInt(c.expect, 10))
	}
	var res FetchResult
	h, err := c.do(ctx, "fetch", http.MethodPost, c.url("/fetch?"+q.Encode()), nil, &res)
	if err != nil {
		return nil, err
	}
	if s := h.Get(SessionHeader); s != "" {
		c.session = s
	} else if res.Session != "" {
		c.session = res.Session
	}
	c.expect = max(res.Next, res.Committed)
	if n := len(res.Messages); n > 0 {
		c.expect = max(c.expect, res.Messages[n-1].Offset+1)
	}
	return &res, nil
}

// Ack commits offset (the broker stores offset+1 durably before answering)
// and returns the committed offset the broker reports.
func (c *Client) Ack(ctx context.Context, offset int64) (int64, error) {
	body, _ := json.Marshal(map[string]int64{"offset": offset})
	var res struct {
		Committed *int64 `json:"committed"`
	}
	if _, err := c.do(ctx, "ack", http.MethodPost, c.url("/ack"), body, &res); err != nil {
		return 0, err
	}
	if res.Committed == nil {
		return 0, fmt.Errorf("ack %d: answer has no \"committed\"", offset)
	}
	if *res.Committed < offset+1 {
		return *res.Committed, fmt.Errorf("ack %d: broker reports committed=%d, want >= %d", offset, *res.Committed, offset+1)
	}
	return *res.Committed, nil
}

// Release ends the session: the group is free for the next consumer, which
// starts at the committed offset. Without a session it does nothing.
func (c *Client) Release(ctx context.Context) error {
	if c.session == "" {
		return nil
	}
	_, err := c.do(ctx, "release", http.MethodDelete, c.url("/session"), nil, nil)
	c.ResetSession()
	return err
}

// maxBody caps how much of an answer is read (a fetch of -max messages of up
// to 1 MiB each fits well below it).
const maxBody = 256 << 20

func (c *Client) do(ctx context.Context, op, method, u string, body []byte, out any) (http.Header, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.session != "" {
		req.Header.Set(SessionHeader, c.session)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s: reading answer: %w", op, err)
	}
	if resp.StatusCode/100 != 2 {
		ae := &APIError{Op: op, Status: resp.StatusCode}
		var eb struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(data, &eb) == nil {
			ae.Code, ae.Message = eb.Code, eb.Error
		}
		if ae.Message == "" {
			ae.Message = strings.TrimSpace(string(data))
			if len(ae.Message) > 200 {
				ae.Message = ae.Message[:200] + "..."
			}
		}
		if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(ae.Message, "no route") {
			ae.Message += " (this broker does not serve the consumer-group API)"
		}
		return nil, ae
	}
	if out != nil && len(bytes.TrimSpace(data)) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("%s: decoding answer: %w", op, err)
		}
	}
	return resp.Header, nil
}
