package lineproto

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// errLineTooLong: a request line over MaxLineBytes.
var errLineTooLong = errors.New("lineproto: line too long")

type groupKey struct{ topic, group string }

// heldGroup is a group a connection holds: its session id, and its mode
// (contract.GroupExclusive or contract.GroupShared) once a FETCH has
// answered; "" before.
type heldGroup struct{ session, mode string }

// conn is one client connection: request lines in order, one reply per
// request, in the same order. Its reader (serve) reads and serves the
// lines; PUB and PUBID are pipelined (pipeline.go): their replies are
// written by the flusher while the reader reads on. It is a consumer
// session: it holds the groups it fetched until it closes.
type conn struct {
	s   *Server
	nc  net.Conn
	w   *bufio.Writer // the reader's, for barrier replies, only after a drain (pipeline.go)
	out replyWriter   // where replyf writes: w, or cur's reply
	cur *slot         // the slot of the pipelined line being served
	// rbuf is the read buffer; rbuf[rstart:rend] is what was read and not
	// yet served: after serveLines, at most one incomplete line.
	rbuf         []byte
	rstart, rend int
	// shortReads counts consecutive reads that filled less than half of
	// rbuf (shrink).
	shortReads int
	topic      string                 // the last PUB's topic, valid: reused while it repeats
	sessions   map[groupKey]heldGroup // groups this connection holds
	log        *zap.Logger
	auth       authState
	pipe       pipeline
}

// Read buffer sizes (the shape of nats-server's client read loop).
const (
	// minReadBytes is the read buffer of a new connection, and the
	// smallest it shrinks to.
	minReadBytes = 512
	// maxReadBytes is the largest the read buffer grows to while reads
	// fill it (many short lines at once); only a line longer than it
	// grows it further, up to MaxLineBytes+3, and the buffer goes back to
	// minReadBytes once that line is served.
	maxReadBytes = 64 << 10
	// shrinkAfterReads: after this many consecutive reads that filled
	// less than half of the buffer, it is halved.
	shrinkAfterReads = 4
)

// serve is the connection's read loop: one read of whatever has arrived
// (at most the free part of the read buffer), then every complete line in
// it is served in order, then the read's PUBs are handed to their topics'
// writers at once and the flusher is woken for the replies that are ready
// (pipeline.go). A line is served only once its "\n" has arrived; what
// follows the last one waits for the next read.
func (c *conn) serve() {
	defer c.s.wg.Done()
	defer c.s.remove(c)
	defer c.nc.Close()
	defer c.lingerOnStop() // after the last reply, before the close
	defer c.releaseAuth()
	defer c.releaseAll()
	defer c.stopPipeline() // first: every queued line is answered
	go c.flusher()
	c.rbuf = make([]byte, minReadBytes)
	for {
		// Deadline first, then the checks: Stop sets closing, and the
		// flusher broken, before they set an immediate deadline, so one
		// of the two always ends an idle read.
		_ = c.nc.SetReadDeadline(time.Now().Add(c.readTimeout()))
		if c.s.closing.Load() || c.pipe.broken.Load() {
			return
		}
		free, err := c.makeRoom()
		var n int
		if err == nil {
			n, err = c.nc.Read(c.rbuf[c.rend:])
			c.rend += n
		}
		if !c.serveLines() {
			return
		}
		c.endRead()
		if err == nil && c.rend-c.rstart > c.lineLimit() {
			err = errLineTooLong // an incomplete line is already too long
		}
		if err != nil {
			c.readFailed(err)
			return
		}
		c.resize(n, free)
	}
}

// makeRoom makes sure the read buffer has free space after rbuf[:rend]
// and returns how much. The buffer is full only when one incomplete line
// fills it (serveLines moved it to the front): it then grows for that
// line, doubling, up to the line limit plus one byte, the first byte
// that makes the line too long. errLineTooLong when it is already there.
func (c *conn) makeRoom() (int, error) {
	if c.rend < len(c.rbuf) {
		return len(c.rbuf) - c.rend, nil
	}
	limit := c.lineLimit() + 1
	if len(c.rbuf) >= limit {
		return 0, errLineTooLong
	}
	c.setBuffer(min(2*len(c.rbuf), limit))
	return len(c.rbuf) - c.rend, nil
}

// setBuffer replaces the read buffer with one of size bytes holding what
// is not served yet (at most size bytes of it).
func (c *conn) setBuffer(size int) {
	b := make([]byte, size)
	c.rend = copy(b, c.rbuf[c.rstart:c.rend])
	c.rbuf, c.rstart = b, 0
}

// resize adapts the read buffer after a read of n bytes into free bytes:
// a read that filled it doubles it up to maxReadBytes (more lines are
// waiting), a buffer that grew past maxReadBytes for a long line goes
// back to minReadBytes once that line is served, and shrinkAfterReads
// reads in a row that filled less than half of it halve it.
func (c *conn) resize(n, free int) {
	size, held := len(c.rbuf), c.rend-c.rstart
	switch {
	case size > maxReadBytes:
		if held <= minReadBytes/2 {
			c.setBuffer(minReadBytes)
		}
		c.shortReads = 0
	case n == free && size < maxReadBytes:
		c.setBuffer(2 * size)
		c.shortReads = 0
	case n < size/2 && size > minReadBytes:
		c.shortReads++
		if c.shortReads >= shrinkAfterReads && held <= size/4 {
			c.setBuffer(size / 2)
			c.shortReads = 0
		}
	default:
		c.shortReads = 0
	}
}

// serveLines serves every complete line in the read buffer, in order, and
// moves what is left (an incomplete line) to the front. false: the
// connection is over (a line closed it, a line was too long, a reply
// could not be written, or the server is stopping: the lines after are
// not served).
func (c *conn) serveLines() bool {
	for c.rstart < c.rend {
		buf := c.rbuf[c.rstart:c.rend]
		i := bytes.IndexByte(buf, '\n')
		if i < 0 {
			break
		}
		limit := c.lineLimit()
		line := trimCR(buf[:i])
		if i+1 > limit || len(line) > limit-2 {
			c.readFailed(errLineTooLong)
			return false
		}
		c.rstart += i + 1
		if c.s.closing.Load() || c.pipe.broken.Load() {
			return false
		}
		if !c.request(line) {
			return false
		}
	}
	switch {
	case c.rstart == c.rend:
		c.rstart, c.rend = 0, 0
	case c.rstart > 0:
		c.rend = copy(c.rbuf, c.rbuf[c.rstart:c.rend])
		c.rstart = 0
	}
	return true
}

// endRead ends a read: its PUBs go to their topics' writers, the flusher
// is woken for the replies that are ready, and the stored messages'
// buffer is reused (the logs copied them).
func (c *conn) endRead() {
	c.handOut()
	c.pipe.kick()
	if cap(c.pipe.arena) > keepLineBytes {
		c.pipe.arena = nil
	}
	c.pipe.arena = c.pipe.arena[:0]
}

// request serves one line. PUB, PUBID and PUBX are pipelined; any other line is
// a barrier: it waits until every earlier reply is written, then runs and
// is answered here. false: the connection is over.
func (c *conn) request(line []byte) bool {
	if cmd, _, _ := bytes.Cut(line, []byte{' '}); isPub(cmd) {
		return c.pipelined(line)
	}
	if !c.drain() {
		return false
	}
	// A reply longer than the write buffer is flushed while it is
	// written: bound those writes too.
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	run, closeConn := c.admit(line)
	if run {
		c.handle(line)
	}
	if !c.flush() {
		return false
	}
	if closeConn {
		c.closeGracefully()
		return false
	}
	return true
}

// pipelined serves a PUB, PUBID or PUBX line: its reply, whatever it is, is
// written by the flusher in line order. false: the connection is over.
func (c *conn) pipelined(line []byte) bool {
	s := c.takeSlot()
	if s == nil {
		return false
	}
	c.cur, c.out = s, &s.reply
	run, closeConn := c.admit(line)
	if run {
		c.handle(line)
	}
	c.cur, c.out = nil, c.w
	c.pipe.enqueue(s)
	if closeConn {
		if c.drain() {
			c.closeGracefully()
		}
		return false
	}
	return true
}

func isPub(cmd []byte) bool {
	return bytes.EqualFold(cmd, []byte("PUB")) || bytes.EqualFold(cmd, []byte("PUBID")) || bytes.EqualFold(cmd, []byte("PUBX"))
}

// readFailed ends the connection after a read failed or a line was too
// long: an over-long line is answered (after every earlier reply) and the
// connection closed.
func (c *conn) readFailed(err error) {
	if errors.Is(err, errLineTooLong) {
		if !c.drain() {
			return
		}
		if c.preAuth() {
			c.replyf("ERR %s a line before AUTH is over %d bytes; closing the connection", contract.CodeUnauthorized, PreAuthMaxLineBytes)
		} else {
			c.replyf("ERR %s line is over %d bytes (mmmq.lineproto.max-line-bytes); closing the connection", contract.CodeTooLarge, c.s.opts.MaxLineBytes)
		}
		c.flush()
		c.closeGracefully()
		return
	}
	// Only a line ended by "\n" is a request: a fragment left when the
	// connection ends (EOF, half-close, reset, idle timeout, shutdown) may
	// be a producer killed mid-line, so it is dropped unanswered instead
	// of being executed truncated.
	if n := c.rend - c.rstart; n > 0 {
		c.log.Debug("connection ended inside a request line; the incomplete line is dropped",
			zap.Int("bytes", n), zap.Error(err))
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isTimeout(err) {
		c.log.Debug("connection read failed", zap.Error(err))
	}
}

// readTimeout is how long the next request line may take: IdleTimeout, or
// AuthTimeout when it is the line that must authenticate.
func (c *conn) readTimeout() time.Duration {
	if c.auth.principal == nil && c.authEnabled() {
		return min(c.s.opts.IdleTimeout, c.s.opts.AuthTimeout)
	}
	return c.s.opts.IdleTimeout
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// lineLimit is the most bytes a line may take with its "\n" or "\r\n":
// MaxLineBytes+2, or PreAuthMaxLineBytes+2 (at most) before
// authentication. A line is refused (errLineTooLong) as soon as more than
// that of it has arrived, and never more than that plus one byte is kept.
func (c *conn) lineLimit() int {
	if c.preAuth() {
		return min(PreAuthMaxLineBytes, c.s.opts.MaxLineBytes) + 2
	}
	return c.s.opts.MaxLineBytes + 2
}

// PreAuthMaxLineBytes caps a line read before the connection has
// authenticated (authentication on): AUTH and a token fit in far less, so
// an unauthenticated client cannot make the broker hold
// mmmq.lineproto.max-line-bytes per connection.
const PreAuthMaxLineBytes = 4096

// preAuth reports whether authentication is on and the connection has no
// principal yet and no verified client certificate (which may
// authenticate it at its first request).
func (c *conn) preAuth() bool {
	a := c.s.opts.Authenticator
	if a == nil || !a.Enabled() || c.auth.principal != nil || c.auth.certCN != "" {
		return false
	}
	_, hasCert := c.peerCommonName()
	return !hasCert
}

// trimCR returns l without a last "\r".
func trimCR(l []byte) []byte {
	if n := len(l); n > 0 && l[n-1] == '\r' {
		return l[:n-1]
	}
	return l
}

// closeGracefully sends FIN after the last reply, then discards what the
// client still sends for a moment, so closing does not reset the connection
// (a reset can make the client lose the ERR line it has not read yet).
func (c *conn) closeGracefully() {
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok { // *net.TCPConn, *tls.Conn
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, int64(4*c.s.opts.MaxLineBytes)))
}

// lingerOnStop is closeGracefully for a connection the server's Stop
// ends: lines the client sent that were never read (still in the kernel's
// receive buffer) would make the close a reset, and a reset can destroy
// the replies already written for stored messages before the client reads
// them — so it half-closes and discards what is left for at most
// stopLinger. A connection whose replies failed (broken) is not waited for.
func (c *conn) lingerOnStop() {
	if !c.s.closing.Load() || c.pipe.broken.Load() {
		return
	}
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(stopLinger))
	_, _ = io.Copy(io.Discard, io.LimitReader(c.nc, int64(4*c.s.opts.MaxLineBytes)))
}

// stopLinger is how long a connection ended by Stop reads on after its last
// reply (lingerOnStop); Stop waits at most that much longer for it.
const stopLinger = 250 * time.Millisecond

func (c *conn) replyf(format string, args ...any) {
	_, _ = fmt.Fprintf(c.out, format, args...)
	_ = c.out.WriteByte('\n')
}

// replyErr writes "ERR <CODE> <text>" with text on one line.
func (c *conn) replyErr(code string, err error) {
	c.replyf("ERR %s %s", code, oneLine(err.Error()))
}

func oneLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.NewReplacer("\r\n", "; ", "\n", "; ", "\r", " ").Replace(s)
	}
	return s
}

// flush sends the buffered reply; false when the connection is broken.
func (c *conn) flush() bool {
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	if err := c.w.Flush(); err != nil {
		c.log.Debug("connection write failed", zap.Error(err))
		return false
	}
	return true
}

func (c *conn) handle(line []byte) {
	cmd, rest, _ := bytes.Cut(line, []byte{' '})
	switch {
	case len(bytes.TrimSpace(line)) == 0:
		c.replyf("ERR %s empty request", contract.CodeBadRequest)
	case bytes.EqualFold(cmd, []byte("PUB")):
		c.pub(rest)
	case bytes.EqualFold(cmd, []byte("PUBID")):
		c.pubID(rest)
	case bytes.EqualFold(cmd, []byte("PUBX")):
		c.pubX(rest)
	case bytes.EqualFold(cmd, []byte("FETCH")):
		c.fetch(rest)
	case bytes.EqualFold(cmd, []byte("ACK")):
		c.ack(rest)
	case bytes.EqualFold(cmd, []byte("ACKX")):
		c.ackX(rest)
	case bytes.EqualFold(cmd, []byte("NACKX")):
		c.nackX(rest)
	case bytes.EqualFold(cmd, []byte("STATUS")):
		c.status(rest)
	default:
		if len(cmd) > 32 {
			cmd = cmd[:32]
		}
		if c.auth.principal != nil {
			// Not echoed while authentication is on: the word may be a
			// token sent by mistake.
			c.replyf("ERR %s unknown command (want AUTH, PUB, PUBID, PUBX, FETCH, ACK, ACKX, NACKX or STATUS)", contract.CodeBadRequest)
			return
		}
		c.replyf("ERR %s unknown command %q (want AUTH, PUB, PUBID, PUBX, FETCH, ACK, ACKX, NACKX or STATUS)", contract.CodeBadRequest, cmd)
	}
}

// pubForm is which of the publish commands a line is.
type pubForm int

const (
	formPub   pubForm = iota // PUB <topic> <level> <payload>
	formPubID                // PUBID <topic> <level> <id> <payload>
	formPubX                 // PUBX <topic> <level> [<name>=<value> ...] <payload>
)

// pub: PUB <topic> <ACCEPTED|WRITTEN|DURABLE> <payload>
func (c *conn) pub(rest []byte) { c.publish(rest, formPub) }

// pubID: PUBID <topic> <ACCEPTED|WRITTEN|DURABLE> <id> <payload>
func (c *conn) pubID(rest []byte) { c.publish(rest, formPubID) }

// pubX: PUBX <topic> <ACCEPTED|WRITTEN|DURABLE> [key=<v>] [id=<v>] [ttl=<v>] <payload>
func (c *conn) pubX(rest []byte) { c.publish(rest, formPubX) }

// publish serves PUB (the broker generates the id, never deduplicated),
// PUBID (the producer's id, deduplicated within
// mmmq.broker.dedup.window) and PUBX (attributes: key=, the ordering key;
// id=, the producer's id, deduplicated as PUBID's; ttl=, the time to live). It checks the line (a refusal is
// answered in the line's place and stores nothing), then adds the
// message to the read's batch (join), which is handed to the topic's
// writer without waiting at the end of the read; the flusher answers "OK <offset> <LEVEL>", or "OK - ACCEPTED", followed by
// " DUPLICATE" when the id was already published to the topic within the
// window (nothing stored; the offset is the first message's).
func (c *conn) publish(rest []byte, form pubForm) {
	a, ok := c.parsePub(rest, form)
	if !ok || !c.allowed(a.cmd, contract.ActionPublish, a.topic, "") {
		return
	}
	var id string
	switch {
	case form == formPubID:
		if err := validateID(a.id); err != nil {
			c.replyf("ERR %s %s; %s", contract.CodeBadRequest, err, a.usage)
			return
		}
		id = string(a.id)
	case a.id != nil: // PUBX id=, percent-decoded: the HTTP "id" rule
		if len(a.id) == 0 || len(a.id) > contract.MaxIDBytes || !utf8.Valid(a.id) {
			c.replyf("ERR %s attribute id: 1 to %d bytes of UTF-8 (percent-encoded) when given; %s", contract.CodeBadRequest, contract.MaxIDBytes, a.usage)
			return
		}
		id = string(a.id)
	}
	if len(a.payload) > c.s.opts.MaxRecordBytes {
		c.replyf("ERR %s payload of %d bytes is over %d bytes (mmmq.broker.segment.max-record-bytes)",
			contract.CodeTooLarge, len(a.payload), c.s.opts.MaxRecordBytes)
		return
	}
	if contract.ValidJSON(a.payload) != nil {
		c.replyf("ERR %s payload is not valid JSON; %s", contract.CodeBadRequest, a.usage)
		return
	}
	if !c.publishAllowed(a.cmd, a.topic) {
		return
	}
	now := time.Now()
	at, by, err := contract.ParseScheduleAttrs(a.deliverAt, a.delay, now)
	if err != nil {
		c.replyErr(contract.CodeBadRequest, err)
		return
	}
	stored, err := c.encode(a.topic, a.payload, id, a.key, a.ttl, a.trace, now)
	if err != nil {
		c.replyErr(contract.CodeBadRequest, err)
		return
	}
	if at > 0 {
		c.schedule(a, id, stored, at, by, now)
		return
	}
	c.join(a.topic, a.level, topicqueue.Message{Stored: stored, ID: id}, now)
}

// schedule serves a PUBX with deliver-at= or delay= in the future: the
// message goes to Options.Scheduler (fsynced there) and the line's reply
// is "OK SCHEDULED <scheduleId> <deliverAt>" (RFC 3339, UTC, ms; the
// level is DURABLE whatever the line asked), with " DUPLICATE" when the
// producer id was already scheduled on the topic within
// mmmq.broker.dedup.window (the first schedule's id and time; nothing
// stored). The refusals are the HTTP API's: 501 NOT_IMPLEMENTED without a
// scheduler or where it cannot schedule, 400 for a ttl that ends at or
// before the due time or a due time beyond the maximum delay. The read's
// batch is handed out first, so the PUBs before the line do not wait for
// this fsync; the line is answered in its place.
func (c *conn) schedule(a pubArgs, id string, stored []byte, at int64, by contract.ScheduleBy, now time.Time) {
	var expiresAt int64
	if a.ttl > 0 {
		expiresAt = now.UnixMilli() + a.ttl.Milliseconds()
	}
	sched := c.s.opts.Scheduler
	err := contract.CheckSchedule(sched, by, at, expiresAt)
	if err == nil {
		err = contract.CheckScheduledSize(stored, c.s.opts.MaxRecordBytes)
	}
	if err != nil {
		c.replyErr(errCode(err), err)
		return
	}
	c.handOut()
	ctx, cancel := context.WithTimeout(c.s.ctx, c.s.opts.PublishTimeout)
	defer cancel()
	res, err := contract.Schedule(ctx, sched, by, a.topic, id, stored, at)
	if err != nil {
		c.replyErr(errCode(err), err)
		return
	}
	b := append(append([]byte("OK SCHEDULED "), res.ID...), ' ')
	b = contract.AppendMillis(b, res.DeliverAt.UnixMilli())
	if res.Duplicate {
		b = append(b, " DUPLICATE"...)
	}
	c.out.Write(append(b, '\n'))
}

// encode appends the stored message JSON of a PUB to the read's message
// buffer (pipeline.arena, reused after each read: the logs copy what they
// are handed) and returns it.
func (c *conn) encode(topic string, payload []byte, id, key string, ttl time.Duration, trace contract.TraceContext, now time.Time) ([]byte, error) {
	p := &c.pipe
	// The envelope adds the topic, the id (escaped at most 6 bytes per
	// byte), the key (escaped at most 2 bytes per byte: it has no control
	// characters), a timestamp, an expiry and about 100 bytes of names; a guess short
	// of the mark only costs the message its own allocation.
	var headers map[string]string
	if trace.Given() {
		// PUBX traceparent= and tracestate=: validated, an invalid one
		// dropped and counted (the publish goes on without it).
		headers = contract.ApplyTrace(nil, trace)
	}
	if need := len(payload) + len(topic) + 6*len(id) + 2*len(key) + 2*(len(trace.Parent)+len(trace.State)) + 200; cap(p.arena)-len(p.arena) < need {
		p.arena = make([]byte, 0, max(2*cap(p.arena), 4<<10, 2*need))
	}
	n := len(p.arena)
	stored, err := contract.AppendTTLMessage(p.arena[n:n], topic, payload, id, key, ttl, headers, now)
	if err != nil {
		return nil, err
	}
	if len(stored) > 0 && cap(p.arena)-n >= len(stored) && &p.arena[:n+1][n] == &stored[0] {
		p.arena = p.arena[:n+len(stored)]
	}
	return stored[:len(stored):len(stored)], nil
}

// join adds a checked message to the read's batch, its outcome going to
// the line's slot (c.cur), which the flusher answers in the line's place:
// at WRITTEN and DURABLE it first takes the stored message's bytes from
// Options.Budget (reserve), and the publish has Options.PublishTimeout
// from now to reach its level. The batch is handed out at the end of the
// read (pipeline.go), before the reader waits for anything.
func (c *conn) join(topic string, level contract.AckLevel, m topicqueue.Message, now time.Time) {
	s := c.cur
	var held int64
	if level != contract.Accepted { // ACCEPTED bytes: the log takes them from the budget
		held = c.reserve(int64(len(m.Stored)))
	}
	s.pub, s.level, s.deadline = true, level, now.Add(c.s.opts.PublishTimeout)
	if tr := c.s.opts.Tracer; tr != nil {
		s.span, s.start = tr.StartPublish(context.Background(), tracing.MessageOf(topic, m.Stored), tracing.TransportLineProto, now), now
	}
	c.group(topic, level).add(s, m, held)
}

// pubArgs are the arguments of PUB, PUBID and PUBX.
type pubArgs struct {
	cmd, usage  string
	topic       string // valid
	level       contract.AckLevel
	id, payload []byte        // id: PUBID's token, or PUBX's id= decoded (nil without one)
	key         string        // PUBX's key=, decoded and valid; "" for none
	ttl         time.Duration // PUBX's ttl=, decoded and valid; 0 for none
	// deliverAt and delay are PUBX's deliver-at= and delay=, decoded
	// (checked by contract.ParseScheduleAttrs in publish); "" for none.
	deliverAt, delay string
	// trace is PUBX's traceparent= and tracestate=, decoded, not yet
	// validated (encode drops and counts what is invalid).
	trace contract.TraceContext
}

// parsePub splits the arguments of PUB, PUBID or PUBX (form) and checks
// the level, the topic name and PUBX's attributes, or answers ERR
// BAD_REQUEST.
func (c *conn) parsePub(rest []byte, form pubForm) (pubArgs, bool) {
	a := pubArgs{cmd: "PUB", usage: "usage: PUB <topic> <ACCEPTED|WRITTEN|DURABLE> <payload JSON>"}
	switch form {
	case formPubID:
		a.cmd, a.usage = "PUBID", "usage: PUBID <topic> <ACCEPTED|WRITTEN|DURABLE> <id> <payload JSON>"
	case formPubX:
		a.cmd, a.usage = "PUBX", "usage: PUBX <topic> <ACCEPTED|WRITTEN|DURABLE> [key=<key>] [id=<id>] [ttl=<duration>] [deliver-at=<RFC 3339|unix ms>|delay=<duration>] [traceparent=<w3c>] [tracestate=<w3c>] <payload JSON> (values percent-encoded)"
	}
	topicB, rest, ok1 := bytes.Cut(rest, []byte{' '})
	levelB, rest, ok2 := bytes.Cut(rest, []byte{' '})
	ok3 := true
	switch form {
	case formPubID:
		a.id, rest, ok3 = bytes.Cut(rest, []byte{' '})
	case formPubX:
		var err error
		if rest, err = a.attributes(rest); err != nil {
			c.replyf("ERR %s %s; %s", contract.CodeBadRequest, err, a.usage)
			return a, false
		}
	}
	a.payload = bytes.TrimSpace(rest)
	if !ok1 || !ok2 || !ok3 || len(topicB) == 0 || len(levelB) == 0 || len(a.payload) == 0 {
		c.replyf("ERR %s %s", contract.CodeBadRequest, a.usage)
		return a, false
	}
	var err error
	if a.level, err = parseLevel(levelB); err != nil {
		c.replyErr(contract.CodeBadRequest, err)
		return a, false
	}
	if a.topic, err = c.topicName(topicB); err != nil {
		c.replyErr(contract.CodeBadRequest, err)
		return a, false
	}
	return a, true
}

// attributes parses PUBX's attributes, the tokens <name>=<value> before
// the payload (a JSON payload never starts so: its first token is a
// literal, a number, a string, an object or an array), into a, and
// returns the rest of the line. Values are percent-encoded (RFC 3986:
// %XX for any byte, at least for space, '%' and control bytes; '+' is
// itself). Names are lower case: key (the ordering key,
// contract.ValidateKey), id (the producer's id), ttl (the time to
// live, contract.ParseTTL), deliver-at and delay (a scheduled message,
// contract.ParseScheduleAttrs; checked in publish), traceparent and
// tracestate (the W3C trace context, stored as the message's headers of
// those names; an invalid one is dropped and counted in encode, never
// refused). An unknown name, a
// name given twice or a value that does not decode is an error naming it.
func (a *pubArgs) attributes(rest []byte) ([]byte, error) {
	var haveKey, haveID, haveTTL, haveAt, haveDelay, haveTP, haveTS bool
	for {
		tok, after, _ := bytes.Cut(rest, []byte{' '})
		name, raw, ok := attribute(tok)
		if !ok {
			return rest, nil
		}
		rest = after
		var have *bool
		switch name {
		case "key":
			have = &haveKey
		case "id":
			have = &haveID
		case "ttl":
			have = &haveTTL
		case "deliver-at":
			have = &haveAt
		case "delay":
			have = &haveDelay
		case contract.TraceparentHeader:
			have = &haveTP
		case contract.TracestateHeader:
			have = &haveTS
		default:
			return nil, fmt.Errorf("unknown attribute %q (PUBX knows key, id, ttl, deliver-at, delay, traceparent and tracestate)", truncate(name, 32))
		}
		if *have {
			return nil, fmt.Errorf("attribute %s given twice", name)
		}
		*have = true
		val, err := url.PathUnescape(raw)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: the value is not percent-encoded (a %% must start %%XX)", name)
		}
		switch name {
		case "id":
			a.id = []byte(val)
			continue
		case "ttl":
			if a.ttl, err = contract.ParseTTL(val); err != nil {
				return nil, err
			}
			continue
		case contract.TraceparentHeader:
			a.trace.Parent, a.trace.HasParent = val, true
			continue
		case contract.TracestateHeader:
			a.trace.State, a.trace.HasState = val, true
			continue
		case "deliver-at", "delay":
			if val == "" {
				return nil, fmt.Errorf("attribute %s: the value is empty (%s)", name, contract.LineScheduleRule)
			}
			if name == "delay" {
				a.delay = val
			} else {
				a.deliverAt = val
			}
			continue
		}
		if err := contract.ValidateKey(val); err != nil {
			return nil, err
		}
		a.key = val
	}
}

// attribute splits tok as <name>=<value>, name one or more of
// [A-Za-z0-9_-]; ok is false when tok is not so (the payload begins).
func attribute(tok []byte) (name, value string, ok bool) {
	eq := bytes.IndexByte(tok, '=')
	if eq <= 0 {
		return "", "", false
	}
	for _, b := range tok[:eq] {
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '_' || b == '-') {
			return "", "", false
		}
	}
	return string(tok[:eq]), string(tok[eq+1:]), true
}

// truncate cuts s to at most n bytes.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// parseLevel is contract.ParseAckLevel without a string for the usual
// spellings.
func parseLevel(b []byte) (contract.AckLevel, error) {
	switch {
	case bytes.EqualFold(b, []byte("DURABLE")):
		return contract.Durable, nil
	case bytes.EqualFold(b, []byte("WRITTEN")):
		return contract.Written, nil
	case bytes.EqualFold(b, []byte("ACCEPTED")):
		return contract.Accepted, nil
	}
	return contract.ParseAckLevel(string(b))
}

// topicName returns b as a topic name, or why it is not a valid one
// (contract.ValidateTopic). The last name is kept: a connection that
// publishes to one topic converts and checks it once.
func (c *conn) topicName(b []byte) (string, error) {
	if string(b) == c.topic {
		return c.topic, nil
	}
	t := string(b)
	if err := contract.ValidateTopic(t); err != nil {
		return "", err
	}
	c.topic = t
	return t, nil
}

// validateID checks a PUBID id: 1 to contract.MaxIDBytes bytes of valid
// UTF-8 without control characters (a space cannot occur: it ends the
// token).
func validateID(id []byte) error {
	switch {
	case len(id) == 0:
		return errors.New("the id is empty (one space between the tokens)")
	case len(id) > contract.MaxIDBytes:
		return fmt.Errorf("the id is %d bytes, over %d", len(id), contract.MaxIDBytes)
	case !utf8.Valid(id):
		return errors.New("the id is not valid UTF-8")
	}
	for i, r := range string(id) {
		if unicode.IsControl(r) {
			return fmt.Errorf("the id has a control character (%U) at byte %d (such ids need the HTTP API)", r, i)
		}
	}
	return nil
}

// fetchArgs are FETCH's arguments; from is -1 without from=, mode ""
// without mode=.
type fetchArgs struct {
	k      groupKey
	limit  int
	waitMS int64
	from   int64
	mode   string
}

const fetchUsage = "usage: FETCH <topic> <group> <max> <wait-ms> [from=<offset>] [mode=shared|exclusive]"

// parseFetch parses FETCH's arguments, or answers ERR BAD_REQUEST. The
// four positional arguments may be followed by the attributes from= and
// mode=, in any order, each at most once (values percent-encoded, as
// PUBX's).
func (c *conn) parseFetch(rest []byte) (fetchArgs, bool) {
	f := strings.Fields(string(rest))
	if len(f) < 4 || len(f) > 6 {
		c.replyf("ERR %s %s", contract.CodeBadRequest, fetchUsage)
		return fetchArgs{}, false
	}
	limit, err1 := strconv.Atoi(f[2])
	waitMS, err2 := strconv.ParseInt(f[3], 10, 64)
	if err1 != nil || limit < 1 || err2 != nil || waitMS < 0 {
		c.replyf("ERR %s max must be an integer >= 1 and wait-ms an integer >= 0", contract.CodeBadRequest)
		return fetchArgs{}, false
	}
	a := fetchArgs{k: groupKey{f[0], f[1]}, limit: limit, waitMS: waitMS, from: -1}
	var haveFrom, haveMode bool
	for _, tok := range f[4:] {
		name, val, err := decodeAttribute(tok)
		if err != nil {
			c.replyf("ERR %s %s; %s", contract.CodeBadRequest, err, fetchUsage)
			return fetchArgs{}, false
		}
		switch name {
		case "from":
			n, err := strconv.ParseInt(val, 10, 64)
			if haveFrom || err != nil || n < 0 {
				c.replyf("ERR %s from=<offset> must be an integer >= 0, given once; %s", contract.CodeBadRequest, fetchUsage)
				return fetchArgs{}, false
			}
			haveFrom, a.from = true, n
		case "mode":
			if haveMode || (val != contract.GroupShared && val != contract.GroupExclusive) {
				c.replyf("ERR %s mode= must be %s or %s, given once; %s", contract.CodeBadRequest, contract.GroupShared, contract.GroupExclusive, fetchUsage)
				return fetchArgs{}, false
			}
			haveMode, a.mode = true, val
		default:
			c.replyf("ERR %s unknown attribute %q (FETCH knows from and mode); %s", contract.CodeBadRequest, truncate(name, 32), fetchUsage)
			return fetchArgs{}, false
		}
	}
	return a, true
}

// decodeAttribute splits tok as <name>=<value> (attribute) and
// percent-decodes the value; an error says what is wrong with tok.
func decodeAttribute(tok string) (name, value string, err error) {
	name, raw, ok := attribute([]byte(tok))
	if !ok {
		return "", "", fmt.Errorf("%q is not an attribute <name>=<value>", truncate(tok, 32))
	}
	if value, err = url.PathUnescape(raw); err != nil {
		return "", "", fmt.Errorf("attribute %s: the value is not percent-encoded (a %% must start %%XX)", name)
	}
	return name, value, nil
}

// consumeAllowed checks the consume permission of FETCH and ACK on k: with
// a principal the names are checked first (ERR BAD_REQUEST), then the
// permission (ERR FORBIDDEN). Without one it does nothing.
func (c *conn) consumeAllowed(cmd string, k groupKey) bool {
	if c.auth.principal == nil {
		return true
	}
	if err := contract.ValidateTopic(k.topic); err != nil {
		c.replyErr(contract.CodeBadRequest, err)
		return false
	}
	if contract.ValidCheckpointName(k.group) != nil {
		c.replyf("ERR %s group name %q: want 1-200 characters of [A-Za-z0-9_.-], not starting with '.'", contract.CodeBadRequest, k.group)
		return false
	}
	return c.allowed(cmd, contract.ActionConsume, k.topic, k.group)
}

// fetch: FETCH <topic> <group> <max> <wait-ms> [from=<offset>] [mode=shared|exclusive]
func (c *conn) fetch(rest []byte) {
	a, ok := c.parseFetch(rest)
	if !ok || !c.consumeAllowed("FETCH", a.k) {
		return
	}
	limit, from, k := a.limit, a.from, a.k
	wait := time.Duration(min(a.waitMS, c.s.groups.MaxWait().Milliseconds())) * time.Millisecond
	h, held := c.sessions[k]
	if held && a.mode != "" && h.mode != "" && h.mode != a.mode {
		c.replyErr(contract.CodeGroupMode, fmt.Errorf("%w: group %s of topic %s is %s; mode=%s was asked (a group's mode is fixed by its first use; fetch without mode to join it as it is)",
			groups.ErrGroupMode, k.group, k.topic, h.mode, a.mode))
		return
	}
	if !held {
		s, err := c.s.groups.AcquireMode(k.topic, k.group, a.mode)
		if err != nil {
			c.replyErr(errCode(err), err)
			return
		}
		h = heldGroup{session: s}
		c.sessions[k] = h
	}
	session := h.session
	var (
		b   groups.Batch
		err error
	)
	if from >= 0 {
		// The client resumes where it expects to (a lost reply) or finds
		// its position deleted by retention: ERR OFFSET_EXPIRED.
		err = c.s.groups.Seek(k.topic, k.group, session, from)
	}
	if err == nil {
		b, err = c.s.groups.Fetch(c.s.ctx, k.topic, k.group, session, limit, wait)
	}
	if err != nil {
		if errors.Is(err, groups.ErrSessionExpired) || !held {
			// Lost the group (expired lease), or the first fetch failed:
			// the next FETCH starts a new session.
			_, _ = c.s.groups.Release(k.topic, k.group, session)
			delete(c.sessions, k)
		}
		if errors.Is(err, context.Canceled) {
			err = errors.New("shutting down")
		}
		c.replyErr(errCode(err), err)
		return
	}
	// The entries' bytes go back to the in-flight budget once the reply is
	// written (to the socket, or to the write buffer for its tail).
	defer b.Release()
	h.mode = contract.GroupExclusive
	if b.Shared {
		h.mode = contract.GroupShared
	}
	c.sessions[k] = h
	// MSGX lines with the delivery count only for a FETCH that asked for
	// a shared group (mode=shared): other clients keep reading MSG.
	msgx := a.mode == contract.GroupShared && b.Shared
	// The wait is over: the reply's writes get the whole write timeout.
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	for i, e := range b.Entries {
		if msgx {
			c.w.WriteString("MSGX ")
			c.w.WriteString(strconv.FormatInt(e.Offset, 10))
			c.w.WriteString(" deliveries=")
			var n uint32
			if i < len(b.Deliveries) {
				n = b.Deliveries[i]
			}
			c.w.WriteString(strconv.FormatUint(uint64(n), 10))
		} else {
			c.w.WriteString("MSG ")
			c.w.WriteString(strconv.FormatInt(e.Offset, 10))
		}
		c.w.WriteByte(' ')
		c.w.Write(singleLine(e.Payload))
		c.w.WriteByte('\n')
	}
	c.replyf("END %d", len(b.Entries))
}

// singleLine returns p without line breaks: the encoder stores compact JSON,
// so this only matters for records written by other tools.
func singleLine(p []byte) []byte {
	if !bytes.ContainsAny(p, "\r\n") {
		return p
	}
	var buf bytes.Buffer
	if json.Compact(&buf, p) == nil && !bytes.ContainsAny(buf.Bytes(), "\r\n") {
		return buf.Bytes()
	}
	return bytes.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, p)
}

// ack: ACK <topic> <group> <offset>
func (c *conn) ack(rest []byte) {
	f := strings.Fields(string(rest))
	if len(f) != 3 {
		c.replyf("ERR %s usage: ACK <topic> <group> <offset>", contract.CodeBadRequest)
		return
	}
	off, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || off < 0 {
		c.replyf("ERR %s offset must be an integer >= 0", contract.CodeBadRequest)
		return
	}
	k := groupKey{f[0], f[1]}
	if !c.consumeAllowed("ACK", k) {
		return
	}
	h, ok := c.sessions[k]
	if !ok {
		c.replyf("ERR %s this connection has not fetched group %s of topic %s", contract.CodeNotDelivered, oneLine(k.group), oneLine(k.topic))
		return
	}
	next, err := c.s.groups.Ack(k.topic, k.group, h.session, off)
	if err != nil {
		if errors.Is(err, groups.ErrSessionExpired) {
			delete(c.sessions, k)
		}
		c.replyErr(errCode(err), err)
		return
	}
	c.replyf("ACKED %d", next)
}

// MaxOffsetsPerLine caps the offsets of one ACKX or NACKX line, as the
// HTTP ack and nack cap their "offsets".
const MaxOffsetsPerLine = 10000

// offsetsArgs are the arguments of ACKX and NACKX.
type offsetsArgs struct {
	k          groupKey
	offsets    []int64
	retryAfter time.Duration // NACKX's retry-after=; 0 without one
}

// parseOffsets parses the arguments of ACKX (nack false) or NACKX:
// <topic> <group> then the attributes offsets= (required: 1 to
// MaxOffsetsPerLine offsets, integers >= 0, separated by commas) and,
// for NACKX, retry-after= (a duration such as 30s or a number of
// seconds, 0..86400), each once, in any order, values percent-encoded.
// Anything else is answered ERR BAD_REQUEST.
func (c *conn) parseOffsets(rest []byte, nack bool) (offsetsArgs, bool) {
	cmd, usage := "ACKX", "usage: ACKX <topic> <group> offsets=<offset>[,<offset>...]"
	if nack {
		cmd, usage = "NACKX", "usage: NACKX <topic> <group> offsets=<offset>[,<offset>...] [retry-after=<30s|seconds>]"
	}
	bad := func(format string, args ...any) (offsetsArgs, bool) {
		c.replyf("ERR %s %s; %s", contract.CodeBadRequest, fmt.Sprintf(format, args...), usage)
		return offsetsArgs{}, false
	}
	f := strings.Fields(string(rest))
	if len(f) < 3 {
		return bad("too few arguments")
	}
	a := offsetsArgs{k: groupKey{f[0], f[1]}}
	var haveOffsets, haveRetry bool
	for _, tok := range f[2:] {
		name, val, err := decodeAttribute(tok)
		if err != nil {
			return bad("%v", err)
		}
		switch {
		case name == "offsets" && !haveOffsets:
			haveOffsets = true
			if a.offsets, err = parseOffsetList(val); err != nil {
				return bad("%v", err)
			}
		case name == "retry-after" && nack && !haveRetry:
			haveRetry = true
			if a.retryAfter, err = parseRetryAfter(val); err != nil {
				return bad("%v", err)
			}
		case name == "offsets" || name == "retry-after" && nack:
			return bad("attribute %s given twice", name)
		default:
			knows := "offsets"
			if nack {
				knows = "offsets and retry-after"
			}
			return bad("unknown attribute %q (%s knows %s)", truncate(name, 32), cmd, knows)
		}
	}
	if !haveOffsets {
		return bad("offsets= is required")
	}
	return a, true
}

// parseOffsetList parses "3,5,9": 1 to MaxOffsetsPerLine decimal
// integers >= 0 separated by single commas (repeats are allowed and count
// once).
func parseOffsetList(v string) ([]int64, error) {
	if v == "" {
		return nil, errors.New("offsets= is empty: give 1 or more offsets separated by commas")
	}
	if n := strings.Count(v, ",") + 1; n > MaxOffsetsPerLine {
		return nil, fmt.Errorf("offsets= has %d offsets, over %d per line", n, MaxOffsetsPerLine)
	}
	parts := strings.Split(v, ",")
	offs := make([]int64, 0, len(parts))
	for _, p := range parts {
		o, err := strconv.ParseInt(p, 10, 64)
		if err != nil || p == "" || strings.Trim(p, "0123456789") != "" {
			return nil, fmt.Errorf("offsets=: %q is not an offset (integers >= 0 separated by commas)", truncate(p, 32))
		}
		offs = append(offs, o)
	}
	return offs, nil
}

// parseRetryAfter reads NACKX's retry-after= with the HTTP nack's rule
// (dispatcher.ParseRetryAfter): a duration such as 30s or 1m30s (capped
// at 24h), or a number of seconds 0..86400.
func parseRetryAfter(v string) (time.Duration, error) {
	raw := []byte(strconv.Quote(v))
	if v != "" && strings.Trim(v, "0123456789.") == "" && strings.Count(v, ".") <= 1 && v[0] != '.' && v[len(v)-1] != '.' {
		raw = []byte(v) // a number of seconds
	}
	d, err := dispatcher.ParseRetryAfter(raw)
	if err != nil {
		return 0, fmt.Errorf("retry-after=%s: want a duration >= 0 such as 30s, or a number of seconds 0..86400", truncate(v, 32))
	}
	return d, nil
}

// sharedSession returns the session this connection holds on k for ACKX
// or NACKX, or answers ERR NOT_DELIVERED when it has not fetched k.
func (c *conn) sharedSession(k groupKey) (string, bool) {
	h, ok := c.sessions[k]
	if !ok {
		c.replyf("ERR %s this connection has not fetched group %s of topic %s", contract.CodeNotDelivered, oneLine(k.group), oneLine(k.topic))
		return "", false
	}
	return h.session, true
}

// offsetsFailed answers an ACKX or NACKX error; a lost session is
// forgotten, so that the next FETCH starts a new one.
func (c *conn) offsetsFailed(k groupKey, err error) {
	if errors.Is(err, groups.ErrSessionExpired) {
		delete(c.sessions, k)
	}
	c.replyErr(errCode(err), err)
}

// ackX: ACKX <topic> <group> offsets=<offset>[,<offset>...]
func (c *conn) ackX(rest []byte) {
	a, ok := c.parseOffsets(rest, false)
	if !ok || !c.consumeAllowed("ACKX", a.k) {
		return
	}
	session, ok := c.sharedSession(a.k)
	if !ok {
		return
	}
	res, err := c.s.groups.AckOffsets(a.k.topic, a.k.group, session, a.offsets)
	if err != nil {
		c.offsetsFailed(a.k, err)
		return
	}
	c.replyf("ACKED %d acked=%d already=%d", res.Committed, res.Acked, res.Already)
}

// nackX: NACKX <topic> <group> offsets=<offset>[,<offset>...] [retry-after=<d>]
func (c *conn) nackX(rest []byte) {
	a, ok := c.parseOffsets(rest, true)
	if !ok || !c.consumeAllowed("NACKX", a.k) {
		return
	}
	session, ok := c.sharedSession(a.k)
	if !ok {
		return
	}
	res, err := c.s.groups.Nack(a.k.topic, a.k.group, session, a.offsets, a.retryAfter)
	if err != nil {
		c.offsetsFailed(a.k, err)
		return
	}
	c.replyf("NACKED %d nacked=%d already=%d", res.Committed, res.Nacked, res.Already)
}

// status: STATUS [topic]
func (c *conn) status(rest []byte) {
	f := strings.Fields(string(rest))
	var list []*topicqueue.TopicQueue
	switch len(f) {
	case 0:
		if c.auth.principal == nil {
			list = c.s.reg.List()
			break
		}
		// Only the topics the principal may read.
		for _, q := range c.s.reg.List() {
			if contract.Authorize(c.auth.ctx, contract.ActionRead, q.Name(), "") == nil {
				list = append(list, q)
			}
		}
	case 1:
		if err := contract.ValidateTopic(f[0]); err != nil {
			c.replyErr(contract.CodeBadRequest, err)
			return
		}
		if !c.allowed("STATUS", contract.ActionRead, f[0], "") {
			return
		}
		q, ok := c.s.reg.Get(f[0])
		if !ok {
			c.replyf("ERR %s topic %q does not exist", contract.CodeNotFound, f[0])
			return
		}
		list = append(list, q)
	default:
		c.replyf("ERR %s usage: STATUS [topic]", contract.CodeBadRequest)
		return
	}
	for _, q := range list {
		st := q.Stats()
		c.replyf("TOPIC %s next=%d segments=%d bytes=%d start=%d incarnation=%s",
			st.Topic, st.NextOffset, st.Segments, st.Bytes, st.StartOffset, orDash(q.Incarnation()))
		for _, g := range c.s.groups.Groups(q.Name()) {
			// Groups are shown to whom may consume as them (with auth on).
			if contract.Authorize(c.auth.ctx, contract.ActionConsume, g.Topic, g.Group) != nil {
				continue
			}
			if g.Mode == contract.GroupShared {
				// Exclusive groups keep the line they always had.
				c.replyf("GROUP %s %s committed=%d held=%t mode=shared sessions=%d in-flight=%d",
					g.Topic, g.Group, g.Committed, g.Held, g.Sessions, g.InFlight)
				continue
			}
			c.replyf("GROUP %s %s committed=%d held=%t", g.Topic, g.Group, g.Committed, g.Held)
		}
	}
	c.replyf("END %d", len(list))
}

// orDash returns s, or "-" when it is empty (a topic written before
// incarnation ids existed has none), so a reply line keeps its fields.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// releaseAll releases every group the connection holds: their next consumer
// starts at the committed offset (the log-queue study: redelivery after disconnect).
func (c *conn) releaseAll() {
	for k, h := range c.sessions {
		if _, err := c.s.groups.Release(k.topic, k.group, h.session); err != nil {
			c.log.Warn("release group on disconnect", zap.String("topic", k.topic), zap.String("group", k.group), zap.Error(err))
		}
	}
	clear(c.sessions)
}

// errCode maps an error to its ERR code with the broker's one table
// (contract.Classify): the same code the HTTP API would answer.
func errCode(err error) string { return contract.Classify(err).Code }
