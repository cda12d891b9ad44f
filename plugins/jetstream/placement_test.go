package jetstream

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A single server that is not clustered cannot hold more than one replica:
// the broker refuses to start, naming the key, even when the buckets were
// made earlier with one replica (JetStream would otherwise accept them and
// refuse every new topic).
func TestReplicasOverUnclusteredServerStopsStartup(t *testing.T) {
	s := startServer(t)
	connect(t, s) // the buckets, one replica
	c := testConfig(s)
	c.Replicas = 3
	b, err := Connect(c, 1<<16, nil, nil)
	if err == nil {
		_ = b.Close()
	}
	require.ErrorContains(t, err, "mmmq.jetstream.replicas is 3")
}
