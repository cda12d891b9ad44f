package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"

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
