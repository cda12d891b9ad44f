// Package jstest runs an embedded single-node NATS JetStream server for
// tests (the nats-server go.mod pins, in process): the light counterpart
// of jscluster, which runs real server processes to kill.
package jstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Start runs an embedded JetStream server on a random loopback port,
// storing in dir (t.TempDir() when ""), with edit (may be nil) applied to
// its options first, and shuts it down at the end of the test. It fails
// the test when the server does not accept connections within 10 s.
func Start(t testing.TB, dir string, edit func(*server.Options)) *server.Server {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	o := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true}
	if edit != nil {
		edit(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatalf("jstest: new server: %v", err)
	}
	go s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("jstest: embedded NATS server not ready within 30s")
	}
	return s
}
