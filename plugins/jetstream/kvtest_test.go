package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
)

// kvServer starts an embedded JetStream server on a random loopback port
// with its store in t.TempDir() and shuts it down at the end of the test.
func kvServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready for connections within 10s")
	}
	return s
}

// kvConnect opens one client connection ("one node") to s and returns its
// JetStream handle; the connection closes at the end of the test.
func kvConnect(t *testing.T, s *server.Server) js.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(nc.Close)
	j, err := js.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return j
}
