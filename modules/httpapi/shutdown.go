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
// nothing, and checks for stalled uploads, while it waits for in-flight
// requests.
const silentConnPoll = 50 * time.Millisecond

// uploadGrace is how long, once Stop has begun, a publish may go on
// receiving its request body. A client that sent the headers and part of
// a body, then stalls, would otherwise hold the stop for the whole
// server.read-timeout (30 s by default) and, with shutdown-timeout no
// longer than that, make it fail. After the grace its read is cut: the
// client gets no answer (or 408 when the broker can still write one), and
// nothing of that request is stored.
const uploadGrace = time.Second

// connInfo is what the server keeps of one connection: the connection,
// whether it has sent no whole request header yet (silent), and whether a
// publish is receiving its body on it now (reading).
type connInfo struct {
	conn    net.Conn
	silent  atomic.Bool
	reading atomic.Bool
}

type connInfoKey struct{}

// conns are the server's open connections, recorded by the ConnContext
// hook and forgotten by the ConnState hook, so that Stop can close the
// silent ones and cut stalled uploads.
//
// Silent connections are those in http.StateNew: accepted, no whole
// request header read yet. http.Server.Shutdown closes idle keep-alive
// connections at once but waits up to 5 s for one of these, though it
// would not serve a request read from it once shutting down (net/http
// drops it): a client's connection pool dialling ahead, a load balancer's
// TCP health check or a port scanner would hold every stop for 5 s and,
// with server.shutdown-timeout at 5 s or less, make it fail. Stop closes
// them like idle ones.
type conns struct {
	silentN atomic.Int64 // connections with silent set, read without the lock
	mu      sync.Mutex
	m       map[net.Conn]*connInfo
}

// connContext is an http.Server ConnContext hook (it runs just before the
// connection's StateNew): it records c, silent, and hands its connInfo to
// the requests made on it.
func (cs *conns) connContext(ctx context.Context, c net.Conn) context.Context {
	ci := &connInfo{conn: c}
	ci.silent.Store(true)
	cs.mu.Lock()
	if cs.m == nil {
		cs.m = map[net.Conn]*connInfo{}
	}
	cs.m[c] = ci
	cs.mu.Unlock()
	cs.silentN.Add(1)
	return context.WithValue(ctx, connInfoKey{}, ci)
}

// track is an http.Server ConnState hook. A connection leaves StateNew for
// StateActive, StateClosed or StateHijacked (never StateIdle); closed and
// hijacked ones are forgotten. A request on a connection already seen
// costs one atomic load while no connection is silent.
func (cs *conns) track(c net.Conn, st http.ConnState) {
	gone := st == http.StateClosed || st == http.StateHijacked
	if st == http.StateNew || st == http.StateIdle || !gone && cs.silentN.Load() == 0 {
		return
	}
	cs.mu.Lock()
	ci := cs.m[c]
	if gone {
		delete(cs.m, c)
	}
	cs.mu.Unlock()
	if ci != nil && ci.silent.CompareAndSwap(true, false) {
		cs.silentN.Add(-1)
	}
}

// closeSilent closes every silent connection and returns how many it
// closed. The server then sees each one closed (StateClosed), which
// forgets it.
func (cs *conns) closeSilent() int {
	return cs.each(func(ci *connInfo) bool { return ci.silent.Load() }, func(c net.Conn) { _ = c.Close() })
}

// each calls do, outside the lock, for every connection whose info match
// reports, and returns how many.
func (cs *conns) each(match func(*connInfo) bool, do func(net.Conn)) int {
	cs.mu.Lock()
	var picked []net.Conn
	for c, ci := range cs.m {
		if match(ci) {
			picked = append(picked, c)
		}
	}
	cs.mu.Unlock()
	for _, c := range picked {
		do(c)
	}
	return len(picked)
}

// cutUploads ends the body reads under way now (a read deadline in the
// past) and returns how many.
func (cs *conns) cutUploads() int {
	return cs.each(func(ci *connInfo) bool { return ci.reading.Load() }, func(c net.Conn) { _ = c.SetReadDeadline(time.Now()) })
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
