package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mmmq/mmmq/modules/contract"
)

// The TCP modes publish the same content over a plain TCP connection per
// producer: "line" sends mmmq's line protocol (PUB <topic> <LEVEL>
// <content>), "redis" sends RESP (XADD <topic> * data <content>) to a Redis
// server. One client loop drives both; a wireCodec is all that differs.
//
// Pipelining (-depth D) is a sliding window: a connection writes up to D
// requests, then after each reply it has read (and every further reply
// already in its read buffer) writes as many new requests as it got
// replies, in one write. So at most D requests are outstanding and the
// window is refilled as soon as replies arrive; depth 1 is request/reply.
// Replies come in request order on both protocols, so the first reply read
// answers the oldest request: its latency is from the write of that
// request to the reply.

// wireTimeout bounds one write or one wait for a reply, as the HTTP
// client's timeout does for the HTTP modes.
const wireTimeout = 60 * time.Second

// maxReplyLine is the longest reply line accepted (a line-protocol reply,
// a RESP line); the replies to a publish are a few dozen bytes.
const maxReplyLine = 64 << 10

// wireCodec frames the requests and replies of one protocol.
type wireCodec interface {
	// request returns the bytes of one publish of the run's content to
	// topic number t (the same bytes every time).
	request(t int) []byte
	// auth returns the first request of a connection, nil when none.
	auth() []byte
	// readReply reads one reply: nil when it is the expected success, a
	// *replyError when it is an error reply or not the reply expected,
	// another error when reading failed. isAuth: the reply to auth().
	readReply(r *bufio.Reader, isAuth bool) error
}

// replyError is an error reply of the server (ERR, -ERR) or a reply that
// is not what the request expects (mismatch). stop: sending again is
// pointless (the server refused the request itself) or, for a mismatch,
// the connection's framing can no longer be trusted.
type replyError struct {
	msg      string
	stop     bool
	mismatch bool
}

func (e *replyError) Error() string { return e.msg }

func mismatch(format string, args ...any) *replyError {
	return &replyError{msg: fmt.Sprintf(format, args...), stop: true, mismatch: true}
}

// readReplyLine reads one reply line without its "\n" or "\r\n".
func readReplyLine(r *bufio.Reader) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, mismatch("reply line over %d bytes", r.Size())
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	return bytes.TrimSuffix(line, []byte{'\r'}), nil
}

// lineCodec is mmmq's line protocol (plugins/lineproto).
type lineCodec struct {
	reqs  [][]byte
	level string // ACCEPTED, WRITTEN or DURABLE
	token string
}

func newLineCodec(cfg benchConfig) *lineCodec {
	c := &lineCodec{level: strings.ToUpper(cfg.ack), token: cfg.token}
	content := benchContent(cfg.size)
	for t := 0; t < cfg.topics; t++ {
		c.reqs = append(c.reqs, []byte("PUB "+benchTopic(cfg, t)+" "+c.level+" "+string(content)+"\n"))
	}
	return c
}

func (c *lineCodec) request(t int) []byte { return c.reqs[t] }

func (c *lineCodec) auth() []byte {
	if c.token == "" {
		return nil
	}
	return []byte("AUTH " + c.token + "\n")
}

// readReply accepts "OK <offset> <LEVEL>" (WRITTEN, DURABLE), "OK -
// ACCEPTED" (ACCEPTED) and "OK AUTH [name]"; "ERR <CODE> <text>" is an
// error reply that stops the connection when its code is a refusal of the
// request itself (HTTP 4xx but 408 and 429), as the HTTP modes do.
func (c *lineCodec) readReply(r *bufio.Reader, isAuth bool) error {
	line, err := readReplyLine(r)
	if err != nil {
		return err
	}
	s := string(line)
	if code, ok := strings.CutPrefix(s, "ERR "); ok {
		code, _, _ = strings.Cut(code, " ")
		st := contract.Classify(contract.NewError(code, "")).Status
		stop := st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests
		return &replyError{msg: truncate(line, 200), stop: stop}
	}
	f := strings.Split(s, " ")
	switch {
	case isAuth:
		if len(f) >= 2 && f[0] == "OK" && f[1] == "AUTH" {
			return nil
		}
	case c.level == "ACCEPTED":
		if s == "OK - ACCEPTED" {
			return nil
		}
	case len(f) == 3 && f[0] == "OK" && f[2] == c.level:
		if off, err := strconv.ParseInt(f[1], 10, 64); err == nil && off >= 0 {
			return nil
		}
	}
	return mismatch("unexpected reply %q", truncate(line, 200))
}

// redisCodec is RESP: XADD <topic> * data <content>, answered with the
// entry id as a bulk string.
type redisCodec struct {
	reqs  [][]byte
	token string
}

func respCommand(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"...)
		b = append(b, a...)
		b = append(b, "\r\n"...)
	}
	return b
}

func newRedisCodec(cfg benchConfig) *redisCodec {
	c := &redisCodec{token: cfg.token}
	content := string(benchContent(cfg.size))
	for t := 0; t < cfg.topics; t++ {
		c.reqs = append(c.reqs, respCommand("XADD", benchTopic(cfg, t), "*", "data", content))
	}
	return c
}

func (c *redisCodec) request(t int) []byte { return c.reqs[t] }

func (c *redisCodec) auth() []byte {
	if c.token == "" {
		return nil
	}
	return respCommand("AUTH", c.token)
}

// redisRetryable are the error prefixes of a server that may accept the
// same command later; any other error reply stops the connection.
var redisRetryable = map[string]bool{"LOADING": true, "BUSY": true, "MISCONF": true, "OOM": true,
	"TRYAGAIN": true, "MASTERDOWN": true, "CLUSTERDOWN": true}

// readReply accepts a bulk string entry id "<ms>-<seq>" (XADD) or +OK
// (AUTH); "-<PREFIX> text" is an error reply.
func (c *redisCodec) readReply(r *bufio.Reader, isAuth bool) error {
	line, err := readReplyLine(r)
	if err != nil {
		return err
	}
	if len(line) == 0 {
		return mismatch("empty reply line")
	}
	switch {
	case line[0] == '-':
		word, _, _ := strings.Cut(string(line[1:]), " ")
		return &replyError{msg: truncate(line, 200), stop: !redisRetryable[word]}
	case isAuth:
		if string(line) == "+OK" {
			return nil
		}
	case line[0] == '$':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil || n < 0 || n > maxReplyLine {
			break
		}
		b, err := r.Peek(n + 2)
		if err != nil {
			return err
		}
		id := string(b[:n])
		if string(b[n:]) != "\r\n" {
			return mismatch("bulk string of %d bytes not ended by CRLF", n)
		}
		_, _ = r.Discard(n + 2)
		ms, seq, ok := strings.Cut(id, "-")
		if _, err1 := strconv.ParseUint(ms, 10, 64); err1 != nil || !ok {
			return mismatch("XADD reply %q is not an entry id", id)
		}
		if _, err2 := strconv.ParseUint(seq, 10, 64); err2 != nil {
			return mismatch("XADD reply %q is not an entry id", id)
		}
		return nil
	}
	return mismatch("unexpected reply %q", truncate(line, 200))
}

// wireConn is one producer's connection and its window of outstanding
// requests.
type wireConn struct {
	c       net.Conn
	r       *bufio.Reader
	w       *bufio.Writer
	release func() bool // stops closing c when the run's context ends
	sent    []time.Time // ring of the outstanding requests' write times, oldest at head
	head, n int
}

func (wc *wireConn) close() {
	wc.release()
	wc.c.Close()
}

// push adds k requests written at t.
func (wc *wireConn) push(k int, t time.Time) {
	for ; k > 0; k-- {
		wc.sent[(wc.head+wc.n)%len(wc.sent)] = t
		wc.n++
	}
}

// pop removes the oldest outstanding request and returns its write time.
func (wc *wireConn) pop() time.Time {
	t := wc.sent[wc.head]
	wc.head = (wc.head + 1) % len(wc.sent)
	wc.n--
	return t
}

// dialWire connects to -addr and authenticates when a token is given.
func (g *loadGen) dialWire(ctx context.Context) (*wireConn, error) {
	d := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", g.cfg.addr)
	if err != nil {
		return nil, err
	}
	wc := &wireConn{c: c, r: bufio.NewReaderSize(c, maxReplyLine), w: bufio.NewWriterSize(c, 64<<10),
		sent: make([]time.Time, g.cfg.depth)}
	wc.release = context.AfterFunc(ctx, func() { c.Close() })
	if a := g.codec.auth(); a != nil {
		_ = c.SetDeadline(time.Now().Add(wireTimeout))
		_, _ = wc.w.Write(a)
		err = wc.w.Flush()
		if err == nil {
			err = g.codec.readReply(wc.r, true)
		}
		if err != nil {
			wc.close()
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return wc, nil
}

// wireProducer publishes over its own connection until the count is used
// up, the deadline passes or ctx is done; a connection that fails is
// opened again (after 10 ms, until -idle-timeout without an acknowledged
// request).
func (g *loadGen) wireProducer(ctx context.Context, id int, deadline time.Time, st *producerStats) {
	req := g.codec.request(id % g.cfg.topics)
	for ctx.Err() == nil && !g.nothingLeft(deadline) {
		wc, err := g.dialWire(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			g.failed(st, 1, err.Error())
			var re *replyError
			if errors.As(err, &re) && re.stop || g.idleTooLong() {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		again := g.pump(ctx, wc, req, deadline, st)
		wc.close()
		if !again {
			return
		}
		time.Sleep(10 * time.Millisecond) // no hot loop against a dead server
	}
}

// nothingLeft tells that no request is to be sent any more: the count is
// used up (count mode) or the deadline passed. A producer whose connection
// failed then does not connect again.
func (g *loadGen) nothingLeft(deadline time.Time) bool {
	if g.cfg.count > 0 {
		return g.remaining.Load() <= 0
	}
	return !time.Now().Before(deadline)
}

// pump keeps up to -depth requests outstanding on wc until there is
// nothing left to send and every reply is in. It returns true when the
// connection failed and the producer should connect again.
func (g *loadGen) pump(ctx context.Context, wc *wireConn, req []byte, deadline time.Time, st *producerStats) bool {
	refused := false // an error reply said to send no more, or -idle-timeout passed
	for {
		k := 0
		for !refused && wc.n+k < len(wc.sent) && ctx.Err() == nil && g.take(1, deadline) == 1 {
			_, _ = wc.w.Write(req) // an error comes back from Flush
			k++
		}
		if wc.n+k == 0 {
			return false
		}
		if k > 0 {
			wc.push(k, time.Now())
			_ = wc.c.SetDeadline(time.Now().Add(wireTimeout))
			if err := wc.w.Flush(); err != nil {
				return g.connFailed(ctx, wc, st, err, refused)
			}
		}
		for {
			err := g.codec.readReply(wc.r, false)
			now := time.Now()
			var re *replyError
			switch {
			case err == nil:
				g.acked(st, 1, now.Sub(wc.pop()))
			case !errors.As(err, &re):
				return g.connFailed(ctx, wc, st, err, refused)
			case re.mismatch:
				g.failed(st, 1, re.msg)
				return false
			default:
				wc.pop()
				refused = g.replyFailed(st, re) || refused
			}
			if wc.n == 0 || wc.r.Buffered() == 0 {
				break
			}
		}
	}
}

// replyFailed counts an error reply; it returns true when the connection
// should send no more (the error stops it, or nothing was acknowledged for
// -idle-timeout). A request that may succeed later is given back (count
// mode) after a 10 ms pause, as the HTTP modes do.
func (g *loadGen) replyFailed(st *producerStats, re *replyError) bool {
	g.failed(st, 1, re.msg)
	if re.stop || g.idleTooLong() {
		return true
	}
	if g.cfg.count > 0 {
		g.remaining.Add(1)
	}
	time.Sleep(10 * time.Millisecond)
	return false
}

// connFailed counts every outstanding request of a connection that failed
// as an error and gives them back (count mode); it returns whether to
// connect again.
func (g *loadGen) connFailed(ctx context.Context, wc *wireConn, st *producerStats, err error, refused bool) bool {
	if ctx.Err() != nil {
		return false
	}
	n := wc.n
	g.failed(st, int64(n), fmt.Sprintf("%v (%d requests outstanding)", err, n))
	if refused {
		return false
	}
	if g.cfg.count > 0 {
		g.remaining.Add(int64(n))
	}
	return !g.idleTooLong()
}
