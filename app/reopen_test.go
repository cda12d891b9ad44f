package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// reopen posts /topics/{topic}/reopen and decodes the JSON answer.
func reopen(t *testing.T, base, topic string) (int, map[string]any) {
	t.Helper()
	return postJSON(t, base+"/topics/"+topic+"/reopen", nil)
}

// TestReopenFailedTopic: a topic failed by an injected ENOSPC (a full
// MemFS, the disk guard off) or EIO (an fsync of .mmm or .idx) answers 503
// TOPIC_FAILED naming the cause; POST /topics/{t}/reopen — after 404 for an
// unknown topic, 409 TOPIC_NOT_FAILED for a healthy one — brings it back
// at its pre-failure high watermark without a restart: every acknowledged
// message is intact, nothing refused is visible, publishes work again, and
// the topic's dispatcher and a consumer-group session from before the
// failure go on delivering in order.
func TestReopenFailedTopic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause string
		fault func(mem *vfs.MemFS, fired *atomic.Int64)
		clear func(mem *vfs.MemFS)
	}{
		{"ENOSPC", "ENOSPC",
			func(mem *vfs.MemFS, _ *atomic.Int64) { mem.SetCapacity(1) }, // less than used: every growing write fails
			func(mem *vfs.MemFS) { mem.SetCapacity(0) }},
		{"EIO on segment fsync", "EIO",
			func(mem *vfs.MemFS, fired *atomic.Int64) {
				mem.SetHook(failOn(vfs.OpSync, "re.orders", storage.SegmentExt, syscall.EIO, false, fired))
			},
			func(mem *vfs.MemFS) { mem.SetHook(nil) }},
		{"EIO on index fsync", "EIO",
			func(mem *vfs.MemFS, fired *atomic.Int64) {
				mem.SetHook(failOn(vfs.OpSync, "re.orders", storage.IndexExt, syscall.EIO, false, fired))
			},
			func(mem *vfs.MemFS) { mem.SetHook(nil) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const topic, other = "re.orders", "re.other"
			mem := vfs.NewMem()
			cons := newConsumer(t)
			cfg := testConfig(t, memRoot)
			// The write itself meets the full disk: the guard off, and
			// preallocation off (a write into preallocated zeros needs no
			// free space).
			config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.MinFreeBytes, st.Preallocate = 0, 0 })
			a, base := startBroker(t, cfg, onMem(mem),
				provideDispatcher(dispatcher.New("re-dispatcher", cons.host(t), dispatcher.MustPattern("re.orders"))))
			defer a.RequireStop()

			var acked []int
			for i := range 5 {
				st, out := publishAt(t, base, topic, map[string]any{"n": i}, "")
				require.Equal(t, 200, st, out)
				acked = append(acked, i)
			}
			st, out := publishAt(t, base, other, map[string]any{"n": 0}, "")
			require.Equal(t, 200, st, out)
			require.Len(t, cons.waitFor(t, 5), 5)
			sess, msgs := groupFetch(t, base, topic, "g", "")
			require.Len(t, msgs, 5)
			groupAck(t, base, topic, "g", sess, 4)

			var fired atomic.Int64
			tc.fault(mem, &fired)
			for i, lvl := range []string{"", "written", "accepted"} {
				st, out = publishAt(t, base, topic, map[string]any{"n": 100 + i}, lvl)
				requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)
				assert.Contains(t, out["error"], "("+tc.cause+")", "the cause is named")
			}
			tc.clear(mem)

			// The answers of reopen.
			st, out = reopen(t, base, "re.unknown")
			requireNACK(t, st, out, http.StatusNotFound, contract.CodeNotFound)
			st, out = reopen(t, base, other)
			requireNACK(t, st, out, http.StatusConflict, contract.CodeTopicNotFailed)
			st, out = reopen(t, base, "bad..name")
			requireNACK(t, st, out, http.StatusBadRequest, contract.CodeBadRequest)
			st, out = reopen(t, base, topic)
			require.Equal(t, http.StatusOK, st, out)
			assert.Equal(t, map[string]any{"topic": topic, "highWatermark": float64(5), "reopened": true}, out)
			st, out = reopen(t, base, topic)
			requireNACK(t, st, out, http.StatusConflict, contract.CodeTopicNotFailed)

			// Exactly the acknowledged messages; writes work again.
			assert.EqualValues(t, 5, requireAcked(t, base, topic, acked))
			row, _ := topicRow(t, base, topic)
			assert.Empty(t, row.Failed)
			for i := 5; i < 8; i++ {
				st, out = publishAt(t, base, topic, map[string]any{"n": i}, "")
				require.Equal(t, 200, st, out)
				require.EqualValues(t, i, out["offset"])
				acked = append(acked, i)
			}
			assert.EqualValues(t, 8, requireAcked(t, base, topic, acked))
			// The dispatcher and the group session go on, in order.
			got := cons.waitFor(t, 8)
			for i, r := range got {
				assert.EqualValues(t, i, r.Offset)
				assert.Equal(t, map[string]any{"n": float64(i)}, r.Body["content"])
			}
			_, msgs = groupFetch(t, base, topic, "g", sess)
			require.Len(t, msgs, 3, "the session fetches what was published after the reopen")
			assert.EqualValues(t, 5, msgs[0].Offset)
		})
	}
}

type fetched struct {
	Offset  int64           `json:"offset"`
	Message json.RawMessage `json:"message"`
}

// groupFetch fetches up to 100 messages of group g without waiting; it
// returns the session id and the messages.
func groupFetch(t *testing.T, base, topic, group, session string) (string, []fetched) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/topics/"+topic+"/groups/"+group+"/fetch?max=100&wait=0", nil)
	require.NoError(t, err)
	if session != "" {
		req.Header.Set("mmmq-session", session)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "fetch: %s", b)
	var out struct{ Messages []fetched }
	require.NoError(t, json.Unmarshal(b, &out))
	return resp.Header.Get("mmmq-session"), out.Messages
}

// groupAck acknowledges group g through offset.
func groupAck(t *testing.T, base, topic, group, session string, offset int64) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/topics/"+topic+"/groups/"+group+"/ack",
		strings.NewReader(fmt.Sprintf(`{"offset":%d}`, offset)))
	require.NoError(t, err)
	req.Header.Set("mmmq-session", session)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "ack: %s", b)
}
