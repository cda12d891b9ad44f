package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mmmq/mmmq/plugins/jetstream/jstest"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/modules/topicqueue/topicqueuetest"
	"github.com/mmmq/mmmq/plugins/jetstream"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// memBackend is the in-memory fake backend of the matrix
// (topicqueuetest.MemBackend), with the inspector's two reads.
type memBackend struct{ *topicqueuetest.MemBackend }

// backendCase is one storage backend of the matrix the end-to-end test runs
// over: setup configures cfg (and returns the Fx options) for it and
// returns an inspector that looks at what the backend stored from outside
// the broker.
type backendCase struct {
	name  string
	setup func(t *testing.T, cfg *config.Config) ([]fx.Option, backendInspector)
}

// backendInspector reads what a backend stored: the number of messages of
// a topic (its high watermark) and a checkpoint's committed offset.
type backendInspector interface {
	stored(t *testing.T, topic string) int64
	checkpoint(t *testing.T, topic, name string) int64
}

// backends is the backend matrix: the in-memory fake (supplied with
// fx.Decorate) and JetStream on an embedded single-node server (chosen by
// mmmq.broker.storage.backend, as a deployment does).
var backends = []backendCase{
	{"memory", func(t *testing.T, cfg *config.Config) ([]fx.Option, backendInspector) {
		be := memBackend{&topicqueuetest.MemBackend{}}
		return []fx.Option{fx.Decorate(func(topicqueue.Backend) topicqueue.Backend { return be.MemBackend })}, be
	}},
	{"jetstream", func(t *testing.T, cfg *config.Config) ([]fx.Option, backendInspector) {
		jc := jetstream.ConfigSection.Default()
		jc.Servers = startNATS(t)
		jc.Replicas = 1
		config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.Backend = topicqueue.BackendJetStream })
		config.SetSectionValue(cfg, jetstream.ConfigSection, jc)
		b, err := jetstream.Connect(jc, 1<<20, nil, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return nil, jsInspector{b}
	}},
}

func (b memBackend) stored(t *testing.T, topic string) int64 {
	return b.Log(topic).HighWatermark()
}

func (b memBackend) checkpoint(t *testing.T, topic, name string) int64 {
	off, _ := b.Log(topic).CheckpointOffset(name)
	return off
}

// jsInspector reads the JetStream streams and checkpoints through a
// connection of its own: another "broker" on the same cluster.
type jsInspector struct{ b *jetstream.Backend }

func (j jsInspector) stored(t *testing.T, topic string) int64 {
	l, err := j.b.Open(topic, false)
	require.NoError(t, err)
	defer l.Close()
	return l.HighWatermark()
}

func (j jsInspector) checkpoint(t *testing.T, topic, name string) int64 {
	l, err := j.b.Open(topic, false)
	require.NoError(t, err)
	defer l.Close()
	cp, err := l.OpenCheckpoint(name)
	require.NoError(t, err)
	return cp.Offset()
}

// startNATS runs an embedded single-node JetStream server on a random port
// for the test and returns its URL.
func startNATS(t *testing.T) string {
	t.Helper()
	return jstest.Start(t, "", nil).ClientURL()
}

// The whole broker runs on each storage backend of the matrix: HTTP
// publish and read-back, a dispatcher, a consumer group and the line
// protocol all go through topicqueue.Backend and contract.Log alone, and
// nothing is written to the data root.
func TestBackendMatrixEndToEnd(t *testing.T) {
	for _, bc := range backends {
		t.Run(bc.name, func(t *testing.T) { testBackendEndToEnd(t, bc) })
	}
}

func testBackendEndToEnd(t *testing.T, bc backendCase) {
	root := t.TempDir()
	cons := newConsumer(t)
	cfg := testConfig(t, root)
	opts, be := bc.setup(t, cfg)
	lpAddr := freeAddr(t)
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: lpAddr, MaxLineBytes: lineproto.ConfigSection.Default().MaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	a, base := startBroker(t, cfg, append(opts,
		provideDispatcher(dispatcher.New("d", cons.host(t), dispatcher.MustPattern("order.**"))))...)
	defer a.RequireStop()

	for i := 0; i < 3; i++ {
		st, out := publish(t, base, "order.created", map[string]any{"n": i})
		require.Equal(t, 200, st, out)
		require.EqualValues(t, i, out["offset"])
	}
	got := cons.waitFor(t, 3)
	for i, r := range got {
		require.EqualValues(t, i, r.Offset)
		require.Equal(t, map[string]any{"n": float64(i)}, r.Body["content"])
	}
	require.Eventually(t, func() bool { return be.checkpoint(t, "order.created", "d") == 3 },
		5*time.Second, 10*time.Millisecond, "the dispatcher's checkpoint is committed through the backend")

	// Idempotent publish (producer ids: the log's callback path), at
	// DURABLE and ACCEPTED; a retry is answered with the first offset.
	st, out := postMessage(t, base, map[string]any{"topic": "order.ids", "id": "evt-1", "content": 1})
	require.Equal(t, 200, st, out)
	require.EqualValues(t, 0, out["offset"])
	st, out = postMessage(t, base, map[string]any{"topic": "order.ids", "id": "evt-1", "content": 1})
	require.Equal(t, 200, st, out)
	require.Equal(t, true, out["duplicate"], out)
	require.EqualValues(t, 0, out["offset"])
	resp, err := http.Post(base+"/messages?ack=accepted", "application/json", strings.NewReader(`{"topic":"order.ids","id":"evt-2","content":2}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return be.stored(t, "order.ids") == 2 }, 5*time.Second, 10*time.Millisecond)
	cons.waitFor(t, 5) // the dispatcher (order.**) delivers them too

	// HTTP read-back and a consumer group.
	resp, err = http.Get(base + "/topics/order.created/messages?offset=1")
	require.NoError(t, err)
	var page readPage
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.Len(t, page.Messages, 2)
	for i, it := range page.Messages {
		require.EqualValues(t, i+1, it.Offset)
		var m struct {
			Content map[string]any `json:"content"`
		}
		require.NoError(t, json.Unmarshal(it.Message, &m))
		require.Equal(t, map[string]any{"n": float64(i + 1)}, m.Content)
	}
	resp, err = http.Post(base+"/topics/order.created/groups/g/fetch?max=10", "application/json", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	// The line protocol.
	c, err := net.Dial("tcp", lpAddr)
	require.NoError(t, err)
	defer c.Close()
	rd := bufio.NewReader(c)
	fmt.Fprintf(c, "PUB order.created DURABLE {\"n\":3}\n")
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "OK 3 DURABLE\n", line)
	fmt.Fprintf(c, "FETCH order.created g2 10 0\n")
	line, err = rd.ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "MSG 0 "), line)

	require.EqualValues(t, 4, be.stored(t, "order.created"))

	// Reopen is the local log's (it recovers a failed write): refused.
	resp, err = http.Post(base+"/topics/order.created/reopen", "application/json", nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	require.Contains(t, string(body), "cannot reopen a topic")

	ents, err := os.ReadDir(root)
	require.NoError(t, err)
	for _, e := range ents {
		require.False(t, e.IsDir(), "the local backend created %s", e.Name())
	}
}

// mmmq serve with backend jetstream and no NATS server reachable stops at
// startup with one line naming the server.
func TestMainJetStreamUnreachable(t *testing.T) {
	// A free port: nothing listens there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "nats://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	t.Setenv("MMMQ_BROKER_STORAGE_BACKEND", "jetstream")
	t.Setenv("MMMQ_JETSTREAM_SERVERS", url)
	t.Setenv("MMMQ_JETSTREAM_CONNECT_TIMEOUT", "1s")
	code, _, stderr := runMain(t)
	require.Equal(t, 1, code)
	oneFailureLine(t, stderr, "jetstream: connect "+url+": ")
}

// Two brokers over one JetStream server: a producer's retry with the same
// id through the other broker (whose own window has not seen the id) is
// answered like a retry through the first one: the first offset and
// "duplicate": true, and nothing is stored twice. A new id is stored.
func TestJetStreamRetryThroughAnotherBrokerIsDuplicate(t *testing.T) {
	url := startNATS(t)
	var bases []string
	for i := 0; i < 2; i++ {
		cfg := testConfig(t, t.TempDir())
		jc := jetstream.ConfigSection.Default()
		jc.Servers, jc.Replicas = url, 1
		config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.Backend = topicqueue.BackendJetStream })
		config.SetSectionValue(cfg, jetstream.ConfigSection, jc)
		a, base := startBroker(t, cfg)
		defer a.RequireStop()
		bases = append(bases, base)
	}
	// Both brokers have the topic open before the first publish of pay-7
	// (a broker opening a topic learns the ids already in it).
	for i, base := range bases {
		st, out := postID(t, base, "orders.paid", fmt.Sprintf("open-%d", i), i)
		require.Equal(t, 200, st, out)
	}
	st, first := postID(t, bases[0], "orders.paid", "pay-7", map[string]int{"n": 7})
	require.Equal(t, 200, st, first)
	require.Nil(t, first["duplicate"], first)
	for _, base := range []string{bases[1], bases[1], bases[0]} {
		st, retry := postID(t, base, "orders.paid", "pay-7", map[string]int{"n": 7})
		require.Equal(t, 200, st, retry)
		require.Equal(t, true, retry["duplicate"], "a retry through %s: %v", base, retry)
		require.Equal(t, first["offset"], retry["offset"], retry)
	}
	st, other := postID(t, bases[1], "orders.paid", "pay-8", map[string]int{"n": 8})
	require.Equal(t, 200, st, other)
	require.Nil(t, other["duplicate"], other)
	require.EqualValues(t, 3, other["offset"], "nothing was stored for the retries")
}
