package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
)

// TestConnectionsOverTheCapAreRefusedAtOnce: with server.max-connections 2
// and two connections open, a third is answered 503 UNAVAILABLE (JSON,
// Retry-After: 1) and closed without waiting; once one of the two closes, a
// new connection is served again.
func TestConnectionsOverTheCapAreRefusedAtOnce(t *testing.T) {
	s := New(Options{Addr: "127.0.0.1:0", MaxConns: 2}, nil, nil, zaptest.NewLogger(t))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	healthz := func(c net.Conn) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+"/healthz", nil)
		if err := req.Write(c); err != nil {
			return nil, err
		}
		return http.ReadResponse(bufio.NewReader(c), req)
	}
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if resp, err := healthz(c); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("connection %d: %v %v", i, resp, err)
		}
		held = append(held, c)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := healthz(c)
	if err != nil {
		t.Fatalf("third connection: no answer: %v", err)
	}
	var body struct{ Acknowledgement, Code, Error string }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	c.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
		body.Acknowledgement != "NACK" || body.Code != contract.CodeUnavailable {
		t.Fatalf("third connection: HTTP %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	held[0].Close()
	for { // the server frees the place when it sees the close
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := healthz(c)
		c.Close()
		if err == nil && resp.StatusCode == http.StatusOK {
			break
		}
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("after a close: %v %v", resp, err)
		}
	}
}

// TestAutoMaxConns: a quarter of the open-file limit, at least 16; 1024
// when the limit is unknown.
func TestAutoMaxConns(t *testing.T) {
	for limit, want := range map[uint64]int{0: 1024, 20: 16, 256: 64, 20000: 5000} {
		if got := AutoMaxConns(limit); got != want {
			t.Errorf("AutoMaxConns(%d) = %d, want %d", limit, got, want)
		}
	}
}

// rawExchange sends parts on a new connection to addr, one after another,
// then reads the whole answer until the server closes, as curl does for an
// answer that has no length (net/http's own 431 and 400 have none), and
// returns it; a read that ends in an error (a reset) instead of the end of
// the stream is returned as "read: …". Round-3 item 8: the client must get
// the whole answer, not a reset, after it sent everything — which needs
// the half-close: without it, the first end the client sees is the reset
// net/http's close sends half a second later over the unread request.
func rawExchange(t *testing.T, addr string, parts ...string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for i, p := range parts {
		if i > 0 {
			time.Sleep(100 * time.Millisecond) // a client still sending when the server answers
		}
		if _, err := io.WriteString(c, p); err != nil {
			return "write: " + err.Error()
		}
	}
	answer, err := io.ReadAll(c)
	if err != nil {
		return fmt.Sprintf("read: %v (after %q)", err, answer)
	}
	return string(answer)
}

// Behind the connection cap, requests net/http refuses itself still get
// their answer: an oversized header or URL 431, a malformed request 400,
// each after the client sent all of it. The cap's wrapper used to hide the
// TCP connection's CloseWrite, so net/http closed at once and the client
// got a reset instead.
func TestRefusedRequestsAreAnsweredBehindTheCap(t *testing.T) {
	s := New(Options{Addr: "127.0.0.1:0", MaxConns: 64}, nil, nil, zaptest.NewLogger(t))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	big := strings.Repeat("a", 70<<10)
	// Each request is sent in two parts, the second after the server has
	// answered: a client still sending, as a browser or curl with a large
	// request is.
	for name, tc := range map[string]struct{ req, rest, want string }{
		"header": {"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + big, "more\r\n\r\n", "HTTP/1.1 431"},
		"url":    {"GET /healthz?q=" + strings.Repeat("b", 100<<10), " HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 431"},
		"bad":    {"NOT A REQUEST\r\nHost: x\r\n\r\n", big, "HTTP/1.1 400"},
	} {
		for i := range 5 {
			if got := rawExchange(t, s.Addr(), tc.req, tc.rest); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("%s, try %d: %q, want %q", name, i, got, tc.want)
			}
		}
	}
}

// A connection over the cap whose client is still sending its request (a
// large body) when the 503 is written reads the 503 instead of a reset:
// the refusal reads what follows before closing.
func TestCapRefusalIsReadAfterAWholeRequest(t *testing.T) {
	s := New(Options{Addr: "127.0.0.1:0", MaxConns: 1}, nil, nil, zaptest.NewLogger(t))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	hold, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+"/healthz", nil)
	if err := req.Write(hold); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(hold), req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("held connection: %v %v", resp, err)
	}
	body := strings.Repeat("c", 200<<10)
	for i := range 5 {
		got := rawExchange(t, s.Addr(), fmt.Sprintf("POST /messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(body)), body)
		if !strings.HasPrefix(got, "HTTP/1.1 503") {
			t.Fatalf("try %d: %q, want the 503", i, got)
		}
	}
}
