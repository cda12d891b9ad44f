package lineproto

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// Pipelining (see the package documentation). A connection has two
// goroutines. The reader (conn.serve) reads and checks the lines in order;
// a PUB or PUBID takes a slot, is handed to its topic's writer without
// waiting (topicqueue.Registry.PublishMessagesNotify), and its slot joins
// the queue; a line refused before that gets its ERR reply in its slot.
// The replier writes the slots' replies in queue order, waiting for each
// publish to reach its ack level, and flushes when it would otherwise
// wait. Any other line is a barrier: the reader waits until the replier
// has written and flushed every earlier reply (drain), then runs it and
// writes its reply itself, as before pipelining existed.

// slot is one pipelined line.
type slot struct {
	p *pipeline
	// reply is the reply the reader wrote (an ERR line, or OK AUTH),
	// when pub is false.
	reply replyBuf
	// pub: a publish was handed to the log; the replier answers its
	// outcome (out, err) once done is set.
	pub      bool
	level    contract.AckLevel
	deadline time.Time // the publish is answered ERR TIMEOUT after it
	held     int64     // bytes taken from Options.Budget until done
	out      [1]topicqueue.Published
	err      error
	done     atomic.Bool
	notify   func(error) // complete, bound once
}

// pipeline is a connection's pipelined lines, between its reader and its
// replier.
type pipeline struct {
	budget *contract.Budget
	max    int // Options.MaxPipeline
	made   int // slots made so far (reader only), at most max
	// queue holds the lines in order for the replier, and drainMark.
	queue chan *slot
	// free holds the slots the replier answered; with the slots in the
	// queue and in the reader's hands there are at most max.
	free chan *slot
	// wake (for the replier) and completed (for the reader waiting for
	// budget) get a value, if they have none, when a publish completes.
	wake, completed chan struct{}
	// drained: the replier reached drainMark, every earlier reply is
	// flushed and the reader may write.
	drained chan struct{}
	// dead is closed, and broken set, when writing a reply failed.
	dead   chan struct{}
	broken atomic.Bool
	exited chan struct{} // closed when the replier returns
	// pubs counts the publishes handed to the log and not completed.
	pubs  atomic.Int64
	timer pubTimer
}

// drainMark in the queue asks the replier to flush and signal drained.
var drainMark = new(slot)

func (p *pipeline) init(o Options) {
	p.budget, p.max = o.Budget, o.MaxPipeline
	p.queue = make(chan *slot, o.MaxPipeline+1) // +1: drainMark
	p.free = make(chan *slot, o.MaxPipeline)
	p.wake = make(chan struct{}, 1)
	p.completed = make(chan struct{}, 1)
	p.drained = make(chan struct{})
	p.dead = make(chan struct{})
	p.exited = make(chan struct{})
}

func (p *pipeline) newSlot() *slot {
	s := &slot{p: p}
	s.notify = s.complete
	return s
}

// complete is the publish's callback (PublishMessagesNotify's done): it
// may run on the topic's writer goroutine, so it only records the outcome
// and wakes the replier and the reader. A slot whose publish timed out
// is no longer the replier's: its late outcome only gives the bytes back.
func (s *slot) complete(err error) {
	p := s.p
	s.err = err
	p.budget.Release(s.held)
	p.pubs.Add(-1)
	s.done.Store(true)
	signal(p.wake)
	signal(p.completed)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// reset makes s ready for another line (the replier, after its reply).
func (s *slot) reset() {
	if cap(s.reply) > 4<<10 {
		s.reply = nil
	}
	s.reply = s.reply[:0]
	s.pub, s.held, s.err = false, 0, nil
	s.out = [1]topicqueue.Published{}
	s.done.Store(false)
}

// takeSlot returns a slot for the next line; it waits while max lines are
// unanswered (the connection is then not read: TCP pushes back on the
// client). nil: a reply could not be written, the connection is over.
func (c *conn) takeSlot() *slot {
	p := &c.pipe
	select {
	case s := <-p.free:
		return s
	default:
	}
	if p.made < p.max {
		p.made++
		return p.newSlot()
	}
	select {
	case s := <-p.free:
		return s
	case <-p.dead:
		return nil
	}
}

// pipelined serves a PUB or PUBID line: its reply, whatever it is, is
// written by the replier in line order. false: the connection is over.
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
	c.pipe.queue <- s
	if closeConn {
		if c.drain() {
			c.closeGracefully()
		}
		return false
	}
	return true
}

// drain waits until every reply queued so far is written and flushed;
// then the reader may write to c.w until it queues the next slot. false
// when a reply could not be written.
func (c *conn) drain() bool {
	if c.pipe.made == 0 {
		return true // no line was ever pipelined: the replier never wrote
	}
	c.pipe.queue <- drainMark
	<-c.pipe.drained
	return !c.pipe.broken.Load()
}

// stopPipeline ends the replier once it has answered every queued line
// (each publish gets its real outcome, or ERR TIMEOUT), and releases the
// publish timer. Run by the reader when the connection ends.
func (c *conn) stopPipeline() {
	close(c.pipe.queue)
	<-c.pipe.exited
	c.pipe.timer.release()
}

// reserve takes n bytes for a publish from Options.Budget and returns
// what it took. When they do not fit, it waits for a publish of this
// connection to complete; with none outstanding it takes nothing and the
// publish goes ahead, as an unpipelined PUB always did.
func (c *conn) reserve(n int64) int64 {
	p := &c.pipe
	if p.budget == nil {
		return 0
	}
	for !p.budget.TryAcquire(n) {
		if p.pubs.Load() == 0 {
			return 0
		}
		select {
		case <-p.completed:
		case <-p.dead:
			return 0
		case <-c.s.ctx.Done():
			return 0
		}
	}
	return n
}

// replier writes the replies of the queued lines in order (see above).
func (c *conn) replier() {
	p := &c.pipe
	defer close(p.exited)
	r := replierState{c: c, timer: time.NewTimer(time.Hour)}
	r.timer.Stop()
	for {
		s, ok := r.next()
		switch {
		case !ok:
			r.flush()
			return
		case s == drainMark:
			r.flush()
			p.drained <- struct{}{}
			continue
		case s.pub && !s.done.Load():
			r.flush() // the client gets what is ready while we wait
			if !r.await(s) {
				// Outcome unknown (as an HTTP publish timing out): the
				// slot stays with its publish, a new one replaces it.
				r.begin()
				c.writeErr(errCode(context.DeadlineExceeded), context.DeadlineExceeded)
				p.free <- p.newSlot()
				continue
			}
		}
		r.begin()
		c.writeReply(s)
		s.reset()
		p.free <- s
	}
}

// replierState is the replier's own state.
type replierState struct {
	c     *conn
	timer *time.Timer // one per connection: the oldest publish's deadline
	dirty bool        // replies written to c.w since the last flush
}

// next returns the next queued line, flushing first when there is none
// yet (once per burst of replies). ok false: the queue is closed.
func (r *replierState) next() (*slot, bool) {
	select {
	case s, ok := <-r.c.pipe.queue:
		return s, ok
	default:
	}
	r.flush()
	s, ok := <-r.c.pipe.queue
	return s, ok
}

// begin starts a reply: the first one of a burst sets the write deadline
// (a burst over the write buffer is written while it is built).
func (r *replierState) begin() {
	if !r.dirty {
		r.dirty = true
		_ = r.c.nc.SetWriteDeadline(time.Now().Add(r.c.s.opts.WriteTimeout))
	}
}

// flush sends the replies written since the last flush. A write that
// fails ends the connection: the reader stops reading, and the replies
// still to come are dropped by c.w (its error sticks).
func (r *replierState) flush() {
	if !r.dirty {
		return
	}
	r.dirty = false
	c := r.c
	if c.pipe.broken.Load() {
		return
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	if err := c.w.Flush(); err != nil {
		c.log.Debug("connection write failed", zap.Error(err))
		c.pipe.broken.Store(true)
		close(c.pipe.dead)
		// Ends the reader's wait for a line; it checks broken after
		// setting its own deadline (see serve).
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// await waits until s's publish completes or its deadline passes (false).
func (r *replierState) await(s *slot) bool {
	d := time.Until(s.deadline)
	if d <= 0 {
		return s.done.Load()
	}
	r.timer.Reset(d)
	defer r.timer.Stop()
	for !s.done.Load() {
		select {
		case <-r.c.pipe.wake:
		case <-r.timer.C:
			return s.done.Load()
		}
	}
	return true
}

// writeReply writes s's reply: the reader's, or its publish's outcome.
func (c *conn) writeReply(s *slot) {
	switch {
	case !s.pub:
		_, _ = c.w.Write(s.reply)
	case s.err != nil:
		c.writeErr(errCode(s.err), s.err)
	default:
		_, _ = c.w.Write(appendOK(c.w.AvailableBuffer(), s.level, s.out[0]))
	}
}

// appendOK appends PUB's and PUBID's reply: "OK <offset> <LEVEL>", or
// "OK - ACCEPTED" (the log-queue study: an ACCEPTED offset is not final),
// then " DUPLICATE" when the message was one, and "\n".
func appendOK(b []byte, level contract.AckLevel, r topicqueue.Published) []byte {
	b = append(b, "OK "...)
	if level == contract.Accepted {
		b = append(b, '-')
	} else {
		b = strconv.AppendInt(b, r.Offset, 10)
	}
	b = append(append(b, ' '), level.String()...)
	if r.Duplicate {
		b = append(b, " DUPLICATE"...)
	}
	return append(b, '\n')
}

// writeErr writes "ERR <CODE> <text>" to c.w (the replier).
func (c *conn) writeErr(code string, err error) {
	_, _ = fmt.Fprintf(c.w, "ERR %s %s\n", code, oneLine(err.Error()))
}

// replyWriter is where the reader writes a reply: c.w, or the slot of a
// pipelined line.
type replyWriter interface {
	io.Writer
	io.StringWriter
	io.ByteWriter
}

// replyBuf is a reply built by the reader for a pipelined line.
type replyBuf []byte

func (b *replyBuf) Write(p []byte) (int, error) {
	*b = append(*b, p...)
	return len(p), nil
}

func (b *replyBuf) WriteString(s string) (int, error) {
	*b = append(*b, s...)
	return len(s), nil
}

func (b *replyBuf) WriteByte(x byte) error {
	*b = append(*b, x)
	return nil
}

// pubTimer bounds the part of a publish that runs on the reader (creating
// the topic, waiting for a PUBID's id that another publish is committing,
// a duplicate's wait for its first message) by Options.PublishTimeout:
// one context and one timer per connection, armed for each PUB, instead
// of a context and a timer per line.
type pubTimer struct {
	parent context.Context // the principal's context it derives from
	ctx    context.Context
	cancel context.CancelCauseFunc
	t      *time.Timer
}

// arm returns the context of one publish, ended with the cause
// context.DeadlineExceeded after d.
func (p *pubTimer) arm(parent context.Context, d time.Duration) context.Context {
	if p.ctx != nil && p.parent == parent {
		p.t.Reset(d)
		return p.ctx
	}
	p.release()
	ctx, cancel := context.WithCancelCause(parent)
	p.parent, p.ctx, p.cancel = parent, ctx, cancel
	p.t = time.AfterFunc(d, func() { cancel(context.DeadlineExceeded) })
	return ctx
}

// disarm stops the timer after the publish call; when it had fired, the
// next arm makes a new context.
func (p *pubTimer) disarm() {
	if !p.t.Stop() {
		p.ctx = nil
	}
}

// release ends the context and the timer (a new principal, the end of
// the connection).
func (p *pubTimer) release() {
	if p.cancel != nil {
		p.t.Stop()
		p.cancel(nil)
	}
	p.parent, p.ctx, p.cancel, p.t = nil, nil, nil, nil
}

// timedOut maps an error of a publish armed with ctx: cancelled by the
// timer is context.DeadlineExceeded (ERR TIMEOUT, as before).
func timedOut(ctx context.Context, err error) error {
	if errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
