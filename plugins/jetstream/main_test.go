package jetstream

import (
	"testing"
	"time"

	"github.com/mmmq/mmmq/plugins/jetstream/jstest"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go's async publisher starts this goroutine with its reply
		// subscription; when CleanupPublisher (Log.Close) runs before the
		// goroutine first took the publisher's lock, it waits on a nil
		// channel for ever (a race inside the client, one goroutine per
		// log closed within microseconds of its first ACCEPTED append).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// An ordered consumer whose stream was deleted recreates itself
		// in a loop that holds the lock its Stop takes; Stop marks it
		// closed first, and the loop sees that at its next attempt, up to
		// 10 s later (nats.go's backoff cap). Log.Close runs Stop on a
		// goroutine of its own so as not to wait for it: both end within
		// those 10 s, after the package's last test.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats.go/jetstream.(*orderedConsumer).reset"),
		goleak.IgnoreAnyFunction("github.com/mmmq/mmmq/plugins/jetstream.(*Log).Close.func1"))
}

// startServer runs an embedded single-node JetStream server on a random
// port, stores in t.TempDir and shuts it down at the end of the test.
func startServer(t testing.TB) *server.Server { return startServerWith(t, nil) }

// startServerWith is startServer with edit applied to the options first.
func startServerWith(t testing.TB, edit func(*server.Options)) *server.Server {
	t.Helper()
	return jstest.Start(t, "", edit)
}

// testConfig is the section's defaults pointed at s, one replica.
func testConfig(s *server.Server) Config {
	c := ConfigSection.Default()
	c.Servers = s.ClientURL()
	c.Replicas = 1
	c.RequestTimeout = 2 * time.Second
	c.ConnectTimeout = 2 * time.Second
	return c
}

// connect is a Backend ("a broker") on s, closed at the end of the test.
func connect(t testing.TB, s *server.Server) *Backend { return connectWith(t, testConfig(s)) }

// connectWith is connect with the configuration c.
// connectCluster is connectWith for a cluster that just formed: it may
// not place the replicas yet ("no suitable peers"), so Connect is tried
// again for up to 15 s before the test fails.
func connectCluster(t testing.TB, c Config) *Backend {
	t.Helper()
	var b *Backend
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if b, err = Connect(c, 1<<16, nil, zaptest.NewLogger(t)); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func connectWith(t testing.TB, c Config) *Backend {
	t.Helper()
	b, err := Connect(c, 1<<16, nil, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}
