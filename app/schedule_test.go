package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScheduledEndToEnd runs the default application: scheduled publishes
// (delay and deliverAt), validated against the OpenAPI document, are not
// in their topic before they are due and are all there after; a cancel
// drops one (a second cancel is 404); deleting the topic is 409 while
// messages are pending; a restart keeps every pending message.
func TestScheduledEndToEnd(t *testing.T) {
	const topic = "sched.t"
	root := t.TempDir()
	a, base := startBroker(t, testConfig(t, root))
	c := newAPIClient(t, base)
	var ids []string
	var due []time.Time
	for i := range 6 {
		body := fmt.Sprintf(`{"topic":%q,"content":%d,"delay":"%dms"}`, topic, i, 400+100*i)
		if i%2 == 1 {
			body = fmt.Sprintf(`{"topic":%q,"content":%d,"deliverAt":%d}`, topic, i, time.Now().Add(time.Duration(400+100*i)*time.Millisecond).UnixMilli())
		}
		ack := c.do(exchange{method: "POST", path: "/messages", body: body, status: 200}).json(t)
		require.Equal(t, true, ack["scheduled"], "%v", ack)
		require.Nil(t, ack["offset"])
		ids = append(ids, ack["scheduleId"].(string))
		due = append(due, time.UnixMilli(int64(ack["deliverAtMs"].(float64))))
	}
	// Both given, and in a batch: 400.
	c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"sched.t","content":1,"delay":"1s","deliverAt":1}`, status: 400})
	c.do(exchange{method: "POST", path: "/messages/batch", body: `[{"topic":"sched.t","content":1,"delay":"1s"}]`, status: 400})
	// Cancel the last; twice is 404; an unknown id is 404.
	c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/" + ids[5], status: 200})
	c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/" + ids[5], status: 404})
	c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/nope", status: 404})
	// Pending messages hold the topic: 409.
	del := c.do(exchange{method: "DELETE", path: "/topics/" + topic, status: 409}).json(t)
	assert.Equal(t, "SCHEDULED_PENDING", del["code"])

	// Restart before anything is due: every pending message is kept.
	require.True(t, time.Now().Before(due[0]), "the test machine is too slow: restart after the first due time")
	a.RequireStop()
	a, base = startBroker(t, testConfig(t, root))
	defer a.RequireStop()
	c = newAPIClient(t, base)

	read := func() []map[string]any {
		resp, err := http.Get(base + "/topics/" + topic + "/messages")
		require.NoError(t, err)
		defer resp.Body.Close()
		if resp.StatusCode == 404 {
			return nil
		}
		var page struct {
			Messages []struct {
				Offset  int64          `json:"offset"`
				Message map[string]any `json:"message"`
			} `json:"messages"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&page))
		var out []map[string]any
		for _, m := range page.Messages {
			out = append(out, m.Message)
		}
		return out
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := read()
		// Never early: every message in the topic was due when it was read.
		for _, m := range got {
			n := int(m["content"].(float64))
			require.False(t, time.Now().Before(due[n]), "message %d in the topic before its due time", n)
		}
		if len(got) == 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := read()
	require.Len(t, got, 5, "delivered %v", got)
	seen := map[float64]bool{}
	for _, m := range got {
		seen[m["content"].(float64)] = true
	}
	assert.Equal(t, map[float64]bool{0: true, 1: true, 2: true, 3: true, 4: true}, seen)
	c.do(exchange{method: "GET", path: "/topics/" + topic + "/messages", status: 200})
	// Delivered: a cancel is 404, and the topic can be deleted.
	c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/" + ids[0], status: 404})
	c.do(exchange{method: "DELETE", path: "/topics/" + topic, status: 200})
}
