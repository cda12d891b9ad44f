package httpapi

import (
	"fmt"
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

// refuse writes the 503 answer without reading the request (a client that
// already sent one reads the answer first) and closes the connection.
func (l *limitListener) refuse(c net.Conn) {
	defer c.Close()
	body := fmt.Sprintf(refusedBody, l.max)
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = fmt.Fprintf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

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
