package crashtest

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

// delivery is one push the consumer received.
type delivery struct {
	Round      int // which broker run sent it (one listener per run)
	Dispatcher string
	Topic      string
	Offset     int64
	Attempt    int
	ID         string
	Body       []byte
}

// consumer records every push, in arrival order, and answers ACK. Each
// broker run gets its own listener (listen), so a delivery is attributed to
// exactly one run even if a dead process's request is read late.
type consumer struct {
	mu   sync.Mutex
	seen []delivery
	// onDeliver, if set, is called (outside mu) before answering.
	onDeliver func(delivery)
}

// listen starts a listener on 127.0.0.1 for round and returns its port and
// a func closing it (bounded).
func (c *consumer) listen(t testing.TB, round int) (port int, closeFn func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, 2<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			off, _ := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
			att, _ := strconv.Atoi(r.Header.Get("mmmq-attempt"))
			d := delivery{
				Round:      round,
				Dispatcher: r.Header.Get("mmmq-consumer-id"),
				Topic:      r.Header.Get("mmmq-topic"),
				Offset:     off,
				Attempt:    att,
				ID:         r.Header.Get("mmmq-message-id"),
				Body:       body,
			}
			c.mu.Lock()
			c.seen = append(c.seen, d)
			c.mu.Unlock()
			if c.onDeliver != nil {
				c.onDeliver(d)
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"acknowledgement":"ACK"}`))
		}),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	var once sync.Once
	closeFn = func() {
		once.Do(func() {
			_ = srv.Close()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Errorf("consumer listener of round %d did not close", round)
			}
		})
	}
	t.Cleanup(closeFn)
	return ln.Addr().(*net.TCPAddr).Port, closeFn
}

// deliveries returns a copy of everything received so far.
func (c *consumer) deliveries() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.seen...)
}
