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
// (delay and deliverAt, single and in a batch, a retry with the same id
// answered as a duplicate), validated against the OpenAPI document, are not
// in their topic before they are due and are all there after; a cancel
// drops one (a second cancel is 404); deleting a topic drops its pending
// ones (the answer says how many; they never arrive); a restart keeps
// every pending message; each arrives with the mmmq-schedule-id header.
func TestScheduledEndToEnd(t *testing.T) {
	const topic = "sched.t"
	var (
		root string
		ids  []string
		due  []time.Time
	)
	// Everything before the restart is one attempt on a fresh data root.
	// The restart must come before the first due time; on a machine too
	// loaded for that, the attempt is made again with longer delays (the
	// property is still asserted, never skipped).
	attempt := func(first time.Duration) bool {
		root = t.TempDir()
		a, base := startBroker(t, testConfig(t, root))
		defer a.RequireStop()
		c := newAPIClient(t, base)
		// Both given: 400, alone and in a batch (naming the member).
		c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"sched.t","content":1,"delay":"1s","deliverAt":1}`, status: 400})
		bad := c.do(exchange{method: "POST", path: "/messages/batch", body: `[{"topic":"sched.b","content":1},{"topic":"sched.b","content":1,"delay":"1s","deliverAt":1}]`, status: 400}).json(t)
		assert.Contains(t, bad["error"], "message 1: give")
		// A batch with a scheduled member (with a ttl, and an id) beside an
		// ordinary one, then a retry of the scheduled one alone: a duplicate
		// of the first schedule. Each answer is validated against the
		// document.
		batch := c.do(exchange{method: "POST", path: "/messages/batch", body: `[{"topic":"sched.b","content":0},{"topic":"sched.b","content":1,"delay":"1h","ttl":"2h","id":"b-1"}]`, status: 200}).json(t)
		res := batch["results"].([]any)
		member := res[1].(map[string]any)
		require.Equal(t, true, member["scheduled"], "%v", batch)
		require.NotNil(t, res[0].(map[string]any)["offset"])
		again := c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"sched.b","content":1,"delay":"2h","id":"b-1"}`, status: 200}).json(t)
		assert.Equal(t, true, again["duplicate"])
		assert.Equal(t, member["scheduleId"], again["scheduleId"])
		assert.Equal(t, member["deliverAtMs"], again["deliverAtMs"])
		c.do(exchange{method: "DELETE", path: "/topics/sched.b/scheduled/" + member["scheduleId"].(string), status: 200})
		// Deleting a topic drops its pending scheduled messages with it.
		const gone = "sched.gone"
		c.do(exchange{method: "POST", path: "/messages", body: `{"topic":"` + gone + `","content":"x"}`, status: 200})
		for i := range 2 {
			c.do(exchange{method: "POST", path: "/messages", body: fmt.Sprintf(`{"topic":%q,"content":%d,"delay":"1h"}`, gone, i), status: 200})
		}
		del := c.do(exchange{method: "DELETE", path: "/topics/" + gone, status: 200}).json(t)
		assert.Equal(t, float64(2), del["scheduledDropped"], "%v", del)

		// Six scheduled messages, delay and deliverAt by turns; the last
		// is due in an hour and is cancelled.
		ids, due = nil, nil
		for i := range 6 {
			d := first + time.Duration(100*i)*time.Millisecond
			if i == 5 {
				d = time.Hour
			}
			body := fmt.Sprintf(`{"topic":%q,"content":%d,"delay":"%dms"}`, topic, i, d.Milliseconds())
			if i%2 == 1 {
				body = fmt.Sprintf(`{"topic":%q,"content":%d,"deliverAt":%d}`, topic, i, time.Now().Add(d).UnixMilli())
			}
			ack := c.do(exchange{method: "POST", path: "/messages", body: body, status: 200}).json(t)
			require.Equal(t, true, ack["scheduled"], "%v", ack)
			require.Nil(t, ack["offset"])
			ids = append(ids, ack["scheduleId"].(string))
			due = append(due, time.UnixMilli(int64(ack["deliverAtMs"].(float64))))
		}
		// The listing (validated against the document): all six in due
		// order, paged by two, the next cursor continuing; with their
		// content on request; refusals.
		var listed []string
		after := ""
		for range 4 {
			page := c.do(exchange{method: "GET", path: "/topics/" + topic + "/scheduled?limit=2" + after, status: 200}).json(t)
			require.Equal(t, float64(6), page["pending"], "%v", page)
			for _, it := range page["items"].([]any) {
				listed = append(listed, it.(map[string]any)["scheduleId"].(string))
			}
			next, ok := page["next"].(string)
			if !ok {
				break
			}
			after = "&after=" + next
		}
		require.Equal(t, ids, listed)
		withContent := c.do(exchange{method: "GET", path: "/topics/" + topic + "/scheduled?limit=1&content=true", status: 200}).json(t)
		firstItem := withContent["items"].([]any)[0].(map[string]any)
		assert.Equal(t, float64(0), firstItem["content"], "%v", firstItem)
		assert.Equal(t, float64(1), firstItem["size"], "%v", firstItem)
		c.do(exchange{method: "GET", path: "/topics/" + topic + "/scheduled?limit=0", status: 400, invalid: true})
		c.do(exchange{method: "GET", path: "/topics/" + topic + "/scheduled?after=x", status: 400})
		empty := c.do(exchange{method: "GET", path: "/topics/sched.none/scheduled", status: 200}).json(t)
		assert.Empty(t, empty["items"])
		head, err := http.Head(base + "/topics/" + topic + "/scheduled")
		require.NoError(t, err)
		head.Body.Close()
		assert.Equal(t, 200, head.StatusCode)
		// Cancel the last; twice is 404; an unknown id is 404.
		c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/" + ids[5], status: 200})
		c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/" + ids[5], status: 404})
		c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/nope", status: 404})
		a.RequireStop()
		return time.Now().Before(due[0])
	}
	restarted := false
	for _, first := range []time.Duration{400 * time.Millisecond, 2 * time.Second, 8 * time.Second} {
		if restarted = attempt(first); restarted {
			break
		}
		t.Logf("the broker stopped after the first due time (delays from %v); again with longer delays", first)
	}
	require.True(t, restarted, "the broker never stopped before the first due time, even with delays from 8s")

	// Restart before anything was due: every pending message is kept.
	a, base := startBroker(t, testConfig(t, root))
	defer a.RequireStop()
	c := newAPIClient(t, base)
	// The listing after the restart: the five left, the cancelled one
	// gone.
	if page := c.do(exchange{method: "GET", path: "/topics/" + topic + "/scheduled", status: 200}).json(t); time.Now().Before(due[0]) {
		var listed []string
		for _, it := range page["items"].([]any) {
			listed = append(listed, it.(map[string]any)["scheduleId"].(string))
		}
		assert.Equal(t, ids[:5], listed)
	}

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
	// Their move carried the header the broker sets.
	for _, m := range got {
		h, _ := m["headers"].(map[string]any)
		assert.NotEmpty(t, h["mmmq-schedule-id"], "%v", m)
	}
	// The dropped ones did not create their topic again.
	c.do(exchange{method: "GET", path: "/topics/sched.gone/messages", status: 404})
	c.do(exchange{method: "GET", path: "/topics/" + topic + "/messages", status: 200})
	// Delivered: a cancel is 404, and the topic can be deleted.
	c.do(exchange{method: "DELETE", path: "/topics/" + topic + "/scheduled/" + ids[0], status: 404})
	c.do(exchange{method: "DELETE", path: "/topics/" + topic, status: 200})
}
