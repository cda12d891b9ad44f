package groups

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/tracing"
)

// SessionHeader carries the session id of a consumer group: the fetch
// response sets it, and ack, release and later fetches send it back.
const SessionHeader = "mmmq-session"

// DefaultFetchMax is the number of messages a fetch asks for when the
// request has no max parameter.
const DefaultFetchMax = 100

// maxAckBody caps the body of an ack or nack request, in bytes: room for
// maxAckOffsets offsets.
const maxAckBody = 256 << 10

// maxAckOffsets caps the offsets of one per-message ack or nack.
const maxAckOffsets = 10000

// RouteOptions configures the HTTP routes.
type RouteOptions struct {
	// DefaultMax is the max of a fetch without ?max=; default 100
	// (DefaultFetchMax), clamped to the coordinator's MaxFetch.
	DefaultMax int
	// WriteTimeout is the server's write timeout (server.write-timeout);
	// a long poll extends its response's write deadline to wait +
	// WriteTimeout. Default 30s.
	WriteTimeout time.Duration
	// Logger receives 5xx failures; default zap.NewNop().
	Logger *zap.Logger
	// Tracer makes a span per fetch (modules/tracing), linked to the
	// publish span of every message fetched; a child of the request's
	// traceparent header when it has one. Nil: tracing off.
	Tracer *tracing.Tracer
}

// Route is the consumer-group part of the HTTP API, contributed to the
// routes value group (contract.ProvideRoute) by Module:
//
//	POST   /topics/{topic}/groups/{group}/fetch?max=N&wait=MS
//	POST   /topics/{topic}/groups/{group}/ack        {"offset": n} | {"offsets": [n, ...]}
//	POST   /topics/{topic}/groups/{group}/nack       {"offsets": [n, ...], "retryAfter": "30s"}
//	POST   /topics/{topic}/groups/{group}/redrive    {"from": n, "to": n} (both optional)
//	DELETE /topics/{topic}/groups/{group}/session
//	GET    /topics/{topic}/groups                    (and HEAD)
//	POST   /topics/{topic}/groups/{group}/seek       {"to": ...}
//
// See the package documentation for the bodies and status codes.
type Route struct {
	c    *Coordinator
	opts RouteOptions
	log  *zap.Logger
}

// NewRoute returns the routes of c.
func NewRoute(c *Coordinator, opts RouteOptions) *Route {
	if opts.DefaultMax <= 0 {
		opts.DefaultMax = DefaultFetchMax
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	return &Route{c: c, opts: opts, log: opts.Logger}
}

// Drain ends the coordinator's waiting long polls (contract.Drainer): the
// HTTP server calls it when its graceful shutdown begins.
func (rt *Route) Drain(ctx context.Context) error { return rt.c.Drain(ctx) }

// Register adds the routes to r (contract.Route).
func (rt *Route) Register(r *mux.Router) {
	r.HandleFunc("/topics/{topic}/groups/{group}/fetch", consume(rt.handleFetch)).Methods(http.MethodPost)
	r.HandleFunc("/topics/{topic}/groups/{group}/ack", consume(rt.handleAck)).Methods(http.MethodPost)
	r.HandleFunc("/topics/{topic}/groups/{group}/nack", consume(rt.handleNack)).Methods(http.MethodPost)
	r.HandleFunc("/topics/{topic}/groups/{group}/redrive", rt.handleRedrive).Methods(http.MethodPost)
	r.HandleFunc("/topics/{topic}/groups/{group}/session", consume(rt.handleRelease)).Methods(http.MethodDelete)
	r.HandleFunc("/topics/{topic}/groups", consume(rt.handleList)).Methods(http.MethodGet)
	r.HandleFunc("/topics/{topic}/groups/{group}/seek", consume(rt.handleSeek)).Methods(http.MethodPost)
}

// consume wraps a handler of the routes: the request's principal (when
// authentication is on) must have the consume action on the path's topic
// and, when the path names one, as its group (403 FORBIDDEN otherwise,
// before anything is read or changed). A topic that is not a valid name
// is left to the handler's 400.
func consume(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := mux.Vars(r)
		if contract.ValidateTopic(v["topic"]) == nil {
			if err := contract.Authorize(r.Context(), contract.ActionConsume, v["topic"], v["group"]); err != nil {
				contract.WriteErr(w, err)
				return
			}
		}
		h(w, r)
	}
}

// Message is one fetched message: its offset and the stored message JSON
// ({"topic":{"name":…},"content":…,"id":…,"timestamp":…}). Error replaces
// Message for a stored record that is not valid JSON (written by another
// tool); it is still delivered, so it can be acknowledged.
type Message struct {
	Offset int64 `json:"offset"`
	// Deliveries (shared groups) is how many times the message has been
	// handed out, this time included.
	Deliveries uint32          `json:"deliveries,omitempty"`
	Message    json.RawMessage `json:"message,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// FetchResponse is the 200 body of a fetch. Messages is [] (never null)
// when nothing arrived during the wait. Committed is the group's durable
// committed offset; Next the session's delivered-up-to offset.
type FetchResponse struct {
	Topic     string    `json:"topic"`
	Group     string    `json:"group"`
	Session   string    `json:"session"`
	Messages  []Message `json:"messages"`
	Committed int64     `json:"committed"`
	Next      int64     `json:"next"`
	// Incarnation is the topic's incarnation id (omitted when the backend
	// has none): a topic deleted and created again starts at offset 0
	// under a new one, so a consumer that remembers offsets keys them by
	// (incarnation, offset).
	Incarnation string `json:"incarnation,omitempty"`
	// Mode is the group's mode, "exclusive" or "shared".
	Mode string `json:"mode,omitempty"`
}

// AckRequest is the body of an ack: for an exclusive group Offset, the
// last offset processed (everything up to it is acknowledged); for a
// shared group Offsets, each acknowledged on its own. Exactly one.
type AckRequest struct {
	Offset  *int64  `json:"offset,omitempty"`
	Offsets []int64 `json:"offsets,omitempty"`
}

// NackRequest is the body of a nack (shared groups): the offsets given
// back, and RetryAfter, a duration string ("30s") or a number of seconds
// (0..86400): they are handed out again no sooner.
type NackRequest struct {
	Offsets    []int64         `json:"offsets"`
	RetryAfter json.RawMessage `json:"retryAfter,omitempty"`
}

// AckResponse is the 200 body of an ack, sent after the fsync: the new
// committed offset (offset+1, or the unchanged committed offset for an ack
// at or below it). A per-message ack also says how many offsets it
// finished (Acked) and how many were finished before (Already).
type AckResponse struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Committed int64  `json:"committed"`
	Acked     *int   `json:"acked,omitempty"`
	Already   *int   `json:"already,omitempty"`
}

// NackResponse is the 200 body of a nack.
type NackResponse struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Committed int64  `json:"committed"`
	Nacked    int    `json:"nacked"`
	Already   int    `json:"already"`
}

// ReleaseResponse is the 200 body of DELETE .../session: Released tells
// whether the session held the group.
type ReleaseResponse struct {
	Topic     string `json:"topic"`
	Group     string `json:"group"`
	Released  bool   `json:"released"`
	Committed int64  `json:"committed"`
}

func (rt *Route) handleFetch(w http.ResponseWriter, r *http.Request) {
	v := mux.Vars(r)
	topic, group := v["topic"], v["group"]
	limit, wait, err := rt.fetchParams(r)
	if err != nil {
		rt.fail(w, err)
		return
	}
	if rt.opts.Tracer != nil {
		tw := &fetchSpanWriter{ResponseWriter: w, start: time.Now()}
		defer func() { tw.end(r, rt.opts.Tracer, topic, group) }()
		w = tw
	}
	if err := contract.RepeatedQuery(r.URL.Query(), "mode", "max", "wait", "from"); err != nil {
		rt.fail(w, err)
		return
	}
	mode := r.URL.Query().Get("mode")
	switch mode {
	case "", contract.GroupExclusive, contract.GroupShared:
	default:
		rt.fail(w, contract.BadRequest("query parameter mode must be %q or %q; got %q", contract.GroupExclusive, contract.GroupShared, mode))
		return
	}
	session := r.Header.Get(SessionHeader)
	started := false
	if session == "" {
		if session, err = rt.c.AcquireMode(topic, group, mode); err != nil {
			rt.fail(w, err)
			return
		}
		started = true
	}
	// A session this request started is released on failure: the client
	// never learns it, so it must not leave the group busy until the lease
	// expires.
	failed := func(err error) {
		if started {
			_, _ = rt.c.Release(topic, group, session)
		}
		rt.fail(w, err)
	}
	if !started && mode != "" {
		// A session sent with mode=: refused before anything is
		// delivered when the group is of the other mode.
		if err := rt.c.CheckMode(topic, group, mode); err != nil {
			rt.fail(w, err)
			return
		}
	}
	if s := r.URL.Query().Get("from"); s != "" {
		from, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil {
			failed(contract.BadRequest("query parameter from must be an integer offset; got %q", s))
			return
		}
		if err := rt.c.Seek(topic, group, session, from); err != nil {
			failed(err)
			return
		}
	}
	if wait > 0 {
		// The long poll must not run into the server's write timeout.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + rt.opts.WriteTimeout))
	}
	b, err := rt.c.Fetch(r.Context(), topic, group, session, limit, wait)
	if err != nil {
		failed(err)
		return
	}
	defer b.Release() // the entries' bytes go back to the budget once written
	w.Header().Set(SessionHeader, session)
	resp := FetchResponse{Topic: topic, Group: group, Session: session, Committed: b.Committed, Next: b.Next,
		Incarnation: b.Incarnation, Mode: contract.GroupExclusive}
	if b.Shared {
		resp.Mode = contract.GroupShared
	}
	if tw, ok := w.(*fetchSpanWriter); ok {
		tw.entries = b.Entries
	}
	writeFetch(w, resp, b.Entries, b.Deliveries)
}

// fetchSpanWriter is the response writer of a traced fetch: it keeps the
// status and the entries written, for the fetch span.
type fetchSpanWriter struct {
	http.ResponseWriter
	start   time.Time
	status  int
	entries []contract.Entry
}

func (w *fetchSpanWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines of long polls).
func (w *fetchSpanWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// end records the fetch's span: the fetched messages, or the failure the
// response's status says.
func (w *fetchSpanWriter) end(r *http.Request, tr *tracing.Tracer, topic, group string) {
	tc := contract.TraceFromHTTP(r.Header)
	f := tracing.Fetch{Topic: topic, Group: group, Traceparent: tc.Parent, Tracestate: tc.State, Start: w.start,
		Messages: make([]tracing.Message, len(w.entries))}
	if w.status >= 400 {
		f.Err = fmt.Errorf("fetch answered %d %s", w.status, http.StatusText(w.status))
	}
	for i, e := range w.entries {
		f.Messages[i] = tracing.MessageOf(topic, e.Payload)
	}
	tr.RecordFetch(r.Context(), f)
}

// writeFetch writes the 200 FetchResponse of entries (resp.Messages is
// ignored) without building it: each stored message is written from the
// buffer the entries were read into, so the reply costs no copy of them
// (encoding/json would copy every json.RawMessage into one growing buffer
// and then write it). The shape is exactly FetchResponse's. A write error
// (the client went away) ends the writing; the session has still moved,
// as for any lost reply (a client resumes with from=).
func writeFetch(w http.ResponseWriter, resp FetchResponse, entries []contract.Entry, deliveries []uint32) {
	s := contract.StartJSON(w, http.StatusOK)
	s.Text(`{"topic":`)
	s.String(resp.Topic)
	s.Text(`,"group":`)
	s.String(resp.Group)
	s.Text(`,"session":`)
	s.String(resp.Session)
	s.Text(`,"messages":[`)
	for i, e := range entries {
		if i > 0 {
			s.Text(",")
		}
		s.Text(`{"offset":`)
		s.Int(e.Offset)
		if i < len(deliveries) {
			s.Text(`,"deliveries":`)
			s.Int(int64(deliveries[i]))
		}
		if contract.ValidStoredJSON(e.Payload) {
			s.Text(`,"message":`)
			s.Raw(e.Payload)
			s.Text("}")
		} else {
			s.Text(`,"error":"stored message is not valid JSON"}`)
		}
		if s.Err() != nil {
			break
		}
	}
	s.Text(`],"committed":`)
	s.Int(resp.Committed)
	s.Text(`,"next":`)
	s.Int(resp.Next)
	if resp.Incarnation != "" {
		s.Text(`,"incarnation":`)
		s.String(resp.Incarnation)
	}
	if resp.Mode != "" {
		s.Text(`,"mode":`)
		s.String(resp.Mode)
	}
	s.Text("}\n")
	_ = s.Close()
}

// fetchParams reads ?max= (default RouteOptions.DefaultMax) and ?wait=
// (milliseconds, default 0), both capped by the coordinator. A malformed
// value is a 400 *contract.InputError.
func (rt *Route) fetchParams(r *http.Request) (limit int, wait time.Duration, err error) {
	limit = rt.opts.DefaultMax
	if s := r.URL.Query().Get("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return 0, 0, contract.BadRequest("query parameter max must be an integer >= 1 (values above %d are capped); got %q", rt.c.MaxFetch(), s)
		}
		limit = n
	}
	limit = min(limit, rt.c.MaxFetch())
	if s := r.URL.Query().Get("wait"); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			return 0, 0, contract.BadRequest("query parameter wait must be milliseconds >= 0 (values above %d are capped); got %q", rt.c.MaxWait().Milliseconds(), s)
		}
		wait = time.Duration(min(ms, rt.c.MaxWait().Milliseconds())) * time.Millisecond
	}
	return limit, wait, nil
}

// sessionRequest returns the request's topic, group and session; a
// missing session header is a 400 saying what the session is for.
func sessionRequest(r *http.Request, purpose string) (topic, group, session string, err error) {
	v := mux.Vars(r)
	session = r.Header.Get(SessionHeader)
	if session == "" {
		return "", "", "", contract.BadRequest("header %s is required (%s)", SessionHeader, purpose)
	}
	return v["topic"], v["group"], session, nil
}

func (rt *Route) handleAck(w http.ResponseWriter, r *http.Request) {
	topic, group, session, body, err := ackRequest(w, r)
	if err != nil {
		rt.fail(w, err)
		return
	}
	var req AckRequest
	const shape = `body must be {"offset": n} (an exclusive group: through n) or {"offsets": [n, ...]} (a shared group: 1..%d offsets), integers n >= 0`
	if err := decodeStrict(body, &req); err != nil {
		rt.fail(w, contract.BadRequest(shape+": %v", maxAckOffsets, err))
		return
	}
	if (req.Offset == nil) == (req.Offsets == nil) {
		rt.fail(w, contract.BadRequest(shape+`: give exactly one of "offset" and "offsets"`, maxAckOffsets))
		return
	}
	if req.Offsets != nil {
		if err := checkOffsets(req.Offsets); err != nil {
			rt.fail(w, err)
			return
		}
		res, err := rt.c.AckOffsets(topic, group, session, req.Offsets)
		if err != nil {
			rt.fail(w, err)
			return
		}
		contract.WriteJSON(w, http.StatusOK, AckResponse{Topic: topic, Group: group, Committed: res.Committed, Acked: &res.Acked, Already: &res.Already})
		return
	}
	if *req.Offset < 0 {
		rt.fail(w, contract.BadRequest(shape, maxAckOffsets))
		return
	}
	committed, err := rt.c.Ack(topic, group, session, *req.Offset)
	if err != nil {
		rt.fail(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, AckResponse{Topic: topic, Group: group, Committed: committed})
}

func (rt *Route) handleRelease(w http.ResponseWriter, r *http.Request) {
	topic, group, session, err := sessionRequest(r, "the session to release")
	if err != nil {
		rt.fail(w, err)
		return
	}
	released, err := rt.c.Release(topic, group, session)
	if err == nil {
		var committed int64
		if committed, err = rt.c.Committed(topic, group); err == nil {
			contract.WriteJSON(w, http.StatusOK, ReleaseResponse{Topic: topic, Group: group, Released: released, Committed: committed})
			return
		}
	}
	rt.fail(w, err)
}

// HTTPStatus maps an error of the coordinator to its HTTP status and
// ErrorBody code with the broker's one table (contract.Classify): 400
// BAD_REQUEST (invalid names, a from= already committed), 404 NOT_FOUND
// (ErrUnknownTopic), 409 GROUP_BUSY, NOT_DELIVERED, SESSION_EXPIRED,
// NAME_TAKEN, 507 NO_SPACE (disk full on commit), 503 TOO_MANY_GROUPS,
// 503 OVERLOADED (the in-flight memory budget cannot hold one message;
// Retry-After), otherwise 503 UNAVAILABLE (I/O or fsync error, topic closed, shutting
// down).
func HTTPStatus(err error) (int, string) {
	c := contract.Classify(err)
	return c.Status, c.Code
}

func (rt *Route) fail(w http.ResponseWriter, err error) {
	status, code := HTTPStatus(err)
	var be *BusyError
	if errors.As(err, &be) {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(be.LeaseLeft.Seconds())))))
	}
	if status >= 500 && !errors.Is(err, context.Canceled) && code != contract.CodeOverloaded {
		rt.log.Warn("consumer group request failed", zap.Int("status", status), zap.Error(err))
	}
	contract.WriteErr(w, err) // status and code as above; 410 carries startOffset
}

// checkOffsets refuses an empty or too long list of offsets, or a
// negative one, with a 400.
func checkOffsets(offs []int64) error {
	if len(offs) == 0 || len(offs) > maxAckOffsets {
		return contract.BadRequest(`"offsets" must hold 1..%d offsets; got %d`, maxAckOffsets, len(offs))
	}
	for _, o := range offs {
		if o < 0 {
			return contract.BadRequest(`"offsets" must be integers >= 0; got %d`, o)
		}
	}
	return nil
}

func (rt *Route) handleNack(w http.ResponseWriter, r *http.Request) {
	topic, group, session, body, err := ackRequest(w, r)
	if err != nil {
		rt.fail(w, err)
		return
	}
	var req NackRequest
	if err := decodeStrict(body, &req); err != nil {
		rt.fail(w, contract.BadRequest(`body must be {"offsets": [n, ...], "retryAfter": "30s" | <seconds>} ("retryAfter" optional): %v`, err))
		return
	}
	if err := checkOffsets(req.Offsets); err != nil {
		rt.fail(w, err)
		return
	}
	ra, err := dispatcher.ParseRetryAfter(req.RetryAfter)
	if err != nil {
		rt.fail(w, contract.BadRequest("%v", err))
		return
	}
	res, err := rt.c.Nack(topic, group, session, req.Offsets, ra)
	if err != nil {
		rt.fail(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, NackResponse{Topic: topic, Group: group, Committed: res.Committed, Nacked: res.Nacked, Already: res.Already})
}

// handleRedrive answers POST .../redrive. It publishes into the topic, so
// it needs the admin action on the topic (as a dispatcher's redrive needs
// admin), not consume.
func (rt *Route) handleRedrive(w http.ResponseWriter, r *http.Request) {
	v := mux.Vars(r)
	if contract.ValidateTopic(v["topic"]) == nil {
		if err := contract.Authorize(r.Context(), contract.ActionAdmin, v["topic"], ""); err != nil {
			contract.WriteErr(w, err)
			return
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSeekBody))
	if err != nil {
		rt.fail(w, contract.BadRequest("read body (at most %d bytes): %v", maxSeekBody, err))
		return
	}
	from, to, err := dispatcher.ParseRedrive(body)
	if err != nil {
		rt.fail(w, err)
		return
	}
	// Once started it runs to its end even if the client goes away.
	res, err := rt.c.Redrive(context.WithoutCancel(r.Context()), v["topic"], v["group"], from, to)
	if err != nil {
		rt.fail(w, err)
		return
	}
	contract.WriteJSON(w, http.StatusOK, res)
}

// ackRequest returns an ack's or nack's topic, group, session and body
// (at most maxAckBody bytes); errors are 400s saying what is missing.
func ackRequest(w http.ResponseWriter, r *http.Request) (topic, group, session string, body []byte, err error) {
	if topic, group, session, err = sessionRequest(r, "the session returned by fetch"); err != nil {
		return "", "", "", nil, err
	}
	if body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxAckBody)); err != nil {
		// A body over the limit is 413 TOO_LARGE (contract.Classify).
		return "", "", "", nil, fmt.Errorf("read body (at most %d bytes): %w", maxAckBody, err)
	}
	return topic, group, session, body, nil
}
