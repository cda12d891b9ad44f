package app_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/jetstream"
)

// Two brokers on one JetStream server, each with dispatcher d to one
// consumer: a topic deleted through node a is forgotten by node b (the
// stream-deleted advisory), so that a publish through b creates it anew at
// offset 0 instead of failing (503 until restart before), and the new
// messages are delivered from offset 0 (by whichever node holds the
// lease of (d, topic) now).
func TestJetStreamDeletionSeenByTheOtherNode(t *testing.T) {
	nats := startNATS(t)
	cons := newConsumer(t)
	start := func() string {
		cfg := testConfig(t, t.TempDir())
		jc := jetstream.ConfigSection.Default()
		jc.Servers, jc.Replicas = nats, 1
		config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.Backend = topicqueue.BackendJetStream })
		config.SetSectionValue(cfg, jetstream.ConfigSection, jc)
		a, base := startBroker(t, cfg, provideDispatcher(dispatcher.New("d", cons.host(t), dispatcher.MustPattern("gen.**"))))
		t.Cleanup(a.RequireStop)
		return base
	}
	baseA, baseB := start(), start()

	for i := range 3 {
		st, out := publish(t, baseA, "gen.topic", map[string]any{"gen": 1, "n": i})
		require.Equal(t, 200, st, out)
	}
	cons.waitFor(t, 3)
	require.Eventually(t, func() bool {
		st, _ := call(t, "GET", baseB+"/topics/gen.topic/messages?offset=0", "")
		return st == 200
	}, 10*time.Second, 20*time.Millisecond, "node b never opened the topic created through a")

	st, out := call(t, "DELETE", baseA+"/topics/gen.topic", "")
	require.Equal(t, 200, st, out)

	// Until b has seen the deletion its old log refuses (503); then the
	// publish creates the topic anew.
	var first map[string]any
	require.Eventually(t, func() bool {
		st, first = publish(t, baseB, "gen.topic", map[string]any{"gen": 2, "n": 0})
		return st == 200
	}, 10*time.Second, 50*time.Millisecond, "node b still refuses the deleted topic")
	require.EqualValues(t, 0, first["offset"], first)
	for i := 1; i < 3; i++ {
		st, out := publish(t, baseB, "gen.topic", map[string]any{"gen": 2, "n": i})
		require.Equal(t, 200, st, out)
		require.EqualValues(t, i, out["offset"], out)
	}
	got := cons.waitFor(t, 6)
	var second []received
	for _, r := range got {
		if r.Body["content"].(map[string]any)["gen"] == float64(2) {
			second = append(second, r)
		}
	}
	require.Len(t, second, 3, "%+v", got)
	for i, r := range second {
		require.EqualValues(t, i, r.Offset, "%+v", second)
		require.EqualValues(t, i, r.Body["content"].(map[string]any)["n"])
	}
}
