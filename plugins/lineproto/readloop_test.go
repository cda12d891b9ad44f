package lineproto

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/groups"
	"github.com/mmmq/mmmq/modules/storage"
)

// countListener wraps the server's listener: every connection it accepts
// counts the server's reads (those that returned data), its writes, and
// the size of the buffer each read was given (the free part of the read
// buffer: the whole buffer when nothing was held).
type countListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*countConn
}

func (l *countListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nc, err
	}
	c := &countConn{Conn: nc}
	l.mu.Lock()
	l.conns = append(l.conns, c)
	l.mu.Unlock()
	return c, nil
}

// last is the connection accepted last.
func (l *countListener) last(t *testing.T) *countConn {
	t.Helper()
	var c *countConn
	waitFor(t, "the connection accepted", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if n := len(l.conns); n > 0 {
			c = l.conns[n-1]
		}
		return c != nil
	})
	return c
}

type countConn struct {
	net.Conn
	reads, writes   atomic.Int64
	lastBuf, maxBuf atomic.Int64
	mu              sync.Mutex
	written         bytes.Buffer // everything the server wrote
}

func (c *countConn) Read(p []byte) (int, error) {
	c.lastBuf.Store(int64(len(p)))
	if int64(len(p)) > c.maxBuf.Load() {
		c.maxBuf.Store(int64(len(p)))
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.reads.Add(1)
	}
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	c.mu.Lock()
	c.written.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// startCounting runs a server whose connections are countConns.
func startCounting(t *testing.T, opts Options, with ...func(*storage.Options)) (*testEnv, *countListener) {
	t.Helper()
	e := newEnv(t, opts, groups.Options{}, with...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countListener{Listener: ln}
	e.srv.serve(cl)
	return e, cl
}

// TestReadLoopOneReadOneWrite: lines that arrive together (one write of
// the client, under the first read buffer's 512 bytes) are served from
// one read, their PUBs to one topic become one append (one group commit),
// and all their replies, a refused line's among them, go back in line
// order in one write.
func TestReadLoopOneReadOneWrite(t *testing.T) {
	e, cl := startCounting(t, Options{})
	c := e.dial(t)
	expectPrefix(t, c.do(`PUB one DURABLE {"n":-1}`), "OK 0 DURABLE") // the topic exists
	sc := cl.last(t)
	reads0, writes0 := sc.reads.Load(), sc.writes.Load()
	batches0 := e.stats(t, "one").Batches

	var burst bytes.Buffer
	var want []string
	off := 1
	for i := range 16 {
		if i == 7 {
			burst.WriteString(`PUB one DURABLE {"n":` + "\n")
			want = append(want, "ERR BAD_REQUEST payload is not valid JSON")
			continue
		}
		fmt.Fprintf(&burst, `PUB one DURABLE {"n":%d}`+"\n", i)
		want = append(want, fmt.Sprintf("OK %d DURABLE", off))
		off++
	}
	if burst.Len() > minReadBytes {
		t.Fatalf("burst of %d bytes: want it under one read buffer", burst.Len())
	}
	if _, err := c.nc.Write(burst.Bytes()); err != nil {
		t.Fatal(err)
	}
	for i, got := range c.readN(len(want)) {
		if !strings.HasPrefix(got, want[i]) {
			t.Fatalf("reply %d %q, want %q", i, got, want[i])
		}
	}
	if n := sc.reads.Load() - reads0; n != 1 {
		t.Errorf("%d reads for one burst, want 1", n)
	}
	if n := sc.writes.Load() - writes0; n != 1 {
		t.Errorf("%d writes for the replies of one read, want 1", n)
	}
	if n := e.stats(t, "one").Batches - batches0; n != 1 {
		t.Errorf("%d group commits for the PUBs of one read, want 1", n)
	}
}

// TestReadLoopLineSplitAcrossReads: a line that arrives in three pieces,
// each in a read of its own, is served once it is complete, and a line
// that ends in the same read as the next one begins is served too.
func TestReadLoopLineSplitAcrossReads(t *testing.T) {
	e, cl := startCounting(t, Options{})
	c := e.dial(t)
	expectPrefix(t, c.do("STATUS"), "END 0")
	sc := cl.last(t)
	pieces := []string{`PUB sp DUR`, `ABLE {"n":`, `1}` + "\n" + `PUB sp DURABLE {"n"`, `:2}` + "\n"}
	for _, p := range pieces {
		reads := sc.reads.Load()
		if _, err := c.nc.Write([]byte(p)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the server to read the piece", func() bool { return sc.reads.Load() > reads })
	}
	expectPrefix(t, c.read(), "OK 0 DURABLE")
	expectPrefix(t, c.read(), "OK 1 DURABLE")
	if got := strings.Join(e.contentsOf(t, "sp"), ","); got != "1,2" {
		t.Fatalf("topic holds %s", got)
	}
}

// TestReadLoopLongLine: with max-line-bytes over the 64 KiB the buffer
// grows to for short lines, a line of exactly max-line-bytes is served
// (the buffer grows for it), a line one byte longer is refused with ERR
// TOO_LARGE and closes the connection; after the long line the read
// buffer goes back to its first size.
func TestReadLoopLongLine(t *testing.T) {
	const maxLine = 200 << 10
	e, cl := startCounting(t, Options{MaxLineBytes: maxLine, MaxRecordBytes: maxLine},
		func(o *storage.Options) { o.MaxRecordBytes = 2 * maxLine })
	c := e.dial(t)
	expectPrefix(t, c.do("STATUS"), "END 0")
	sc := cl.last(t)
	if got := sc.lastBuf.Load(); got != minReadBytes {
		t.Fatalf("first read buffer %d bytes, want %d", got, minReadBytes)
	}
	line := func(n int) string { // a PUB of exactly n bytes
		head := `PUB long DURABLE "`
		return head + strings.Repeat("x", n-len(head)-1) + `"`
	}
	expectPrefix(t, c.do(line(maxLine)), "OK 0 DURABLE")
	if got := sc.maxBuf.Load(); got <= maxReadBytes || got > maxLine+3 {
		t.Fatalf("largest read buffer %d bytes, want over %d and at most %d", got, maxReadBytes, maxLine+3)
	}
	expectPrefix(t, c.do(`PUB long DURABLE {"n":1}`), "OK 1 DURABLE")
	if got := sc.lastBuf.Load(); got != minReadBytes {
		t.Fatalf("read buffer %d bytes after the long line, want %d again", got, minReadBytes)
	}
	expectPrefix(t, c.do(line(maxLine+1)), "ERR TOO_LARGE line is over 204800 bytes")
	c.expectClosed()
	if n := e.topicLen("long"); n != 2 {
		t.Fatalf("topic holds %d messages, want 2", n)
	}
}

// TestReadLoopBufferGrowsAndShrinks: many short lines at once grow the
// read buffer (reads that fill it double it), never past 64 KiB; short
// reads afterwards halve it back to 512 bytes.
func TestReadLoopBufferGrowsAndShrinks(t *testing.T) {
	e, cl := startCounting(t, Options{})
	c := e.dial(t)
	expectPrefix(t, c.do("STATUS"), "END 0")
	sc := cl.last(t)
	const n = 6000
	var burst bytes.Buffer
	for i := range n {
		fmt.Fprintf(&burst, `PUB gs WRITTEN {"n":%d}`+"\n", i)
	}
	wrote := make(chan error, 1)
	go func() { _, err := c.nc.Write(burst.Bytes()); wrote <- err }()
	for i, got := range c.readN(n) {
		if want := fmt.Sprintf("OK %d WRITTEN", i); got != want {
			t.Fatalf("reply %d %q, want %q", i, got, want)
		}
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if got := sc.maxBuf.Load(); got <= minReadBytes || got > maxReadBytes {
		t.Fatalf("largest read buffer %d bytes, want over %d and at most %d", got, minReadBytes, maxReadBytes)
	}
	for i := 0; i < 64 && sc.lastBuf.Load() > minReadBytes; i++ {
		expectPrefix(t, c.do(`PUB gs WRITTEN {"n":-1}`), "OK ")
	}
	if got := sc.lastBuf.Load(); got != minReadBytes {
		t.Fatalf("read buffer %d bytes after 64 short reads, want %d", got, minReadBytes)
	}
}

// TestReadLoopTopicsCommitApart: the PUBs of one read go to two topics;
// the first topic's commit is held while the second's completes. No reply
// is written until the first topic's are ready (replies stay in line
// order), then all of them come, in line order.
func TestReadLoopTopicsCommitApart(t *testing.T) {
	var armed, taken atomic.Bool
	reached, hold := make(chan struct{}), make(chan struct{})
	hooks := &storage.Hooks{AfterSegmentWrite: func() {
		// Not sync.Once: the other topic's commit must not wait for it.
		if armed.Load() && taken.CompareAndSwap(false, true) {
			close(reached)
			<-hold
		}
	}}
	e, cl := startCounting(t, Options{}, func(o *storage.Options) { o.Hooks = hooks })
	var released sync.Once
	release := func() { released.Do(func() { close(hold) }) }
	t.Cleanup(release)
	c := e.dial(t)
	expectPrefix(t, c.do(`PUB slow DURABLE {"n":0}`), "OK 0 DURABLE")
	expectPrefix(t, c.do(`PUB fast DURABLE {"n":0}`), "OK 0 DURABLE")
	sc := cl.last(t)
	writes0 := sc.writes.Load()
	sc.mu.Lock()
	writtenBefore := sc.written.Len()
	sc.mu.Unlock()

	// The first commit from now on is held: slow's or fast's, whichever
	// topic's writer gets there first.
	armed.Store(true)
	burst := `PUB slow DURABLE {"n":1}` + "\n" + `PUB fast DURABLE {"n":1}` + "\n" +
		`PUB slow DURABLE {"n":2}` + "\n" + `PUB fast DURABLE {"n":2}` + "\n"
	if _, err := c.nc.Write([]byte(burst)); err != nil {
		t.Fatal(err)
	}
	<-reached
	held := ""
	waitFor(t, "the topic not held durable", func() bool {
		switch {
		case e.topicLen("fast") == 3:
			held = "slow"
		case e.topicLen("slow") == 3:
			held = "fast"
		}
		return held != ""
	})
	// Replies stay in line order: while slow (line 1) is held nothing may
	// be written; while fast (line 2) is, at most line 1's reply.
	allowed := map[string]string{"slow": "", "fast": "OK 1 DURABLE\n"}[held]
	time.Sleep(20 * time.Millisecond) // give a wrong early write the time to happen
	sc.mu.Lock()
	early := sc.written.String()[writtenBefore:]
	sc.mu.Unlock()
	if early != "" && early != allowed {
		t.Fatalf("with topic %s held, the server wrote %q; want at most %q", held, early, allowed)
	}
	release()
	for i, want := range []string{"OK 1 DURABLE", "OK 1 DURABLE", "OK 2 DURABLE", "OK 2 DURABLE"} {
		if got := c.read(); got != want {
			t.Fatalf("reply %d %q, want %q", i, got, want)
		}
	}
	if n := sc.writes.Load() - writes0; held == "slow" && n != 1 {
		t.Errorf("%d writes for the replies, want 1 (every one waited for the first)", n)
	}
}

// stats is the topic's storage figures.
func (e *testEnv) stats(t *testing.T, topic string) storage.Stats {
	t.Helper()
	q, ok := e.reg.Get(topic)
	if !ok {
		t.Fatalf("topic %s does not exist", topic)
	}
	return q.Stats()
}

// TestReadLoopRefusedRunAnsweredLineByLine: a run of PUBs of one read to
// one topic is one append; when the log refuses it as a whole (here one
// stored message is over the log's record limit, though its payload is
// within the protocol's), each line is handed out again alone and gets its
// own answer: the over-long one ERR TOO_LARGE, the others their offsets.
func TestReadLoopRefusedRunAnsweredLineByLine(t *testing.T) {
	e := start(t, Options{MaxLineBytes: 8192, MaxRecordBytes: 4096}, groups.Options{}) // the log's limit: 4096
	c := e.dial(t)
	big := `PUB rr DURABLE "` + strings.Repeat("x", 4050) + `"`
	burst := big + "\n" + `PUB rr DURABLE {"n":1}` + "\n" + `PUB rr DURABLE {"n":2}` + "\n"
	if _, err := c.nc.Write([]byte(burst)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"ERR TOO_LARGE ", "OK 0 DURABLE", "OK 1 DURABLE"} {
		if got := c.read(); !strings.HasPrefix(got, want) {
			t.Fatalf("reply %d %q, want %q", i, got, want)
		}
	}
	if got := strings.Join(e.contentsOf(t, "rr"), ","); got != "1,2" {
		t.Fatalf("topic holds %s", got)
	}
}
