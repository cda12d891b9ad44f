package httpapi

import (
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// silentConnPoll is how often Stop closes the connections that have sent
// nothing (see silentConns) while it waits for in-flight requests.
const silentConnPoll = 50 * time.Millisecond

// silentConns tracks the connections in http.StateNew: accepted, no
// whole request header read yet. http.Server.Shutdown closes idle
// keep-alive connections at once but waits up to 5 s for one of these,
// though it would not serve a request read from it once shutting down
// (net/http drops it): a client's connection pool dialling ahead, a load
// balancer's TCP health check or a port scanner would hold every stop for
// 5 s and, with server.shutdown-timeout at 5 s or less, make it fail.
// Stop closes them like idle ones. The track method is the server's
// ConnState hook; a request on a connection already seen costs one atomic
// load.
type silentConns struct {
	n  atomic.Int64 // len(m), read without the lock
	mu sync.Mutex
	m  map[net.Conn]time.Time // accept time
}

// track is an http.Server ConnState hook. A connection leaves StateNew
// for StateActive, StateClosed or StateHijacked, never for StateIdle.
func (s *silentConns) track(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		s.mu.Lock()
		if s.m == nil {
			s.m = map[net.Conn]time.Time{}
		}
		s.m[c] = time.Now()
		s.n.Store(int64(len(s.m)))
		s.mu.Unlock()
	case http.StateIdle:
	default:
		if s.n.Load() == 0 {
			return
		}
		s.mu.Lock()
		delete(s.m, c)
		s.n.Store(int64(len(s.m)))
		s.mu.Unlock()
	}
}

// closeAll closes every tracked connection and returns how many it
// closed. The server then sees each one closed (StateClosed), which
// removes it.
func (s *silentConns) closeAll() int {
	s.mu.Lock()
	conns := make([]net.Conn, 0, len(s.m))
	for c := range s.m {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	return len(conns)
}
