package lineproto

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/servertls"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Defaults of Options.
const (
	// DefaultMaxLineBytes is the longest request line (mmmq.lineproto.max-line-bytes):
	// a 1 MiB record plus 64 KiB of framing.
	DefaultMaxLineBytes = 1<<20 + 64<<10
	// DefaultMaxConns caps open connections; more are answered
	// "ERR UNAVAILABLE" and closed. It is lowered to an eighth of the
	// process's open-file limit when that is smaller (AutoMaxConns).
	DefaultMaxConns = 1024
	// DefaultIdleTimeout closes a connection that sends nothing for this long.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultWriteTimeout bounds writing one reply.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultPublishTimeout bounds how long a PUB waits for its ack level
	// (then ERR TIMEOUT, outcome unknown).
	DefaultPublishTimeout = 30 * time.Second
	// DefaultHandshakeTimeout bounds a TLS handshake.
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultMaxPipeline is how many request lines a connection may have
	// unanswered (mmmq.lineproto.max-pipeline).
	DefaultMaxPipeline = 128

	// writeBufferBytes is the buffer of the replies the reader writes
	// itself (barriers: FETCH, ACK, STATUS, AUTH); a longer reply is
	// written while it is built. The read buffer is sized by the read loop
	// (minReadBytes to maxReadBytes, conn.go).
	writeBufferBytes = 32 << 10
	// keepLineBytes: a reply or message buffer that grew above this is
	// dropped after use, so idle connections hold little memory.
	keepLineBytes = 64 << 10
)

// defaultMaxRecordBytes caps a PUB payload when Options.MaxRecordBytes is
// 0: the default of mmmq.broker.segment.max-record-bytes (1 MiB).
var defaultMaxRecordBytes = int(topicqueue.SegmentSection.Default().MaxRecordBytes)

// Options configures a Server. The zero value of every field but Addr
// means its default.
type Options struct {
	// Addr is the TCP listen address, host:port (mmmq.lineproto.addr);
	// port 0 picks a free port (see Server.Addr).
	Addr string
	// MaxLineBytes is the longest request line, in bytes, without its
	// "\n" or "\r\n" (mmmq.lineproto.max-line-bytes; default 1114112). A
	// longer line is answered "ERR TOO_LARGE" and the connection is closed;
	// the server reads at most MaxLineBytes+2 bytes of it.
	MaxLineBytes int
	// MaxRecordBytes caps the payload of PUB, in bytes
	// (mmmq.broker.segment.max-record-bytes; default 1 MiB); the stored
	// message, payload plus envelope, is capped again by the storage engine.
	// Over it: "ERR TOO_LARGE", the connection stays open.
	MaxRecordBytes int
	// MaxPipeline is how many request lines one connection may have
	// unanswered, 1 to MaxPipelineLimit (mmmq.lineproto.max-pipeline;
	// default 128): PUB and PUBID are answered in line order while the
	// server reads on, and at the bound it stops reading the connection
	// until the oldest line is answered. See the package documentation,
	// Pipelining.
	MaxPipeline int
	// Budget is the broker's in-flight memory budget
	// (mmmq.broker.memory.max-inflight-bytes, from topicqueue.Module): a
	// PUB or PUBID at WRITTEN or DURABLE holds its stored message's bytes
	// in it until its ack level is reached. When they do not fit, the
	// connection is not read until one of its earlier PUBs completes; a
	// PUB with none outstanding goes ahead without holding any, as before
	// pipelining. (ACCEPTED bytes are held by the storage writer.) nil
	// counts nothing: MaxPipeline × MaxLineBytes then bounds what a
	// connection holds.
	Budget *contract.Budget
	// MaxConns caps simultaneous connections (default AutoMaxConns).
	MaxConns int
	// IdleTimeout closes a connection without a request for this long
	// (default 5m).
	IdleTimeout time.Duration
	// WriteTimeout bounds writing one reply (default 30s).
	WriteTimeout time.Duration
	// PublishTimeout bounds the wait of one PUB for its ack level (default 30s).
	PublishTimeout time.Duration
	// Logger; default zap.NewNop().
	Logger *zap.Logger

	// Authenticator turns authentication on when it is set and Enabled:
	// the first line must then be AUTH <token> (or the connection has a
	// verified client certificate whose common name is a principal), and
	// every request is checked against the principal's permissions. nil or
	// not Enabled: no authentication, as before it existed.
	Authenticator contract.Authenticator
	// Limiter enforces the principal's max-connections and publish-rate;
	// nil: no limits.
	Limiter contract.Limiter
	// AuditLogger gets refused authentication, FORBIDDEN and RATE_LIMITED
	// (info level); default Logger.Named("audit") (Module passes the
	// application's logger named "audit").
	AuditLogger *zap.Logger
	// AuthTimeout: a connection that has not authenticated within it is
	// closed, while authentication is on (default 10s).
	AuthTimeout time.Duration
	// AuthFailureDelay: a refused AUTH waits this long before its ERR
	// UNAUTHORIZED (default 200ms).
	AuthFailureDelay time.Duration

	// Scheduler keeps the messages of PUBX ... deliver-at= / delay= until
	// they are due (the schedule module's, modules/schedule); nil answers
	// them ERR NOT_IMPLEMENTED, as the HTTP API does without one.
	Scheduler contract.Scheduler

	// Tracer makes a publish span per PUB, PUBID and PUBX
	// (modules/tracing), a child of PUBX's traceparent= when given. Nil:
	// tracing off.
	Tracer *tracing.Tracer

	// TLS serves the protocol over TLS with these certificates (the HTTP
	// API's server.tls files; servertls.New); nil serves plain TCP. Each
	// connection's handshake happens before its first line is read,
	// bounded by HandshakeTimeout.
	TLS *servertls.Certs
	// HandshakeTimeout bounds a TLS handshake (default 10s, at most
	// IdleTimeout), so that a client that stalls it gives its connection
	// slot back.
	HandshakeTimeout time.Duration
}

// AutoMaxConns is the default connection cap: DefaultMaxConns, or an
// eighth of the open-file limit (at least 16) when that is smaller — the
// segment cache takes at most half of the descriptors and HTTP connections
// a quarter, so line-protocol clients cannot starve storage or the HTTP
// health checks. limit 0 (unknown) gives DefaultMaxConns.
func AutoMaxConns(limit uint64) int {
	if limit == 0 {
		return DefaultMaxConns
	}
	return int(min(max(limit/8, 16), DefaultMaxConns))
}

func (o Options) withDefaults() Options {
	o.MaxLineBytes = orDefault(o.MaxLineBytes, DefaultMaxLineBytes)
	o.MaxRecordBytes = orDefault(o.MaxRecordBytes, defaultMaxRecordBytes)
	o.MaxPipeline = min(orDefault(o.MaxPipeline, DefaultMaxPipeline), MaxPipelineLimit)
	if o.MaxConns <= 0 {
		limit, _ := contract.OpenFileLimit()
		o.MaxConns = AutoMaxConns(limit)
	}
	o.IdleTimeout = orDefault(o.IdleTimeout, DefaultIdleTimeout)
	o.WriteTimeout = orDefault(o.WriteTimeout, DefaultWriteTimeout)
	o.PublishTimeout = orDefault(o.PublishTimeout, DefaultPublishTimeout)
	o.HandshakeTimeout = min(orDefault(o.HandshakeTimeout, DefaultHandshakeTimeout), o.IdleTimeout)
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.AuditLogger == nil {
		o.AuditLogger = o.Logger.Named("audit")
	}
	o.AuthTimeout = orDefault(o.AuthTimeout, DefaultAuthTimeout)
	o.AuthFailureDelay = orDefault(o.AuthFailureDelay, DefaultAuthFailureDelay)
	return o
}

// orDefault is v, or def when v is zero or negative (unset).
func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Server is the TCP line protocol listener (see the package documentation
// for the grammar). Start listens; Stop closes the listener and the
// connections and waits for their handlers.
type Server struct {
	opts   Options
	reg    *topicqueue.Registry
	groups *groups.Coordinator
	log    *zap.Logger

	ctx    context.Context // cancelled by Stop: ends FETCH waits
	cancel context.CancelFunc

	ln         net.Listener
	acceptDone chan struct{}
	closing    atomic.Bool
	mu         sync.Mutex
	conns      map[*conn]struct{}
	wg         sync.WaitGroup // connection handlers
}

// New returns a server publishing to reg's topics and serving consumer
// groups through coord; Start listens.
func New(opts Options, reg *topicqueue.Registry, coord *groups.Coordinator) *Server {
	opts = opts.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{
		opts:   opts,
		reg:    reg,
		groups: coord,
		log:    opts.Logger,
		ctx:    ctx,
		cancel: cancel,
		conns:  map[*conn]struct{}{},
	}
}

// Addr is the listening address once started (useful with port 0).
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.opts.Addr
	}
	return s.ln.Addr().String()
}

// Start listens on Options.Addr and accepts connections in the background.
// It returns an error when the address cannot be bound.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("lineproto: listen on %s: %w", s.opts.Addr, err)
	}
	if s.opts.TLS != nil {
		// Accept does not handshake: serveConn does, per connection.
		ln = tls.NewListener(ln, s.opts.TLS.Config())
	}
	s.serve(ln)
	return nil
}

// serve accepts connections from ln in the background (Start; tests pass
// a TLS listener).
func (s *Server) serve(ln net.Listener) {
	s.ln = ln
	s.acceptDone = make(chan struct{})
	s.log.Info("line protocol listening", zap.String("addr", ln.Addr().String()), zap.Bool("tls", s.opts.TLS != nil))
	go s.acceptLoop()
}

func (s *Server) acceptLoop() {
	defer close(s.acceptDone)
	var delay time.Duration
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			if s.closing.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off, keep serving.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", zap.Duration("retry-in", delay), zap.Error(err))
			time.Sleep(delay)
			continue
		}
		delay = 0
		s.mu.Lock()
		if s.closing.Load() {
			s.mu.Unlock()
			nc.Close()
			return
		}
		if len(s.conns) >= s.opts.MaxConns {
			s.mu.Unlock()
			s.wg.Add(1)
			go s.refuse(nc)
			continue
		}
		c := newConn(s, nc)
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// refuse answers a connection over MaxConns and closes it.
func (s *Server) refuse(nc net.Conn) {
	defer s.wg.Done()
	s.log.Warn("connection refused: too many connections", zap.Int("max-conns", s.opts.MaxConns),
		zap.String("remote", nc.RemoteAddr().String()))
	// Over TLS, the write handshakes first: bound reads too.
	_ = nc.SetDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(nc, "ERR %s too many connections (max %d)\n", contract.CodeUnavailable, s.opts.MaxConns)
	nc.Close()
}

func (s *Server) remove(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Stop closes the listener, ends waiting FETCHes, interrupts idle reads so
// every connection reads no further line, answers every line it already
// took (each pipelined PUB gets its real reply, or ERR TIMEOUT after
// Options.PublishTimeout), releases the connections' groups, and waits for
// the handlers. When ctx ends first the remaining connections are closed
// at once (replies not yet written are lost).
func (s *Server) Stop(ctx context.Context) error {
	if s.ln == nil || s.closing.Swap(true) {
		return nil
	}
	_ = s.ln.Close()
	<-s.acceptDone
	s.cancel()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.nc.SetReadDeadline(time.Now()) // see conn.serve: set after closing
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.conns {
			_ = c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// newConn prepares a connection's state.
func newConn(s *Server, nc net.Conn) *conn {
	c := &conn{
		s:        s,
		nc:       nc,
		w:        bufio.NewWriterSize(nc, writeBufferBytes),
		sessions: map[groupKey]heldGroup{},
		log:      s.log.With(zap.String("remote", nc.RemoteAddr().String())),
		auth:     authState{ctx: context.Background()},
	}
	c.out = c.w
	c.pipe.init(s.opts)
	return c
}
