package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/topicqueue"
)

// startSilent starts a server with the given shutdown timeout and opens a
// TCP connection to it that sends nothing, returned once the server has
// accepted it.
func startSilent(t *testing.T, shutdown time.Duration) (*Server, net.Conn) {
	t.Helper()
	s := New(Options{Addr: "127.0.0.1:0", ShutdownTimeout: shutdown}, nil, nil, zaptest.NewLogger(t))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for deadline := time.Now().Add(10 * time.Second); s.conns.silentN.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the connection")
		}
		time.Sleep(time.Millisecond)
	}
	return s, c
}

// A connection that never sends a request does not hold the stop:
// http.Server.Shutdown alone waits 5 s for it, past a 2 s shutdown
// timeout, and Stop would fail with the deadline.
func TestStopClosesConnectionsThatSentNothing(t *testing.T) {
	s, c := startSilent(t, 2*time.Second)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop with a connection that sent nothing: %v", err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the silent connection after Stop: read %d bytes, %v; want it closed", n, err)
	}
}

// While Stop waits for a request in flight, a connection that sent
// nothing is closed at once (not after net/http's 5 s), and the request in
// flight is still answered.
func TestStopClosesSilentConnectionsWhileWaiting(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	s := New(Options{Addr: "127.0.0.1:0", ShutdownTimeout: 30 * time.Second}, nil, nil, zaptest.NewLogger(t),
		slowRoute{entered: entered, release: release})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	answered := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + s.Addr() + "/slow")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
		}
		answered <- err
	}()
	<-entered
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); s.conns.silentN.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the connection")
		}
		time.Sleep(time.Millisecond)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	_ = c.SetReadDeadline(time.Now().Add(4 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the silent connection while Stop waits: read %d bytes, %v; want it closed", n, err)
	}
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	if err := <-answered; err != nil {
		t.Errorf("the request in flight during Stop: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Stop: %v", err)
	}
}

// slowRoute's GET /slow says it has begun, then answers 200 once release
// is closed.
type slowRoute struct{ entered, release chan struct{} }

func (r slowRoute) Register(m *mux.Router) {
	m.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		close(r.entered)
		<-r.release
		w.WriteHeader(http.StatusOK)
	}).Methods(http.MethodGet)
}

// A publish whose client sent the headers and part of the body, then
// stalled, is cut uploadGrace after the stop began: the stop succeeds
// within a 5 s shutdown-timeout (net/http alone waits for the 30 s read
// timeout, past it), and nothing of it is stored.
func TestStopCutsAStalledUpload(t *testing.T) {
	a := newAPI(t, Options{}, topicqueue.Options{})
	s := New(Options{Addr: "127.0.0.1:0", ShutdownTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second}, a.reg, nil, zaptest.NewLogger(t))
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"topic\":"); err != nil {
		t.Fatal(err)
	}
	// Wait until the handler is receiving the body.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.conns.mu.Lock()
		reading := 0
		for _, ci := range s.conns.m {
			if ci.reading.Load() {
				reading++
			}
		}
		s.conns.mu.Unlock()
		if reading == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the publish never started receiving its body")
		}
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop with a stalled upload: %v", err)
	}
	if l := a.reg.List(); len(l) != 0 {
		t.Errorf("a cut publish created topic %s", l[0].Name())
	}
}
