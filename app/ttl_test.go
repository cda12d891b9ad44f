package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

// TestTTLEndToEnd: messages published over HTTP with a ttl of 1ms are
// never pushed by a dispatcher (its consumer was down until they had
// expired; the checkpoint passes them) nor fetched by a consumer group;
// GET /topics/{t}/messages still returns them with their expiresAt; the
// dispatcher status and mmmq_messages_expired_total count them.
func TestTTLEndToEnd(t *testing.T) {
	const topic = "ttl.t"
	cons := newGatedConsumer(t)
	cfg := testConfig(t, t.TempDir())
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "ttl-d", Host: cons.URL, Patterns: []string{topic}}})
	a, base := startBroker(t, cfg)
	defer a.RequireStop()

	for _, m := range []map[string]any{
		{"topic": topic, "content": 0, "ttl": "1ms"},
		{"topic": topic, "content": 1},
		{"topic": topic, "content": 2, "ttl": "1ms", "key": "k"},
		{"topic": topic, "content": 3, "ttl": "1h", "key": "k"},
	} {
		st, out := postMessage(t, base, m)
		require.Equal(t, 200, st, "%+v", out)
	}
	// A precondition, not an assertion: both short ttls have run out
	// before the consumer answers anything but 503.
	time.Sleep(5 * time.Millisecond)
	cons.up.Store(true)
	require.Eventually(t, func() bool { return fmt.Sprint(cons.offsets()) == "[1 3]" }, 10*time.Second, 5*time.Millisecond,
		"pushed %v, want [1 3]", cons.offsets())

	var st struct {
		Topics []struct {
			Committed int64 `json:"committed"`
			Expired   int64 `json:"expired"`
		} `json:"topics"`
	}
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/mmmq/dispatchers/ttl-d")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&st) == nil && len(st.Topics) == 1 && st.Topics[0].Committed == 4
	}, 10*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 2, st.Topics[0].Expired)

	req, _ := http.NewRequest("POST", base+"/topics/"+topic+"/groups/g/fetch?max=10", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var fetched struct {
		Messages []struct {
			Offset int64 `json:"offset"`
		} `json:"messages"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&fetched))
	resp.Body.Close()
	var got []int64
	for _, m := range fetched.Messages {
		got = append(got, m.Offset)
	}
	assert.Equal(t, []int64{1, 3}, got, "fetched offsets")

	resp, err = http.Get(base + "/topics/" + topic + "/messages")
	require.NoError(t, err)
	var page struct {
		Messages []struct {
			Message map[string]any `json:"message"`
		} `json:"messages"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
	resp.Body.Close()
	require.Len(t, page.Messages, 4, "read-back returns expired messages too")
	for i, hasExp := range []bool{true, false, true, true} {
		_, ok := page.Messages[i].Message["expiresAt"]
		assert.Equal(t, hasExp, ok, "offset %d expiresAt", i)
	}

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(raw), `mmmq_messages_expired_total{kind="dispatcher"} 2`)
	assert.Contains(t, string(raw), `mmmq_messages_expired_total{kind="group"} 2`)
}
