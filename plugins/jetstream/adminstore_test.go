package jetstream

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/admin"
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
	servers := startCluster(t)
	c := ConfigSection.Default()
	var urls []string
	for _, s := range servers {
		urls = append(urls, s.ClientURL())
	}
	c.Servers = strings.Join(urls, ",")
	c.RequestTimeout = 2 * time.Second
	c.ConnectTimeout = 2 * time.Second
	b := connectWith(t, c)
	st, err := b.DispatcherStore()
	require.NoError(t, err)
	stop, err := st.(admin.SpecWatcher).Watch(func([]admin.Spec) {})
	require.NoError(t, err)

	// Keep the server the client is not on, so that it reconnects to it.
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

	start := time.Now()
	stop()
	took := time.Since(start)
	t.Logf("stop took %s", took)
	require.Less(t, took, time.Second, "the watch's stop waited on a cluster that cannot answer")
	start = time.Now()
	require.NoError(t, b.Close())
	took = time.Since(start)
	t.Logf("Close took %s", took)
	require.Less(t, took, time.Second, "Close waited on a cluster that cannot answer")
}
