package lineproto

import (
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/groups"
)

// waitNoConns waits until every connection handler of e has finished, so
// whatever the server would do with a closed connection's input is done.
// A connection counts once the server has accepted it: answer one request
// on it first.
func (e *testEnv) waitNoConns(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.srv.mu.Lock()
		n := len(e.srv.conns)
		e.srv.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// topicLen is the number of messages stored in topic (0 when it does not
// exist).
func (e *testEnv) topicLen(topic string) int64 {
	q, ok := e.reg.Get(topic)
	if !ok {
		return 0
	}
	return q.HighWatermark()
}

// TestFragmentAtCloseIsNotExecuted: a request without its "\n" followed by
// a full close (a producer killed mid-line) stores nothing.
func TestFragmentAtCloseIsNotExecuted(t *testing.T) {
	for _, frag := range []string{
		`PUB t20 DURABLE 12345`,
		`PUB t20 DURABLE {"amount":100}`,
		`PUB t20 DURABLE {"amount":100}` + "\r", // "\r" alone does not end a line
	} {
		e := start(t, Options{}, groups.Options{})
		c := e.dial(t)
		expectPrefix(t, c.do("STATUS"), "END 0") // the server has taken the connection
		if _, err := io.WriteString(c.nc, frag); err != nil {
			t.Fatal(err)
		}
		c.nc.Close()
		e.waitNoConns(t)
		if n := e.topicLen("t20"); n != 0 {
			t.Fatalf("fragment %q without newline stored %d messages", frag, n)
		}
	}
}

// TestFragmentAtHalfCloseIsNotAnswered: after CloseWrite, the complete lines
// are answered and stored, the trailing fragment is neither stored nor
// answered, and the server closes the connection.
func TestFragmentAtHalfCloseIsNotAnswered(t *testing.T) {
	e := start(t, Options{}, groups.Options{})
	c := e.dial(t)
	if _, err := io.WriteString(c.nc, "PUB t20 DURABLE 1\nPUB t20 DURABLE 2\r\nPUB t20 DURABLE {\"amount\":100}"); err != nil {
		t.Fatal(err)
	}
	if err := c.nc.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if got := c.read(); got != "OK 0 DURABLE" {
		t.Fatalf("first line: %q", got)
	}
	if got := c.read(); got != "OK 1 DURABLE" {
		t.Fatalf("second line (\\r\\n): %q", got)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, err := io.ReadAll(c.r)
	if err != nil || len(rest) != 0 {
		t.Fatalf("after the fragment: %q, %v; want nothing, then EOF", rest, err)
	}
	if n := e.topicLen("t20"); n != 2 {
		t.Fatalf("stored %d messages, want the 2 complete lines", n)
	}
}

// TestFragmentDropIsLogged: the dropped fragment is logged with its size.
func TestFragmentDropIsLogged(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	e := start(t, Options{Logger: zap.New(core)}, groups.Options{})
	c := e.dial(t)
	expectPrefix(t, c.do("STATUS"), "END 0") // the server has taken the connection
	const frag = `PUB t20 DURABLE 12345`
	if _, err := io.WriteString(c.nc, frag); err != nil {
		t.Fatal(err)
	}
	c.nc.Close()
	e.waitNoConns(t)
	found := logs.FilterMessageSnippet("incomplete line").All()
	if len(found) != 1 {
		t.Fatalf("want one log entry about the dropped line, got %v", logs.All())
	}
	if got := found[0].ContextMap()["bytes"]; got != int64(len(frag)) {
		t.Fatalf("logged bytes=%v, want %d", got, len(frag))
	}
}
