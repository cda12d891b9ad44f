package jetstream

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/admin"
	"github.com/mmmq/mmmq/modules/contract"
)

// Stopping the admin-store watch after NATS nodes died returns at once,
// and so does closing the backend after it: the broker's shutdown does not
// wait on a cluster that cannot answer. Two
// of three servers stop, so the one left (the client reconnects to it) has
// no JetStream meta leader and answers no API request. The bound is the
// point of the test: nats.go's watcher Stop deletes the watch's consumer
// with a request that waits the client's 5 s default for the answer that
// never comes.
func TestSpecWatchStopWithClusterDown(t *testing.T) {
	servers, b := clusterBroker(t)
	st, err := b.DispatcherStore()
	require.NoError(t, err)
	stop, err := st.(admin.SpecWatcher).Watch(func([]admin.Spec) {})
	require.NoError(t, err)
	loseQuorum(t, servers, b)

	returnsAtOnce(t, "the watch's stop", func() error { stop(); return nil })
	returnsAtOnce(t, "Close", b.Close)
}

// returnsAtOnce runs f and fails unless it returns nil within a second:
// a stop that waits on a cluster which cannot answer takes 5 or 10 s
// (nats.go's request timeouts).
func returnsAtOnce(t *testing.T, what string, f func() error) {
	t.Helper()
	start := time.Now()
	require.NoError(t, f())
	took := time.Since(start)
	t.Logf("%s took %s", what, took)
	require.Less(t, took, time.Second, "%s waited on a cluster that cannot answer", what)
}

// Closing a topic's log after NATS nodes died returns at once, and so does
// closing the backend after it (as TestSpecWatchStopWithClusterDown). The
// log's ordered consumer, told of the reconnect, recreates itself with a
// request that the server left cannot answer (up to 10 s per attempt in
// nats.go, under the lock its Stop takes).
func TestLogCloseWithClusterDown(t *testing.T) {
	// Registered first, so run last: after the connection closed, the
	// consumer's reset gives up at its next attempt, after nats.go's
	// backoff (1 s doubling to 10 s); goleak must not see it before.
	t.Cleanup(func() {
		require.Eventually(t, func() bool {
			buf := make([]byte, 1<<20)
			return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "jetstream.(*orderedConsumer).reset")
		}, 15*time.Second, 100*time.Millisecond, "the log's consumer did not end after the connection closed")
	})
	servers, b := clusterBroker(t)
	l, err := b.Open("orders", true)
	require.NoError(t, err)
	_, err = l.Append(context.Background(), []byte(`{"n":1}`), contract.Durable)
	require.NoError(t, err)
	loseQuorum(t, servers, b)
	time.Sleep(500 * time.Millisecond) // the consumer's reset under way

	returnsAtOnce(t, "Log.Close", l.Close)
	returnsAtOnce(t, "Close", b.Close)
}

// clusterBroker is a three-server cluster (startCluster) and a Backend
// on all three, three replicas.
func clusterBroker(t *testing.T) ([]*server.Server, *Backend) {
	t.Helper()
	servers := startCluster(t)
	c := ConfigSection.Default()
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	c.Servers = strings.Join(urls, ",")
	c.RequestTimeout = 2 * time.Second
	c.ConnectTimeout = 2 * time.Second
	b := connectCluster(t, c)
	return servers, b
}

// loseQuorum shuts down two of the three servers, the one b is connected
// to among them, and waits until b has reconnected to the one left, which
// has no JetStream meta leader and answers no API request.
func loseQuorum(t *testing.T, servers []*server.Server, b *Backend) {
	t.Helper()
	keep := 0
	for i, s := range servers {
		if s.ClientURL() != b.nc.ConnectedUrl() {
			keep = i
			break
		}
	}
	for i, s := range servers {
		if i != keep {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	require.Eventually(t, func() bool {
		return b.nc.IsConnected() && b.nc.ConnectedUrl() == servers[keep].ClientURL()
	}, 10*time.Second, 20*time.Millisecond, "the client did not reconnect to the server left")
}
