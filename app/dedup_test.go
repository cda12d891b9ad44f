package app_test

import (
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// postID publishes content with producer id to topic and returns the
// status and the decoded answer.
func postID(t *testing.T, base, topic, id string, content any) (int, map[string]any) {
	t.Helper()
	return postMessage(t, base, map[string]any{"topic": topic, "content": content, "id": id})
}

// TestIdempotentPublishEndToEnd: with the default configuration (a 2m
// window), a producer's retry with the same id is answered as a duplicate
// of the first offset, before and after a restart, nothing is stored
// twice, and /metrics counts the duplicates and the ids rebuilt from the
// log after the restart.
func TestIdempotentPublishEndToEnd(t *testing.T) {
	root := t.TempDir()
	cfg := testConfig(t, root)
	require.Equal(t, 2*time.Minute, config.SectionValue(cfg, topicqueue.DedupSection).Window, "the default window")
	a, base := startBroker(t, cfg)
	st, first := postID(t, base, "orders", "order-1", map[string]int{"n": 1})
	require.Equal(t, 200, st, "%v", first)
	st, retry := postID(t, base, "orders", "order-1", map[string]int{"n": 1})
	require.Equal(t, 200, st, "%v", retry)
	assert.Equal(t, true, retry["duplicate"])
	assert.Equal(t, first["offset"], retry["offset"])
	a.RequireStop()

	a, base = startBroker(t, cfg) // a restart: the window is rebuilt from the log
	defer a.RequireStop()
	st, again := postID(t, base, "orders", "order-1", map[string]int{"n": 1})
	require.Equal(t, 200, st, "%v", again)
	assert.Equal(t, true, again["duplicate"])
	assert.Equal(t, first["offset"], again["offset"])
	st, other := postID(t, base, "orders", "order-2", map[string]int{"n": 2})
	require.Equal(t, 200, st)
	assert.Nil(t, other["duplicate"])
	assert.EqualValues(t, 1, other["offset"])

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(raw), "mmmq_dedup_duplicates_total 1\n", "one duplicate since this start")
	assert.Contains(t, string(raw), "mmmq_dedup_rebuilt_ids_total 1\n", "order-1 taken from the log")
	assert.Contains(t, string(raw), "mmmq_dedup_ids 2\n")
	assert.Contains(t, string(raw), "mmmq_dedup_evicted_total 0\n")
}
