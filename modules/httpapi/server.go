// Package httpapi is the broker's HTTP API on gorilla/mux:
// publishing (POST /messages, POST /mmmq/messages, POST /messages/batch),
// topic listing and read-back (GET /topics, GET /topics/{topic}/messages),
// deleting and reopening a topic (DELETE /topics/{topic},
// POST /topics/{topic}/reopen), health (/healthz, /readyz) and the OpenAPI
// document of every route (GET /openapi.yaml, from openapi.yaml). Plugins
// add routes through the value group `group:"routes"` (see contract.Route); a new
// route is documented in openapi.yaml too. It works without Fx; fx.go wires
// it.
//
// For every route, the server's own and the plugins' alike: a route that
// allows GET answers HEAD too (same status and headers, no body; RFC 9110
// §9.3.2), and a method a path does not accept is answered 405
// METHOD_NOT_ALLOWED with an Allow header listing the methods it does
// accept (RFC 9110 §15.5.6) and the JSON error body. A path with an empty,
// "." or ".." segment (//messages, /topics/../x/messages, a %2E%2E group)
// is answered 400 BAD_REQUEST, never redirected to its cleaned form.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Options configures the server.
type Options struct {
	Addr              string        // listen address, e.g. ":8080"
	ReadHeaderTimeout time.Duration // slowloris guard; default 5s
	ReadTimeout       time.Duration // whole request; default 30s
	WriteTimeout      time.Duration // default 30s
	IdleTimeout       time.Duration // keep-alive; default 120s
	MaxBodyBytes      int64         // request body cap; default 4 MiB
	// MaxConns caps simultaneous HTTP connections; one over it is answered
	// 503 UNAVAILABLE with Retry-After: 1 and closed (server.max-connections).
	// Default AutoMaxConns of the process's open-file limit.
	MaxConns int
	// PublishTimeout bounds how long a publish waits for its ack level
	// (then 503 TIMEOUT, outcome unknown; up to 100 ms later for a single
	// publish, whose deadline is shared per tick); default 90% of
	// WriteTimeout, so the answer is written before the write deadline.
	PublishTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown: in-flight requests get
	// this long to finish; default 30s.
	ShutdownTimeout time.Duration
	// MaxRecordBytes is mmmq.broker.segment.max-record-bytes: a message
	// whose stored JSON is larger is refused with 413 before anything is
	// written (a batch is then refused whole). 0 leaves the check to the
	// storage engine.
	MaxRecordBytes int
	// Budget is the broker's in-flight memory budget
	// (mmmq.broker.memory.max-inflight-bytes): a read-back page's messages
	// draw from it until the page is written; a page it cannot hold whole
	// is shorter (continued from its nextOffset), one it cannot hold a
	// single message of is 503 OVERLOADED with Retry-After. Nil: unbounded.
	Budget *contract.Budget
	// TLS serves the API over TLS with these certificates (server.tls;
	// servertls.New); nil serves plain HTTP. The handshake is bounded by
	// the smallest of ReadHeaderTimeout, ReadTimeout and WriteTimeout; a
	// verified client certificate is in r.TLS.VerifiedChains.
	TLS *servertls.Certs
	// Auth is authentication, authorization and the audit log (see
	// AuthOptions); the zero value: off.
	Auth AuthOptions
	// Instance is this broker (config.Module provides it): a publish whose
	// mmmq-instance-id header is its id was pushed by one of its own
	// dispatchers and is refused with 508 LOOP, nothing stored; Start
	// records the port it binds. Nil: no such check.
	Instance *contract.Instance
	// Holds says which reader holds a topic's retention back
	// (keep-unconsumed; modules/retention): GET /topics shows it as
	// retentionHeldBy. Nil: never shown.
	Holds contract.RetentionHolds
	// Scheduler keeps messages published with "deliverAt" or "delay"
	// until they are due (modules/schedule); DELETE /topics/{topic} drops
	// the topic's pending ones with it when it is a
	// contract.ScheduleDropper, and is 409 SCHEDULED_PENDING while it
	// holds some otherwise. Nil: such publishes are 501 NOT_IMPLEMENTED,
	// nothing stored.
	Scheduler contract.Scheduler
	// Tracer makes a publish span per message published (modules/tracing)
	// and, for a message published without a traceparent, stores the
	// publish span's context as its traceparent so that its pushes
	// continue that trace. Nil: tracing off (what is stored is exactly
	// what the producer sent).
	Tracer *tracing.Tracer
}

// Readiness tells /readyz whether startup recovery has finished.
type Readiness interface{ Ready() bool }

// Server is the broker's HTTP server.
type Server struct {
	opts   Options
	reg    *topicqueue.Registry
	ready  Readiness
	log    *zap.Logger
	router *mux.Router
	srv    *http.Server
	ln     net.Listener
	// traceRoot is the Tracer's RootTraceparent (nil: tracing off), made
	// once: a method value taken per request would allocate.
	traceRoot func(topic, id string, timestamp int64) string
	bufs      sync.Pool
	done      chan struct{}
	// deadlines bounds single publishes' waits (PublishTimeout).
	deadlines sharedDeadlines
	// routeErr is an overlap between routes found by New (see Err).
	routeErr error
	// methods are the methods the routes name: the candidates of a 405's
	// Allow header.
	methods []string
	// conns are the open connections: Stop closes those that have sent no
	// whole request header yet and cuts publishes whose body stalls
	// (uploadGrace).
	conns conns
}

// New builds the server and its routes; Start listens.
func New(opts Options, reg *topicqueue.Registry, ready Readiness, log *zap.Logger, routes ...contract.Route) *Server {
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 5 * time.Second
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 30 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 120 * time.Second
	}
	if opts.MaxConns <= 0 {
		limit, _ := contract.OpenFileLimit()
		opts.MaxConns = AutoMaxConns(limit)
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.PublishTimeout <= 0 {
		// Inside the write deadline, so that the 503 can still be written.
		opts.PublishTimeout = opts.WriteTimeout * 9 / 10
	}
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 30 * time.Second
	}
	opts.Auth.exempt = exemptPrefixes(routes)
	s := &Server{opts: opts, reg: reg, ready: ready, log: log, done: make(chan struct{}),
		deadlines: sharedDeadlines{timeout: opts.PublishTimeout}, traceRoot: opts.Tracer.RootTraceparent()}
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	r := mux.NewRouter()
	// A non-canonical path is refused by serveHTTP (400), never redirected.
	r.SkipClean(true)
	r.HandleFunc("/messages", s.handlePublish).Methods(http.MethodPost)
	r.HandleFunc("/mmmq/messages", s.handlePublish).Methods(http.MethodPost)
	r.HandleFunc("/messages/batch", s.handleBatch).Methods(http.MethodPost)
	r.HandleFunc("/topics", s.handleTopics).Methods(http.MethodGet)
	r.HandleFunc("/topics/{topic}/messages", s.handleRead).Methods(http.MethodGet)
	r.HandleFunc("/topics/{topic}", s.handleDeleteTopic).Methods(http.MethodDelete)
	r.HandleFunc("/topics/{topic}/reopen", s.handleReopen).Methods(http.MethodPost)
	r.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		contract.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}).Methods(http.MethodGet)
	r.HandleFunc("/readyz", s.handleReady).Methods(http.MethodGet)
	r.HandleFunc("/openapi.yaml", handleOpenAPI).Methods(http.MethodGet)
	for _, rt := range routes {
		if rt != nil {
			rt.Register(r)
		}
	}
	s.routeErr = overlappingRoutes(r)
	s.methods = routeMethods(r)
	allowHeadWhereGet(r)
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		contract.WriteError(w, http.StatusNotFound, contract.CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(s.methodNotAllowed)
	s.router = r
	s.srv = &http.Server{
		Addr:              opts.Addr,
		Handler:           s.Handler(),
		ReadHeaderTimeout: opts.ReadHeaderTimeout,
		ReadTimeout:       opts.ReadTimeout,
		WriteTimeout:      opts.WriteTimeout,
		IdleTimeout:       opts.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
		ConnContext:       s.conns.connContext,
		ConnState:         s.conns.track,
	}
	for _, rt := range routes {
		if d, ok := rt.(contract.Drainer); ok {
			// Runs once Stop has closed the listeners, while in-flight
			// requests are still being waited for.
			s.srv.RegisterOnShutdown(func() { _ = d.Drain(context.Background()) })
		}
	}
	return s
}

// Err reports a problem found while building the server: a path and method
// registered twice (two plugin routes, or a plugin route and one of the
// server's own), which the router would silently resolve to the first.
func (s *Server) Err() error { return s.routeErr }

// overlappingRoutes returns an error naming every path and method that is
// registered more than once on r; a route without methods counts as every
// method.
func overlappingRoutes(r *mux.Router) error {
	type key struct{ method, path string }
	var seen []key
	var dups []string
	_ = r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return nil
		}
		methods, err := route.GetMethods()
		if err != nil {
			methods = []string{"*"}
		}
		for _, m := range methods {
			for _, k := range seen {
				if k.path == path && (k.method == m || k.method == "*" || m == "*") {
					dups = append(dups, m+" "+path)
					break
				}
			}
			seen = append(seen, key{m, path})
		}
		return nil
	})
	if len(dups) > 0 {
		return fmt.Errorf("httpapi: routes registered more than once: %s (each path and method must have one handler)", strings.Join(dups, ", "))
	}
	return nil
}

// Walk calls fn for every route of the router (mux.Router.Walk): the
// server's own and the plugins', all registered by New. The routes that
// answer HEAD for GET routes (see allowHeadWhereGet) have no path template
// and no methods of their own.
func (s *Server) Walk(fn mux.WalkFunc) error { return s.router.Walk(fn) }

// Handler is the server's handler (authentication, then the fast publish
// path, then the router), for tests with httptest.
func (s *Server) Handler() http.Handler { return withAuth(s.opts.Auth, http.HandlerFunc(s.serveHTTP)) }

// serveHTTP sends the two publish paths straight to their handler (they need
// no path variables, and matching them through the router's regexps and
// request contexts costs more than the rest of the hot path's bookkeeping);
// everything else goes through the gorilla/mux router (other methods on the
// publish paths too: 405 with Allow: POST), except paths that are not
// canonical, which are refused with 400 (see canonicalPath).
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && (r.URL.Path == "/messages" || r.URL.Path == "/mmmq/messages") {
		s.handlePublish(w, r)
		return
	}
	if !canonicalPath(r.URL.Path) {
		notCanonical(w, r)
		return
	}
	s.router.ServeHTTP(w, r)
}

// Addr is the listening address once started (useful with port 0).
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.opts.Addr
	}
	return s.ln.Addr().String()
}

// Start listens and serves in the background. It returns an error when the
// address cannot be bound, or when two routes overlap (see Err).
func (s *Server) Start(context.Context) error {
	if s.routeErr != nil {
		return s.routeErr
	}
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("http: listen on %s: %w", s.opts.Addr, err)
	}
	s.ln = ln
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && s.opts.Instance != nil {
		s.opts.Instance.AddPort(tcp.Port) // server.port 0: the port bound
	}
	s.log.Info("http api listening", zap.String("addr", ln.Addr().String()), zap.Int("max-connections", s.opts.MaxConns),
		zap.Bool("tls", s.opts.TLS != nil))
	ln = &limitListener{Listener: ln, max: s.opts.MaxConns}
	if s.opts.TLS != nil {
		// Outside the limit, so that http.Server sees the *tls.Conn (and
		// fills r.TLS); a connection over the cap is refused before its
		// handshake, with a plain-text 503 the client cannot read.
		ln = tls.NewListener(ln, s.opts.TLS.Config("http/1.1"))
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", zap.Error(err))
		}
	}()
	return nil
}

// Reloaders are the server's members of the reloaders value group: its
// TLS certificates when TLS is on (re-read on SIGHUP), else none.
func (s *Server) Reloaders() []contract.Reloader {
	if s.opts.TLS == nil {
		return nil
	}
	return []contract.Reloader{s.opts.TLS}
}

// Stop stops accepting connections and waits, bounded by ctx and
// ShutdownTimeout, for in-flight requests (publishes included) to finish;
// then it closes what remains and returns the deadline's error. Idle
// keep-alive connections are closed at once, and so are connections that
// have sent no whole request header (see conns).
func (s *Server) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.ShutdownTimeout)
	defer cancel()
	start := time.Now()
	shut := make(chan error, 1)
	go func() { shut <- s.srv.Shutdown(ctx) }()
	tick := time.NewTicker(silentConnPoll)
	defer tick.Stop()
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-shut:
			waiting = false
		case now := <-tick.C:
			if now.Sub(start) >= uploadGrace {
				if n := s.conns.cutUploads(); n > 0 {
					s.log.Info("stop: cut publishes still receiving their body", zap.Int("requests", n), zap.Duration("after", now.Sub(start).Round(time.Millisecond)))
				}
			}
			// Shutdown closes the listener first; one accepted just
			// before that is closed at a later tick.
			if n := s.conns.closeSilent(); n > 0 {
				s.log.Debug("closed connections that sent no request", zap.Int("connections", n))
			}
		}
	}
	if err != nil {
		s.log.Warn("http shutdown deadline reached; closing remaining connections", zap.Error(err))
		s.srv.Close()
	}
	if s.ln != nil {
		<-s.done
	}
	return err
}

// handleReady answers 200 {"ready":true} once startup has finished and
// while the storage backend's store answers (contract.HealthChecker),
// else 503 {"ready":false} (with "error" saying why the store does not).
func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if s.ready != nil && !s.ready.Ready() {
		contract.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false})
		return
	}
	if s.reg != nil {
		if h, ok := s.reg.Backend().(contract.HealthChecker); ok {
			if err := h.Healthy(); err != nil {
				contract.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "error": err.Error()})
				return
			}
		}
	}
	contract.WriteJSON(w, http.StatusOK, map[string]any{"ready": true})
}

// readBody reads the whole body, capped at MaxBodyBytes, into a pooled
// buffer; the caller returns it with s.putBuf.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (*[]byte, error) {
	if r.ContentLength > s.opts.MaxBodyBytes {
		return nil, contract.TooLarge("body of %d bytes is over the limit of %d bytes (server.max-body-bytes)", r.ContentLength, s.opts.MaxBodyBytes)
	}
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	bp := s.bufs.Get().(*[]byte)
	b := (*bp)[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := body.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			*bp = b
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				s.putBuf(bp)
				return nil, contract.TooLarge("body is over the limit of %d bytes (server.max-body-bytes)", s.opts.MaxBodyBytes)
			}
			if errors.Is(err, io.EOF) {
				return bp, nil
			}
			s.putBuf(bp)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil, contract.RequestTimeout("request body not received in time (server.read-timeout): fewer bytes arrived than Content-Length announced")
			}
			return nil, contract.BadRequest("request body could not be read: the connection failed before the body was complete")
		}
	}
}

func (s *Server) putBuf(bp *[]byte) {
	if cap(*bp) > 1<<20 {
		return // do not keep huge buffers
	}
	*bp = (*bp)[:0]
	s.bufs.Put(bp)
}

// PublishResponse is the success body of POST /messages. Offset is absent
// for ACCEPTED (not final yet: a crash before the write gives that offset to
// another message, as the log-queue study showed). Duplicate is true when
// the producer's id was already published to the topic within
// mmmq.broker.dedup.window: nothing was stored, and Offset is the first
// message's.
type PublishResponse struct {
	Acknowledgement string `json:"acknowledgement"`
	Topic           string `json:"topic"`
	Offset          *int64 `json:"offset,omitempty"`
	Level           string `json:"level"`
	ID              string `json:"id,omitempty"`
	Duplicate       bool   `json:"duplicate,omitempty"`
}

func ackLevel(r *http.Request) (contract.AckLevel, error) {
	if r.URL.RawQuery != "" && strings.ContainsAny(r.URL.RawQuery, "%;") {
		// Go's parser drops a pair it cannot read ("ack=written;x",
		// "ack=%ZZ") and the level would silently become the default.
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			return 0, contract.BadRequest("query string: %v", err)
		}
	}
	v, n := queryValue(r.URL.RawQuery, "ack")
	if n > 1 {
		// ?ack=accepted&ack=durable: which one the client meant is not
		// ours to guess (the first, as url.Values.Get takes, could claim
		// less than it wanted).
		return 0, contract.BadRequest("query parameter ack: given %d times; give it once", n)
	}
	lvl, err := contract.ParseAckLevel(v)
	if err != nil {
		return 0, contract.BadRequest("query parameter ack: %v", err)
	}
	return lvl, nil
}

// queryValue is url.Values.Get(key) of a raw query without building the
// map: the first value of key, and how many times key is given (0 when
// absent). A query with escapes ('%', '+'), a ';' or more than 1 KiB
// (url.ParseQuery refuses over 10000 parameters) takes the url.ParseQuery
// path, so the result is the same in every case.
func queryValue(raw, key string) (first string, n int) {
	if raw == "" {
		return "", 0
	}
	if len(raw) > 1024 || strings.ContainsAny(raw, "%+;") {
		q, _ := url.ParseQuery(raw)
		return q.Get(key), len(q[key])
	}
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(pair, "=")
		if k == key {
			if n == 0 {
				first = v
			}
			n++
		}
	}
	return first, n
}

// publishRequest reads what every publish route starts with: the ?ack=
// level and the body (a pooled buffer the caller returns with putBuf). On
// failure it has answered and returns ok=false.
func (s *Server) publishRequest(w http.ResponseWriter, r *http.Request) (lvl contract.AckLevel, bp *[]byte, ok bool) {
	if inst := s.opts.Instance; inst != nil && r.Header.Get(contract.HeaderInstanceID) == inst.ID() {
		// Pushed by one of this broker's dispatchers: refused before the
		// body is read, so nothing is stored and the dispatcher backs off.
		err := contract.ErrLoop
		if d := r.Header.Get("mmmq-consumer-id"); d != "" {
			err = fmt.Errorf("%w (dispatcher %q)", err, d)
		}
		s.fail(w, err)
		return 0, nil, false
	}
	lvl, err := ackLevel(r)
	if err == nil {
		ci := connOf(r)
		ci.setReading(true)
		bp, err = s.readBody(w, r)
		ci.setReading(false)
	}
	if err != nil {
		s.fail(w, err)
		return 0, nil, false
	}
	return lvl, bp, true
}

func (s *Server) handlePublish(w http.ResponseWriter, r *http.Request) {
	lvl, bp, ok := s.publishRequest(w, r)
	if !ok {
		return
	}
	defer s.putBuf(bp)
	out := s.bufs.Get().(*[]byte)
	defer s.putBuf(out)
	now := time.Now()
	// The traceparent/tracestate HTTP headers win over the body's.
	tc := contract.TraceFromHTTP(r.Header)
	tc.Root = s.traceRoot
	d, err := contract.DecodeMessageTrace(*bp, now, *out, tc)
	topic, id := d.Topic, d.ID
	if err == nil {
		err = s.checkSize(d)
	}
	if err == nil {
		err = s.publishAllowed(r, 1, topic)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	var span tracing.Span
	if tr := s.opts.Tracer; tr != nil {
		span = tr.StartPublish(r.Context(), tracing.MessageOf(topic, d.Stored), tracing.TransportHTTP, now)
	}
	if d.Scheduled && d.DeliverAt > 0 {
		s.publishScheduled(w, r, d, span)
		return
	}
	*out = d.Stored
	msg := [1]topicqueue.Message{{Stored: d.Stored}}
	if d.FromProducer {
		msg[0].ID = id // deduplicated within mmmq.broker.dedup.window
	}
	var res [1]topicqueue.Published
	// PublishMessages creates the topic when needed, and anew when it is
	// deleted under this request.
	_, err = s.reg.PublishMessages(s.deadlines.get(now), topic, msg[:], lvl, res[:])
	if span.On() {
		span.EndPublish(res[0].Offset, lvl, time.Since(now), res[0].Duplicate, false, err)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	off := res[0].Offset
	// The reply is appended by hand (no reflection): PublishResponse's shape.
	b := append((*bp)[:0], `{"acknowledgement":"ACK","topic":"`...)
	b = append(b, topic...) // validated name: no escaping needed
	b = append(b, '"')
	if lvl != contract.Accepted {
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, off, 10)
	}
	b = append(b, `,"level":"`...)
	b = append(b, lvl.String()...)
	b = append(b, `","id":`...)
	b = contract.AppendJSONString(b, id)
	if res[0].Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	b = append(b, "}\n"...)
	*bp = b
	h := w.Header()
	h["Content-Type"] = jsonContentType
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

var jsonContentType = []string{"application/json"}

// checkSize refuses a decoded message over MaxRecordBytes (413): its
// stored JSON, plus for a message scheduled for later the header the
// broker adds when it moves it into its topic
// (contract.CheckScheduledSize).
func (s *Server) checkSize(d contract.Decoded) error {
	if d.Scheduled && d.DeliverAt > 0 {
		return contract.CheckScheduledSize(d.Stored, s.opts.MaxRecordBytes)
	}
	stored := d.Stored
	if s.opts.MaxRecordBytes > 0 && len(stored) > s.opts.MaxRecordBytes {
		return contract.TooLarge("message is %d bytes as stored, over the limit of %d bytes (mmmq.broker.segment.max-record-bytes)",
			len(stored), s.opts.MaxRecordBytes)
	}
	return nil
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	c := contract.Classify(err)
	// OVERLOADED is load shedding, answered with Retry-After: not logged
	// per request.
	if c.Status >= 500 && c.Code != contract.CodeOverloaded {
		s.log.Warn("publish failed", zap.Int("status", c.Status), zap.Error(err))
	}
	contract.WriteErr(w, err) // c's status and code; 410 OFFSET_EXPIRED carries startOffset
}

// TopicInfo is one row of GET /topics.
type TopicInfo struct {
	Name       string `json:"name"`
	NextOffset int64  `json:"nextOffset"`
	// StartOffset is the log start offset: the first offset still stored
	// (above 0 once retention deleted segments); reading below it is 410.
	StartOffset int64  `json:"startOffset"`
	Segments    int    `json:"segments"`
	Bytes       int64  `json:"bytes"`
	Failed      string `json:"failed,omitempty"`
	// Incarnation is the topic's incarnation id: made when the topic was
	// created, different once it is deleted and created again (offsets then
	// start at 0 again). Empty when the storage backend has none.
	Incarnation string `json:"incarnation,omitempty"`
	// RetentionHeldBy is the reader (dispatcher or consumer group) that
	// kept segments retention's policy found due at its last pass
	// (keep-unconsumed): the one furthest behind, with its committed offset
	// and the bytes kept. Absent when nothing is held back.
	RetentionHeldBy *contract.RetentionHold `json:"retentionHeldBy,omitempty"`
}

func (s *Server) handleTopics(w http.ResponseWriter, r *http.Request) {
	if err := contract.Authorize(r.Context(), contract.ActionRead, "", ""); err != nil {
		contract.WriteErr(w, err)
		return
	}
	list := s.reg.List()
	out := struct {
		Topics      []TopicInfo       `json:"topics"`
		Quarantined map[string]string `json:"quarantined,omitempty"`
	}{Topics: make([]TopicInfo, 0, len(list))}
	for _, q := range list {
		if !may(r, contract.ActionRead, q.Name()) {
			continue // the listing shows only the topics the principal may read
		}
		st := q.Stats()
		ti := TopicInfo{Name: st.Topic, NextOffset: st.NextOffset, StartOffset: st.StartOffset, Segments: st.Segments, Bytes: st.Bytes, Failed: st.Failed,
			Incarnation: q.Incarnation()}
		if s.opts.Holds != nil {
			if h, ok := s.opts.Holds.RetentionHold(st.Topic); ok {
				ti.RetentionHeldBy = &h
			}
		}
		out.Topics = append(out.Topics, ti)
	}
	if qs := s.reg.Quarantined(); len(qs) > 0 {
		out.Quarantined = map[string]string{}
		for k, v := range qs {
			if may(r, contract.ActionRead, k) {
				out.Quarantined[k] = v.Error()
			}
		}
	}
	contract.WriteJSON(w, http.StatusOK, out)
}

// handleDeleteTopic is DELETE /topics/{topic}: 200
// {"topic":"t","deleted":true,"scheduledDropped":n} once the topic is gone
// (its dispatch workers and consumer-group sessions stopped, its files and
// checkpoints removed; see topicqueue.Registry.Delete) with its n pending
// scheduled messages (a contract.ScheduleDropper drops them first,
// durably: after a crash both are gone or both remain); 400 for an
// invalid name (nothing touches the disk), 404 NOT_FOUND for an unknown
// topic with nothing scheduled, 409 TOPIC_BUSY while it is being created
// or deleted. A Scheduler that cannot drop makes it 409 SCHEDULED_PENDING
// while messages of the topic are pending.
func (s *Server) handleDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["topic"]
	if err := contract.ValidateTopic(name); err != nil {
		contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, err.Error())
		return
	}
	if err := authorizeTopic(r, contract.ActionAdmin, name); err != nil {
		contract.WriteErr(w, err)
		return
	}
	existed := true
	del := func() error {
		err := s.reg.Delete(name)
		if errors.Is(err, topicqueue.ErrUnknownTopic) {
			existed = false
			return nil
		}
		return err
	}
	dropped := 0
	var err error
	switch sc := s.opts.Scheduler.(type) {
	case nil:
		err = del()
	case contract.ScheduleDropper:
		dropped, err = sc.DropTopic(r.Context(), name, del)
	default:
		if n := sc.Pending(name); n > 0 {
			contract.WriteError(w, http.StatusConflict, contract.CodeScheduledPending,
				fmt.Sprintf("topic %q has %d pending scheduled messages; cancel them (DELETE /topics/%s/scheduled/{scheduleId}) or let them be delivered first (this scheduler cannot drop them with the topic)", name, n, name))
			return
		}
		err = del()
	}
	if err != nil {
		c := contract.Classify(err)
		if c.Status >= 500 {
			s.log.Error("topic deletion failed", zap.String("topic", name), zap.Int("scheduled-dropped", dropped), zap.Error(err))
		}
		text := err.Error()
		if dropped > 0 {
			text = fmt.Sprintf("%s (its %d pending scheduled messages were dropped; retry the deletion, or a restart finishes it)", text, dropped)
		}
		contract.WriteError(w, c.Status, c.Code, text)
		return
	}
	if !existed && dropped == 0 {
		contract.WriteError(w, http.StatusNotFound, contract.CodeNotFound, fmt.Sprintf("topic %q does not exist", name))
		return
	}
	contract.WriteJSON(w, http.StatusOK, map[string]any{"topic": name, "deleted": true, "scheduledDropped": dropped})
}

// maxReadLimit caps GET /topics/{topic}/messages?limit=.
const maxReadLimit = 1000

// maxReadBytes bounds the message bytes of one GET /topics/{topic}/messages
// page (at least one message is returned): without it one request could
// hold limit × max-record-bytes (1000 × 1 MiB) in memory. A short page is
// continued from its nextOffset. Across requests, Options.Budget bounds
// what all pages in flight hold together.
const maxReadBytes = 4 << 20

func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	name, ok := pathTopic(w, r, contract.ActionRead)
	if !ok {
		return
	}
	q, ok := s.reg.Get(name)
	if !ok {
		contract.WriteError(w, http.StatusNotFound, contract.CodeNotFound, fmt.Sprintf("topic %q does not exist", name))
		return
	}
	if err := contract.RepeatedQuery(r.URL.Query(), "offset", "limit"); err != nil {
		s.fail(w, err)
		return
	}
	offset, err := queryInt(r, "offset", 0)
	if err != nil || offset < 0 {
		contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, "query parameter offset must be an integer >= 0")
		return
	}
	limit, err := queryInt(r, "limit", 100)
	if err != nil || limit < 1 || limit > maxReadLimit {
		contract.WriteError(w, http.StatusBadRequest, contract.CodeBadRequest, fmt.Sprintf("query parameter limit must be an integer in 1..%d", maxReadLimit))
		return
	}
	hw := q.HighWatermark()
	var items []readItem
	next := offset
	size := 0
	var held int64 // taken from the budget, returned once the page is written
	defer func() { s.opts.Budget.Release(held) }()
	one := false // a batch did not fit in the budget: read entry by entry
	for next < hw && int64(len(items)) < limit && size < maxReadBytes {
		// Never past hw: the page's highWatermark covers every message in
		// it, though the topic may grow while the page is read (another
		// producer; on the JetStream backend another node).
		want := int(min(limit-int64(len(items)), hw-next))
		if one {
			want = 1
		}
		es, err := q.ReadBatch(next, want)
		if n := readBytes(es); s.opts.Budget.TryAcquire(n) {
			held += n
		} else if len(es) > 1 {
			one = true // each entry in its own buffer: what is kept is counted
			continue
		} else if len(items) > 0 {
			break // a shorter page, continued from nextOffset
		} else {
			s.fail(w, s.opts.Budget.Overloaded(fmt.Sprintf("read-back of topic %s at offset %d", name, next), n))
			return
		}
		for _, e := range es {
			if size >= maxReadBytes {
				err = nil // continued from next on the following page
				break
			}
			it := readItem{offset: e.Offset, message: e.Payload}
			if !contract.ValidStoredJSON(e.Payload) {
				// Written by another tool: sent as an error, never as
				// invalid JSON inside the page.
				it = readItem{offset: e.Offset, err: "stored message is not valid JSON"}
			}
			items = append(items, it)
			size += len(e.Payload)
			next++
		}
		var ce *contract.CorruptionError
		if errors.As(err, &ce) {
			items = append(items, readItem{offset: ce.Offset, err: ce.Error()})
			next = ce.Offset + 1
			continue
		}
		if err != nil {
			s.fail(w, err)
			return
		}
		if len(es) == 0 {
			break
		}
	}
	writeReadPage(w, name, items, next, hw)
}

// readBytes is the payload bytes of es.
func readBytes(es []contract.Entry) int64 {
	var n int64
	for _, e := range es {
		n += int64(len(e.Payload))
	}
	return n
}

// readItem is one message of a read-back page: its stored JSON, or the
// error that replaced a corrupt entry.
type readItem struct {
	offset  int64
	message []byte
	err     string
}

// writeReadPage writes the 200 body of GET /topics/{topic}/messages,
//
//	{"highWatermark":hw,"messages":[{"offset":n,"message":<stored JSON>} |
//	 {"offset":n,"error":"..."}, ...],"nextOffset":next,"topic":"t"}
//
// (members in this order, as encoding/json wrote the map it used to be)
// without building it: each stored message is written from the buffer it
// was read into, so a page costs no copy of its messages.
func writeReadPage(w http.ResponseWriter, topic string, items []readItem, next, hw int64) {
	js := contract.StartJSON(w, http.StatusOK)
	js.Text(`{"highWatermark":`)
	js.Int(hw)
	js.Text(`,"messages":[`)
	for i, it := range items {
		if i > 0 {
			js.Text(",")
		}
		js.Text(`{"offset":`)
		js.Int(it.offset)
		if it.message != nil {
			js.Text(`,"message":`)
			js.Raw(it.message)
		}
		if it.err != "" {
			js.Text(`,"error":`)
			js.String(it.err)
		}
		js.Text("}")
		if js.Err() != nil {
			break
		}
	}
	js.Text(`],"nextOffset":`)
	js.Int(next)
	js.Text(`,"topic":`)
	js.String(topic)
	js.Text("}\n")
	_ = js.Close()
}

// queryInt is the integer query parameter key, def when absent (the
// caller refuses a repeated one first: contract.RepeatedQuery).
func queryInt(r *http.Request, key string, def int64) (int64, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	return strconv.ParseInt(v, 10, 64)
}
