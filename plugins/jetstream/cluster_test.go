package jetstream

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/contract"
)

// startCluster runs three embedded JetStream servers clustered on
// loopback (ports picked free) and returns them once JetStream has a meta
// leader.
func startCluster(t *testing.T) []*server.Server {
	t.Helper()
	ports := make([]int, 3)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		require.NoError(t, ln.Close())
	}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	servers := make([]*server.Server, 3)
	for i := range servers {
		servers[i] = startServerWith(t, func(o *server.Options) {
			o.ServerName = fmt.Sprintf("n%d", i)
			o.Cluster = server.ClusterOpts{Name: "mmmq-test", Host: "127.0.0.1", Port: ports[i]}
			o.Routes = routes
		})
	}
	require.Eventually(t, func() bool {
		for _, s := range servers {
			if !s.JetStreamIsCurrent() || s.JetStreamIsLeader() && s.NumRoutes() < 2 {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "JetStream cluster not formed")
	return servers
}

// On a three-server cluster with three replicas: appends through brokers
// connected to different servers get contiguous offsets, each broker's
// high watermark and Notify follow the other's appends, and after the
// stream leader's server stops the stream serves again (a new leader)
// with every acknowledged message.
func TestClusterReplicas3(t *testing.T) {
	servers := startCluster(t)
	cfg := func(s *server.Server) Config {
		c := testConfig(s)
		c.Replicas = 3
		return c
	}
	a := connectCluster(t, cfg(servers[0]))
	b := connectWith(t, cfg(servers[1]))

	la := open(t, a, "cluster.t")
	lb := open(t, b, "cluster.t")
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		l := la
		if i%2 == 1 {
			l = lb
		}
		off, err := l.Append(ctx, msg(i), contract.Durable)
		require.NoError(t, err)
		require.EqualValues(t, i, off)
	}
	first, err := lb.AppendBatch(ctx, [][]byte{msg(10), msg(11)}, contract.Durable)
	require.NoError(t, err)
	require.EqualValues(t, 10, first)
	select {
	case <-la.Notify(11):
	case <-time.After(5 * time.Second):
		t.Fatal("node a did not see node b's batch")
	}

	// More replicas than servers, with the buckets already made (R3): the
	// broker starts (the topics that exist are served), warns naming the
	// key, and a new topic is refused with the same hint.
	core, logs := observer.New(zap.WarnLevel)
	c4 := cfg(servers[2])
	c4.Replicas = 4
	d, err := Connect(c4, 1<<16, nil, zap.New(core))
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	warned := logs.FilterMessageSnippet("mmmq.jetstream.replicas").All()
	require.Len(t, warned, 1, "one warning about the replicas: %v", logs.All())
	_, err = d.Open("cluster.new", true)
	require.ErrorContains(t, err, "mmmq.jetstream.replicas is 4")
	ld, err := d.Open("cluster.t", false)
	require.NoError(t, err, "an existing topic is served")
	require.NoError(t, ld.Close())

	// Stop the stream leader's server (not the ones the brokers use first:
	// their clients reconnect to the others anyway).
	info, err := la.str.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, info.Config.Replicas)
	require.Len(t, info.Cluster.Replicas, 2)
	stopped := false
	for _, s := range servers {
		if s.Name() == info.Cluster.Leader {
			s.Shutdown()
			s.WaitForShutdown()
			stopped = true
		}
	}
	require.True(t, stopped, "leader %q is none of the servers", info.Cluster.Leader)
	var off int64
	require.Eventually(t, func() bool {
		off, err = la.Append(ctx, msg(12), contract.Durable)
		return err == nil
	}, 20*time.Second, 200*time.Millisecond, "no new stream leader: %v", err)
	require.EqualValues(t, 12, off, "offsets stay contiguous across the leader change")
	for i := 0; i <= 12; i++ {
		var p []byte
		require.Eventually(t, func() bool {
			p, err = la.Read(int64(i))
			return err == nil
		}, 10*time.Second, 100*time.Millisecond)
		assert.Equal(t, string(msg(i)), string(p))
	}
}

// The same producer id published through two brokers at the same moment
// (each connected to another server of a three-replica cluster): while the
// first copy is still being replicated, JetStream refuses the second with
// "duplicate message id is in process" (409, error 10158). The broker
// waits and sends it again, so that both answers are the local backend's:
// one stored copy, and the other answered as a duplicate of its offset;
// never an error. Both the asynchronous path (the registry's, for
// publishes with ids) and the synchronous Append are checked.
func TestClusterConcurrentDuplicateIDWaits(t *testing.T) {
	servers := startCluster(t)
	cfg := func(s *server.Server) Config {
		c := testConfig(s)
		c.Replicas = 3
		c.RequestTimeout = 10 * time.Second
		return c
	}
	a := connectCluster(t, cfg(servers[0]))
	b := connectWith(t, cfg(servers[1]))
	a.opts.DedupWindow, b.opts.DedupWindow = 2*time.Minute, 2*time.Minute
	la, lb := open(t, a, "dup.race"), open(t, b, "dup.race")

	type answer struct {
		first int64
		dup   bool
		err   error
	}
	const ids = 300
	answers := make(chan [2]answer, ids)
	for i := 0; i < ids; i++ {
		p := []byte(fmt.Sprintf(`{"topic":{"name":"dup.race"},"content":%d,"id":"race-%d","timestamp":1}`, i, i))
		var got [2]answer
		done := make(chan struct{}, 2)
		for j, l := range []*Log{la, lb} {
			require.NoError(t, l.AppendBatchNotifyDuplicate([][]byte{p}, contract.Durable, func(first int64, dup bool, err error) {
				got[j] = answer{first, dup, err}
				done <- struct{}{}
			}))
		}
		go func() { <-done; <-done; answers <- got }()
	}
	conflicts := 0
	for i := 0; i < ids; i++ {
		var got [2]answer
		select {
		case got = <-answers:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d ids answered", i, ids)
		}
		for _, g := range got {
			if g.err != nil {
				conflicts++
				t.Errorf("an append failed: %v", g.err)
			}
		}
		if got[0].err == nil && got[1].err == nil {
			require.Equal(t, got[0].first, got[1].first, "both copies answer one offset: %+v", got)
			require.True(t, got[0].dup != got[1].dup, "exactly one copy is the duplicate: %+v", got)
		}
	}
	require.Zero(t, conflicts)
	require.EqualValues(t, ids, la.HighWatermark(), "one stored copy per id")

	// Append (a request per message) the same way.
	var wg sync.WaitGroup
	offs := make([][2]int64, 50)
	for i := range offs {
		p := []byte(fmt.Sprintf(`{"topic":{"name":"dup.race"},"content":%d,"id":"sync-%d","timestamp":1}`, i, i))
		for j, l := range []*Log{la, lb} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				off, err := l.Append(context.Background(), p, contract.Durable)
				assert.NoError(t, err)
				offs[i][j] = off
			}()
		}
	}
	wg.Wait()
	for i, o := range offs {
		require.Equal(t, o[0], o[1], "sync-%d: both copies answer one offset", i)
	}
	require.EqualValues(t, ids+len(offs), la.HighWatermark())
}
