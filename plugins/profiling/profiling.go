// Package profiling is the optional Go profiling endpoint of mmmq: the
// net/http/pprof handlers (/debug/pprof/: CPU profile, heap, goroutines,
// execution trace, ...) on a listener of their own, never on the public
// API port. It is off unless mmmq.profiling.addr is set, and has no
// authentication: bind it to loopback (127.0.0.1:6060) or a private
// interface only.
//
//	MMMQ_PROFILING_ADDR=127.0.0.1:6060 mmmq serve
//	go tool pprof -top 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10'
//
// The stock mmmq binary includes Module; app.Modules does not, because
// importing net/http/pprof also registers its handlers on
// http.DefaultServeMux, which a custom binary might serve.
package profiling

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// Server serves /debug/pprof/ on its own listener.
type Server struct {
	addr string
	log  *zap.Logger
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// New returns a server for addr (host:port; port 0 picks a free port).
// Start listens; Stop closes.
func New(addr string, log *zap.Logger) *Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &Server{
		addr: addr,
		log:  log,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 5 * time.Second,
			// A CPU profile or trace runs for ?seconds= (default 30 s)
			// before it writes; no write timeout.
		},
		done: make(chan struct{}),
	}
}

// Start listens on the address; an address in use is an error that stops
// startup (the operator asked for the endpoint).
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("profiling: listen on %s (mmmq.profiling.addr): %w", s.addr, err)
	}
	s.ln = ln
	s.log.Warn("profiling endpoint on (no authentication; keep it on loopback or a private network)",
		zap.String("url", "http://"+ln.Addr().String()+"/debug/pprof/"))
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("profiling endpoint stopped", zap.Error(err))
		}
	}()
	return nil
}

// Stop closes the listener and every connection at once: a running CPU
// profile or trace is cut off, which is fine for a diagnostic endpoint.
func (s *Server) Stop(context.Context) error {
	if s.ln == nil {
		return nil
	}
	err := s.srv.Close()
	<-s.done
	return err
}

// Addr is the address listened on (useful with port 0); "" before Start.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}
