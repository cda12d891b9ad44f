package httpapi

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// AutoMaxConns is the connection cap used when none is configured
// (server.max-connections: 0): a quarter of the open-file limit (at least
// 16). The segment cache takes at most half of the descriptors
// (mmmq.broker.storage.max-open-segments), HTTP connections at most a
// quarter, and the rest stays for the line protocol, checkpoint commits,
// directory syncs and the listeners themselves — so clients alone cannot
// starve storage or the health checks. limit is RLIMIT_NOFILE; 0 (unknown)
// gives 1024.
func AutoMaxConns(limit uint64) int {
	if limit == 0 {
		return 1024
	}
	return int(max(limit/4, 16))
}

// refusedBody is what a connection over the cap is answered before it is
// closed: the broker's JSON error shape.
const refusedBody = `{"acknowledgement":"NACK","error":"too many connections (server.max-connections %d); retry shortly","code":"UNAVAILABLE"}`

// limitListener accepts at most max connections at once. One over the cap
// is answered at once — 503 UNAVAILABLE, Retry-After: 1, Connection: close —
// and closed, instead of waiting in the listen backlog or taking a
// descriptor the storage needs.
type limitListener struct {
	net.Listener
	max     int
	open    atomic.Int64
	refused atomic.Int64
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= int64(l.max) {
			return &countedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
		l.refused.Add(1)
		go l.refuse(c)
	}
}

// refuse writes the 503 answer, then half-closes the connection and reads
// what the client sent (at most refuseDrainBytes, for at most
// refuseLinger) before closing it: closing with unread data makes the
// kernel send a reset, which can destroy the answer before a client that
// sent its whole request reads it (as net/http does for its own errors).
func (l *limitListener) refuse(c net.Conn) {
	defer c.Close()
	body := fmt.Sprintf(refusedBody, l.max)
	_ = c.SetDeadline(time.Now().Add(refuseLinger))
	if _, err := fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, refuseDrainBytes))
}

// How long and how much a refused connection is read after its answer.
const (
	refuseLinger     = time.Second
	refuseDrainBytes = 1 << 20
)

// countedConn gives its place back to the listener when closed (once).
type countedConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() { c.l.open.Add(-1) })
	return c.Conn.Close()
}

// CloseWrite half-closes the connection when the wrapped one can (a
// *net.TCPConn). net/http looks for it before closing a connection whose
// request it refused (431, 400, 413): it half-closes, waits a moment, then
// closes, so the client reads the answer instead of a reset. Without it
// here the wrapper would hide the TCP connection's.
func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
