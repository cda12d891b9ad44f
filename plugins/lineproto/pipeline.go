package lineproto

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/tracing"
)

// Pipelining and the reply path (see the package documentation). A
// connection has two goroutines, in the shape of nats-server's client
// read loop and its flusher:
//
//   - The reader (conn.serve) reads whatever has arrived into
//     its read buffer and serves every complete line in it, in order. Each
//     PUB or PUBID takes a slot in the connection's reply queue and, once
//     checked, joins the read's batch: one pubGroup per run of lines to one
//     topic at one ack level. A line refused before that gets its ERR
//     reply in its slot at once. At the end of the read (and before the
//     reader waits for anything) the batch is handed out: one
//     PublishMessagesNotify per group, so all the PUBs of one read to one
//     topic are one append with one completion.
//   - The flusher (conn.flusher) writes the replies that are ready at the
//     head of the queue, all of them in one write. It sleeps until the head
//     becomes ready: a group's completion wakes it only when it made the
//     head ready and the flusher is asleep, so a topic writer wakes each
//     waiting connection at most once per group commit, and the reader's
//     ready replies (ERR lines) wake it once per read.
//
// Any other line is a barrier: the reader hands the batch out, waits until
// the flusher has written every earlier reply (drain), then runs the line
// and writes its reply itself, through c.w, while the flusher is idle.

// slot is one pipelined line in the reply queue. Its fields are the
// reader's until the slot is queued; after that they change under
// pipeline.mu only, and the flusher reads them once done is set (or, when
// the deadline passed first, only pub, level and deadline).
type slot struct {
	// reply is the reply the reader wrote (an ERR line), when pub is false.
	reply replyBuf
	// pub: the line's message joined a pubGroup; its outcome (out, err)
	// is the reply once done is set.
	pub      bool
	level    contract.AckLevel
	deadline time.Time // the publish is answered ERR TIMEOUT after it
	out      topicqueue.Published
	err      error
	done     bool
	// abandoned: answered ERR TIMEOUT; the slot stays with its group and
	// is never reused.
	abandoned bool
	// span is the line's publish span (tracing on), ended by complete;
	// start is when the line joined its group.
	span  tracing.Span
	start time.Time
}

// reset makes s ready for another line.
func (s *slot) reset() {
	if cap(s.reply) > 4<<10 {
		s.reply = nil
	}
	s.reply = s.reply[:0]
	s.pub, s.err, s.done = false, nil, false
	s.out = topicqueue.Published{}
}

// pubGroup is one append: consecutive PUB and PUBID lines of one read to
// one topic at one ack level, in line order (msgs[i] is slots[i]'s
// message, holds[i] the bytes it took from Options.Budget), handed to the
// topic's writer by one PublishMessagesNotify and completed by one call of
// notify.
type pubGroup struct {
	p      *pipeline
	topic  string
	level  contract.AckLevel
	slots  []*slot
	msgs   []topicqueue.Message
	holds  []int64
	out    []topicqueue.Published
	notify func(error) // complete, bound once
}

func (g *pubGroup) add(s *slot, m topicqueue.Message, held int64) {
	g.slots = append(g.slots, s)
	g.msgs = append(g.msgs, m)
	g.holds = append(g.holds, held)
}

// reset empties g for reuse.
func (g *pubGroup) reset() {
	clear(g.slots)
	clear(g.msgs)
	g.slots, g.msgs, g.holds, g.out = g.slots[:0], g.msgs[:0], g.holds[:0], g.out[:0]
	g.topic = ""
}

// complete is the group's PublishMessagesNotify callback. It may run on
// the topic's writer goroutine, so it only records the outcome, gives the
// budget back, and wakes the flusher (when the head became ready and it
// sleeps) and the reader (when it waits for room).
func (g *pubGroup) complete(err error) {
	p := g.p
	var held int64
	for _, h := range g.holds {
		held += h
	}
	p.budget.Release(held)
	p.mu.Lock()
	for i, s := range g.slots {
		s.err = err
		if err == nil {
			s.out = g.out[i]
		}
		s.done = true
		if s.span.On() {
			off := int64(-1)
			if err == nil {
				off = s.out.Offset
			}
			s.span.EndPublish(off, g.level, time.Since(s.start), s.out.Duplicate, false, err)
			s.span = tracing.Span{}
		}
	}
	p.pubs -= len(g.slots)
	wakeFlusher := p.wakeLocked()
	wakeReader := p.readerWaits
	p.readerWaits = false
	g.reset()
	p.groups = append(p.groups, g)
	p.mu.Unlock()
	if wakeFlusher {
		signal(p.wake)
	}
	if wakeReader {
		signal(p.room)
	}
}

// pipeline is a connection's reply queue, between its reader and its
// flusher.
type pipeline struct {
	budget  *contract.Budget
	max     int // Options.MaxPipeline
	timeout time.Duration

	mu sync.Mutex
	// queue holds the unanswered lines' slots in line order.
	queue  []*slot
	free   []*slot     // answered slots, for reuse
	groups []*pubGroup // completed groups, for reuse
	// unanswered counts the lines taken and not answered: the slots in
	// queue and the one the reader is serving; at most max.
	unanswered int
	// pubs counts the messages handed to topic writers and not completed.
	pubs int
	// flusherAsleep: the flusher waits on wake; whoever makes the head
	// ready clears it and signals.
	flusherAsleep bool
	// writing: the flusher is writing replies it took from queue.
	writing bool
	// readerWaits: the reader waits on room (for a slot, or for a
	// publish to complete to free budget).
	readerWaits bool
	drainReq    bool // the reader waits on drained
	closed      bool // the reader is done: the flusher returns once queue is empty
	// timerArmed: deadline fires at armedFor, a queued publish's
	// deadline; the flusher moves it earlier when the head's is earlier.
	timerArmed bool
	armedFor   time.Time
	deadline   *time.Timer

	wake, room chan struct{} // buffered(1)
	drained    chan struct{} // buffered(1)
	// dead is closed, and broken set, when writing replies failed.
	dead   chan struct{}
	broken atomic.Bool
	exited chan struct{} // closed when the flusher returns
	timer  pubTimer

	// The reader's own: the read's groups not yet handed out, in the
	// order they were started, and the stored messages they point into.
	pending []*pubGroup
	arena   []byte
}

func (p *pipeline) init(o Options) {
	p.budget, p.max, p.timeout = o.Budget, o.MaxPipeline, o.PublishTimeout
	p.wake = make(chan struct{}, 1)
	p.room = make(chan struct{}, 1)
	p.drained = make(chan struct{}, 1)
	p.dead = make(chan struct{})
	p.exited = make(chan struct{})
	p.deadline = time.AfterFunc(time.Hour, p.deadlinePassed)
	p.deadline.Stop()
}

// armLocked sets the deadline timer to fire at t. p.mu is held.
func (p *pipeline) armLocked(t time.Time) {
	p.timerArmed, p.armedFor = true, t
	p.deadline.Reset(time.Until(t))
}

// deadlinePassed wakes the flusher to answer ERR TIMEOUT (the deadline
// timer's function).
func (p *pipeline) deadlinePassed() {
	p.mu.Lock()
	p.timerArmed = false
	p.wakeFlusherUnlock()
}

// wakeFlusherUnlock, called with p.mu held, unlocks it and wakes the
// flusher if it sleeps (it then finds what changed under the lock).
func (p *pipeline) wakeFlusherUnlock() {
	wake := p.flusherAsleep
	p.flusherAsleep = false
	p.mu.Unlock()
	if wake {
		signal(p.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// takeSlot returns a slot for the next line; while max lines are
// unanswered it hands the read's batch out and waits (the connection is
// then not read: TCP pushes back on the client). nil: a reply could not
// be written, the connection is over.
func (c *conn) takeSlot() *slot {
	p := &c.pipe
	p.mu.Lock()
	for p.unanswered >= p.max {
		if len(p.pending) > 0 {
			p.mu.Unlock()
			c.handOut()
			p.mu.Lock()
			continue
		}
		if !p.waitRoomLocked(nil) {
			return nil
		}
		p.mu.Lock()
	}
	p.unanswered++
	var s *slot
	if n := len(p.free); n > 0 {
		s = p.free[n-1]
		p.free[n-1] = nil
		p.free = p.free[:n-1]
	} else {
		s = new(slot)
	}
	p.mu.Unlock()
	return s
}

// enqueue puts the served line's slot at the end of the reply queue: a
// reply the reader wrote is ready now, a publish when its group completes
// (or when its group was refused, refuse).
func (p *pipeline) enqueue(s *slot) {
	p.mu.Lock()
	if !s.pub {
		s.done = true
	}
	p.queue = append(p.queue, s)
	if s.pub && !p.timerArmed {
		p.armLocked(s.deadline)
	}
	p.mu.Unlock()
}

// wakeLocked reports whether the flusher must be signalled: it sleeps and
// the head of the queue is ready; it is then marked awake. p.mu is held.
func (p *pipeline) wakeLocked() bool {
	if !p.flusherAsleep || len(p.queue) == 0 || !p.queue[0].done {
		return false
	}
	p.flusherAsleep = false
	return true
}

// kick wakes the flusher when the head of the queue is ready and it
// sleeps: once per read for the replies the reader wrote.
func (p *pipeline) kick() {
	p.mu.Lock()
	wake := p.wakeLocked()
	p.mu.Unlock()
	if wake {
		signal(p.wake)
	}
}

// group returns the read's open group for topic at level: the last one
// started for topic when it has that level, else a new one (a topic's
// groups are handed out in the order they were started, so its lines keep
// their order).
func (c *conn) group(topic string, level contract.AckLevel) *pubGroup {
	p := &c.pipe
	for i := len(p.pending) - 1; i >= 0; i-- {
		if g := p.pending[i]; g.topic == topic {
			if g.level == level {
				return g
			}
			break
		}
	}
	g := c.newGroup(topic, level)
	p.pending = append(p.pending, g)
	return g
}

// handOut hands the read's groups to their topics' writers, in the order
// they were started.
func (c *conn) handOut() {
	p := &c.pipe
	for i, g := range p.pending {
		p.pending[i] = nil
		c.submit(g)
	}
	p.pending = p.pending[:0]
}

// submit hands g to its topic's writer without waiting for its level.
// PublishMessagesNotify creates the topic when needed, and anew when it is
// deleted under this publish; it queues the messages before it returns,
// so one connection's groups to a topic get offsets in hand-out order.
// The call is bounded by Options.PublishTimeout (creating the topic,
// waiting for a PUBID's id that another publish is committing), not by
// the server's context: a publish in progress during shutdown still gets
// its real answer. A group of several messages that is refused before
// anything was queued (a stored message over the log's record limit, a
// full queue) is handed out again one message at a time, so that each
// line gets its own answer, as if it had been sent alone.
func (c *conn) submit(g *pubGroup) {
	p := &c.pipe
	n := len(g.slots)
	if cap(g.out) < n {
		g.out = make([]topicqueue.Published, n)
	}
	g.out = g.out[:n]
	clear(g.out)
	p.mu.Lock()
	p.pubs += n
	p.mu.Unlock()
	ctx := p.timer.arm(c.auth.ctx, p.timeout)
	_, err := c.s.reg.PublishMessagesNotify(ctx, g.topic, g.msgs, g.level, g.out, g.notify)
	p.timer.disarm()
	if err == nil {
		return // g is its publish's until complete
	}
	// Refused before anything was queued: g.notify is never called.
	err = timedOut(ctx, err)
	p.mu.Lock()
	p.pubs -= n
	p.mu.Unlock()
	if n == 1 {
		p.budget.Release(g.holds[0])
		c.refuse(g.slots[0], err)
	} else {
		for i := range n {
			one := c.newGroup(g.topic, g.level)
			one.add(g.slots[i], g.msgs[i], g.holds[i])
			c.submit(one)
		}
	}
	g.reset()
	p.mu.Lock()
	p.groups = append(p.groups, g)
	p.mu.Unlock()
}

// newGroup returns an empty group outside the read's batch.
func (c *conn) newGroup(topic string, level contract.AckLevel) *pubGroup {
	p := &c.pipe
	p.mu.Lock()
	var g *pubGroup
	if n := len(p.groups); n > 0 {
		g = p.groups[n-1]
		p.groups[n-1] = nil
		p.groups = p.groups[:n-1]
	}
	p.mu.Unlock()
	if g == nil {
		g = &pubGroup{p: p}
		g.notify = g.complete
	}
	g.topic, g.level = topic, level
	return g
}

// refuse answers a queued publish slot with err (its publish was refused).
func (c *conn) refuse(s *slot, err error) {
	p := &c.pipe
	p.mu.Lock()
	s.reply = appendErr(s.reply[:0], errCode(err), err)
	s.pub, s.done = false, true
	wake := p.wakeLocked()
	p.mu.Unlock()
	if wake {
		signal(p.wake)
	}
}

// drain hands the read's batch out and waits until every reply queued so
// far is written; then the reader may write to c.w until it queues the
// next slot. false when a reply could not be written.
func (c *conn) drain() bool {
	c.handOut()
	p := &c.pipe
	p.mu.Lock()
	if p.unanswered == 0 && !p.writing {
		p.mu.Unlock()
		return !p.broken.Load()
	}
	p.drainReq = true
	p.wakeFlusherUnlock()
	select {
	case <-p.drained:
	case <-p.dead:
	}
	return !p.broken.Load()
}

// stopPipeline hands out what the reader still holds and ends the flusher
// once it has answered every queued line (each publish gets its real
// outcome, or ERR TIMEOUT); then it releases the timers. Run by the reader
// when the connection ends.
func (c *conn) stopPipeline() {
	c.handOut()
	p := &c.pipe
	p.mu.Lock()
	p.closed = true
	p.wakeFlusherUnlock()
	<-p.exited
	p.deadline.Stop()
	p.timer.release()
}

// reserve takes n bytes for a publish from Options.Budget and returns
// what it took. When they do not fit, it hands the read's batch out and
// waits for a publish of this connection to complete; with none
// outstanding it takes nothing and the publish goes ahead, as an
// unpipelined PUB always did.
func (c *conn) reserve(n int64) int64 {
	p := &c.pipe
	if p.budget == nil {
		return 0
	}
	for !p.budget.TryAcquire(n) {
		if len(p.pending) > 0 {
			c.handOut()
			continue
		}
		p.mu.Lock()
		if p.pubs == 0 {
			p.mu.Unlock()
			return 0
		}
		if !p.waitRoomLocked(c.s.ctx.Done()) {
			return 0
		}
	}
	return n
}

// waitRoomLocked, called by the reader with p.mu held, waits for a
// completion to make room: it marks the reader as waiting, wakes the
// flusher when the head is ready and it sleeps, and unlocks p.mu (it
// returns with it unlocked). False when the connection died or done (nil:
// never) closed first.
func (p *pipeline) waitRoomLocked(done <-chan struct{}) bool {
	p.readerWaits = true
	wake := p.wakeLocked()
	p.mu.Unlock()
	if wake {
		signal(p.wake)
	}
	select {
	case <-p.room:
		return true
	case <-p.dead:
		return false
	case <-done:
		return false
	}
}

// flusher writes the ready replies at the head of the queue, all of them
// in one write, until the reader is done and the queue is empty (see
// above).
func (c *conn) flusher() {
	p := &c.pipe
	defer close(p.exited)
	var (
		batch []*slot
		wbuf  []byte
	)
	for {
		p.mu.Lock()
		p.writing = false
		n := p.readyLocked()
		if n == 0 {
			switch {
			case len(p.queue) == 0 && p.closed:
				p.mu.Unlock()
				return
			case len(p.queue) == 0 && p.drainReq:
				p.drainReq = false
				p.mu.Unlock()
				signal(p.drained)
				continue
			}
			if len(p.queue) > 0 && (!p.timerArmed || p.armedFor.After(p.queue[0].deadline)) {
				p.armLocked(p.queue[0].deadline)
			}
			p.flusherAsleep = true
			p.mu.Unlock()
			<-p.wake
			continue
		}
		batch = append(batch[:0], p.queue[:n]...)
		rest := copy(p.queue, p.queue[n:])
		clear(p.queue[rest:])
		p.queue = p.queue[:rest]
		p.writing = true
		p.mu.Unlock()

		wbuf = wbuf[:0]
		for _, s := range batch {
			wbuf = appendReply(wbuf, s)
		}
		p.mu.Lock()
		// Answered once their replies are built: while they are written
		// the reader may take max more lines.
		p.unanswered -= n
		for i, s := range batch {
			if !s.abandoned {
				s.reset()
				p.free = append(p.free, s)
			}
			batch[i] = nil
		}
		wakeReader := p.readerWaits
		p.readerWaits = false
		p.mu.Unlock()
		if wakeReader {
			signal(p.room)
		}
		c.writeReplies(wbuf)
		if cap(wbuf) > keepLineBytes {
			wbuf = nil
		}
	}
}

// readyLocked returns how many slots at the head of the queue can be
// answered now: done, or past their deadline (marked abandoned, answered
// ERR TIMEOUT, outcome unknown as for an HTTP publish timing out).
// p.mu is held.
func (p *pipeline) readyLocked() int {
	var now time.Time
	n := 0
	for _, s := range p.queue {
		if !s.done {
			if now.IsZero() {
				now = time.Now()
			}
			if now.Before(s.deadline) {
				break
			}
			s.abandoned = true
		}
		n++
	}
	return n
}

// writeReplies writes b in one write. A write that fails ends the
// connection: the reader stops reading, and the replies still to come
// are dropped.
func (c *conn) writeReplies(b []byte) {
	p := &c.pipe
	if p.broken.Load() {
		return
	}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.s.opts.WriteTimeout))
	if _, err := c.nc.Write(b); err != nil {
		c.log.Debug("connection write failed", zap.Error(err))
		p.broken.Store(true)
		close(p.dead)
		// Ends the reader's wait for a line; it checks broken after
		// setting its own deadline (see serve).
		_ = c.nc.SetReadDeadline(time.Now())
	}
}

// appendReply appends s's reply: the reader's, its publish's outcome, or
// ERR TIMEOUT for an abandoned slot.
func appendReply(b []byte, s *slot) []byte {
	switch {
	case s.abandoned:
		return appendErr(b, errCode(context.DeadlineExceeded), context.DeadlineExceeded)
	case !s.pub:
		return append(b, s.reply...)
	case s.err != nil:
		return appendErr(b, errCode(s.err), s.err)
	}
	return appendOK(b, s.level, s.out)
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

// appendErr appends "ERR <CODE> <text>\n" with text on one line.
func appendErr(b []byte, code string, err error) []byte {
	b = append(append(append(b, "ERR "...), code...), ' ')
	return append(append(b, oneLine(err.Error())...), '\n')
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
// one context and one timer per connection, armed for each group, instead
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
