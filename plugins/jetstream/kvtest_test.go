package jetstream

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/plugins/jetstream/jstest"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"
)

// kvServer starts an embedded JetStream server on a random loopback port
// with its store in t.TempDir() and shuts it down at the end of the test.
func kvServer(t *testing.T) *server.Server {
	t.Helper()
	return kvServerAt(t, t.TempDir())
}

// kvServerAt is kvServer with the store in dir, so that a test can restart
// a server over the same data (shut the first one down before).
func kvServerAt(t *testing.T, dir string) *server.Server {
	t.Helper()
	return jstest.Start(t, dir, nil)
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

// kvCluster starts n embedded JetStream servers clustered on loopback
// (every one routes to all, on ports picked up front), waits until
// JetStream has a meta leader, and shuts them down at the end of the test.
func kvCluster(t *testing.T, n int) []*server.Server {
	t.Helper()
	ports := make([]int, n)
	routes := make([]string, n)
	for i := range ports {
		ports[i] = kvFreePort(t)
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
	}
	servers := make([]*server.Server, 0, n)
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	})
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("kv-%d", i),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: "kv", Host: "127.0.0.1", Port: ports[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		})
		if err != nil {
			t.Fatalf("new server %d: %v", i, err)
		}
		s.Start()
		servers = append(servers, s)
	}
	for i, s := range servers {
		// A bound for a loaded machine (CI: 2 cores, packages in
		// parallel under -race), not a speed claim.
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatalf("server %d not ready for connections within 30s", i)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !kvHasMetaLeader(servers) {
		if time.Now().After(deadline) {
			t.Fatal("no JetStream meta leader within 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return servers
}

// kvFreePort returns a loopback TCP port that was free a moment ago.
func kvFreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func kvHasMetaLeader(servers []*server.Server) bool {
	for _, s := range servers {
		if s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}
