package httpapi

import (
	"context"
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

// uploadGrace is how long, once Stop has begun, a publish may go on
// receiving its request body. A client that sent the headers and part of
// a body, then stalls, would otherwise hold the stop for the whole
// server.read-timeout (30 s by default) and, with shutdown-timeout no
// longer than that, make it fail. After the grace its read is cut: the
// client gets no answer (or 408 when the broker can still write one), and
// nothing of that request is stored.
const uploadGrace = time.Second

// connInfo is what the server keeps of one connection: the connection,
// and whether a publish is receiving its body on it now.
type connInfo struct {
	conn    net.Conn
	reading atomic.Bool
}

type connInfoKey struct{}

// conns are the server's open connections, by the ConnContext hook (add)
// and the ConnState hook (drop), so that Stop can cut stalled uploads.
type conns struct {
	mu sync.Mutex
	m  map[net.Conn]*connInfo
}

// connContext is an http.Server ConnContext hook: it records c and hands
// its connInfo to the requests made on it.
func (cs *conns) connContext(ctx context.Context, c net.Conn) context.Context {
	ci := &connInfo{conn: c}
	cs.mu.Lock()
	if cs.m == nil {
		cs.m = map[net.Conn]*connInfo{}
	}
	cs.m[c] = ci
	cs.mu.Unlock()
	return context.WithValue(ctx, connInfoKey{}, ci)
}

// drop forgets a closed or hijacked connection.
func (cs *conns) drop(c net.Conn) {
	cs.mu.Lock()
	delete(cs.m, c)
	cs.mu.Unlock()
}

// cutUploads ends the body reads under way now (a read deadline in the
// past) and returns how many.
func (cs *conns) cutUploads() int {
	cs.mu.Lock()
	var cut []net.Conn
	for c, ci := range cs.m {
		if ci.reading.Load() {
			cut = append(cut, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range cut {
		_ = c.SetReadDeadline(time.Now())
	}
	return len(cut)
}

// connOf is r's connection as the server's hooks recorded it; nil for a
// request made without them (as in tests), which setReading takes.
func connOf(r *http.Request) *connInfo {
	ci, _ := r.Context().Value(connInfoKey{}).(*connInfo)
	return ci
}

// setReading marks whether a publish is receiving its body on the
// connection (nil: nothing to mark).
func (ci *connInfo) setReading(on bool) {
	if ci != nil {
		ci.reading.Store(on)
	}
}
