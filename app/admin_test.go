package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/app"
	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

// call sends method url with body and returns the status and decoded JSON.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out), "body %s", raw)
	return resp.StatusCode, out
}

// topicsOf returns the topics of the consumer's pushes since index from.
func topicsOf(rs []received) string {
	var ts []string
	for _, r := range rs {
		ts = append(ts, fmt.Sprintf("%s@%d", r.Topic, r.Offset))
	}
	return strings.Join(ts, " ")
}

// TestAdminDispatchersEndToEnd: a dispatcher created over REST delivers
// without a restart; after a restart it is still there (dispatchers.json,
// mode 0600) and resumes from its checkpoint; a pattern change makes new
// topics flow; a seek to earliest redelivers; a delete stops delivery; a
// config dispatcher is read-only; names and fields are checked.
func TestAdminDispatchersEndToEnd(t *testing.T) {
	root := t.TempDir()
	c := newConsumer(t)
	cfg := testConfig(t, root)
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "from-file", Host: c.srv.URL, Patterns: []string{"file.only"}}})
	a, base := startBroker(t, cfg)
	publish(t, base, "a.one", 1)

	st, body := call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"live","host":%q,"patterns":["a.*"]}`, c.srv.URL))
	require.Equal(t, 201, st, "%v", body)
	assert.Equal(t, "api", body["source"])
	require.Equal(t, "a.one@0", topicsOf(c.waitFor(t, 1)))

	info, err := os.Stat(filepath.Join(root, "dispatchers.json"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	for _, tc := range []struct {
		method, path, body string
		status             int
		code, says         string
	}{
		{"POST", "/mmmq/dispatchers", fmt.Sprintf(`{"name":"live","host":%q,"patterns":["b.*"]}`, c.srv.URL), 409, "NAME_TAKEN", "live"},
		{"POST", "/mmmq/dispatchers", `{"name":"x","host":"ftp://h:1","patterns":["b.*"]}`, 400, "BAD_REQUEST", "host"},
		{"POST", "/mmmq/dispatchers", `{"name":"x","host":"http://h:1","patterns":["a..b"]}`, 400, "BAD_REQUEST", "patterns[0]"},
		{"POST", "/mmmq/dispatchers", `{"name":"x","host":"http://h:1","patterns":["b"],"colour":1}`, 400, "BAD_REQUEST", `"colour"`},
		{"PUT", "/mmmq/dispatchers/from-file", fmt.Sprintf(`{"host":%q,"patterns":["b.*"]}`, c.srv.URL), 409, "READ_ONLY", "config"},
		{"DELETE", "/mmmq/dispatchers/from-file", "", 409, "READ_ONLY", "config"},
		{"DELETE", "/mmmq/dispatchers/nope", "", 404, "NOT_FOUND", "nope"},
		{"POST", "/mmmq/dispatchers/live/seek", `{"to":"yesterday"}`, 400, "BAD_REQUEST", `"to"`},
	} {
		st, body := call(t, tc.method, base+tc.path, tc.body)
		assert.Equal(t, tc.status, st, "%s %s: %v", tc.method, tc.path, body)
		assert.Equal(t, tc.code, body["code"], "%s %s", tc.method, tc.path)
		assert.Contains(t, body["error"], tc.says, "%s %s", tc.method, tc.path)
	}

	a.RequireStop()
	a, base = startBroker(t, cfg) // dispatchers.json is loaded again
	publish(t, base, "a.one", 2)
	require.Equal(t, "a.one@0 a.one@1", topicsOf(c.waitFor(t, 2)), "resumed from its checkpoint, offset 0 not sent again")

	st, body = call(t, "PUT", base+"/mmmq/dispatchers/live", fmt.Sprintf(`{"host":%q,"patterns":["b.*"]}`, c.srv.URL))
	require.Equal(t, 200, st, "%v", body)
	publish(t, base, "b.two", 3)
	require.Equal(t, "b.two@0", topicsOf(c.waitFor(t, 3)[2:]))

	st, body = call(t, "POST", base+"/mmmq/dispatchers/live/seek", `{"topic":"b.two","to":"earliest"}`)
	require.Equal(t, 200, st, "%v", body)
	require.Equal(t, "b.two@0", topicsOf(c.waitFor(t, 4)[3:]), "redelivered after the seek")

	st, body = call(t, "GET", base+"/mmmq/dispatchers/live", "")
	require.Equal(t, 200, st)
	topics := body["topics"].([]any)
	require.Len(t, topics, 1)
	assert.Equal(t, "b.two", topics[0].(map[string]any)["topic"])
	assert.EqualValues(t, 1, topics[0].(map[string]any)["highWatermark"])

	st, body = call(t, "POST", base+"/mmmq/dispatchers/live/pause", "")
	require.Equal(t, 200, st)
	assert.Equal(t, true, body["paused"])
	st, body = call(t, "GET", base+"/mmmq/dispatchers", "")
	require.Equal(t, 200, st)
	assert.Len(t, body["dispatchers"], 2)

	st, body = call(t, "DELETE", base+"/mmmq/dispatchers/live?delete-checkpoints=true", "")
	require.Equal(t, 200, st, "%v", body)
	_, err = os.Stat(filepath.Join(root, "b.two", "checkpoints", "live.checkpoint"))
	assert.True(t, os.IsNotExist(err), "checkpoint removed: %v", err)
	a.RequireStop()
	raw, err := os.ReadFile(filepath.Join(root, "dispatchers.json"))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), `"live"`)
}

// TestAdminInvalidFileStopsStartup: an unreadable dispatchers.json stops
// startup naming the file, never silently dropping its dispatchers.
func TestAdminInvalidFileStopsStartup(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "dispatchers.json"), []byte(`{"version":1,"dispatchers":[{"name":"x"`), 0o600))
	a := fx.New(fx.NopLogger, app.Options(config.Supply(testConfig(t, root))))
	require.NoError(t, a.Err())
	err := a.Start(t.Context())
	if err == nil {
		_ = a.Stop(t.Context())
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(root, "dispatchers.json"))
}

// TestAdminStatusOfAStuckDispatcher: a dispatcher whose consumer answers
// 503 shows state backoff, its lag, the last error, the next retry and the
// age of the oldest unacknowledged message, in GET /mmmq/dispatchers/{name}
// and in mmmq_dispatch_oldest_unacked_age_seconds.
func TestAdminStatusOfAStuckDispatcher(t *testing.T) {
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(down.Close)
	cfg := testConfig(t, t.TempDir())
	a, base := startBroker(t, cfg)
	defer a.RequireStop()
	publish(t, base, "stuck.t", 1)
	st, body := call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"stuck","host":%q,"patterns":["stuck.*"]}`, down.URL))
	require.Equal(t, 201, st, "%v", body)
	var ts map[string]any
	require.Eventually(t, func() bool {
		_, body := call(t, "GET", base+"/mmmq/dispatchers/stuck", "")
		topics, _ := body["topics"].([]any)
		if len(topics) != 1 {
			return false
		}
		ts = topics[0].(map[string]any)
		return ts["state"] == "backoff" && ts["lastError"] != nil
	}, 10*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 1, ts["lag"])
	assert.Contains(t, ts["lastError"], "503")
	assert.NotNil(t, ts["nextRetry"])
	assert.Greater(t, ts["oldestUnackedAgeSeconds"], 0.0)

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Regexp(t, `mmmq_dispatch_oldest_unacked_age_seconds\{dispatcher="stuck",topic="stuck.t"\} [0-9.e-]+`, string(raw))
	assert.NotContains(t, string(raw), `mmmq_dispatch_oldest_unacked_age_seconds{dispatcher="stuck",topic="stuck.t"} 0`+"\n")
}

// TestGroupMetrics: /metrics shows each consumer group's committed offset,
// lag and whether a session holds it.
func TestGroupMetrics(t *testing.T) {
	a, base := startBroker(t, testConfig(t, t.TempDir()))
	defer a.RequireStop()
	for i := 0; i < 3; i++ {
		publish(t, base, "gm.t", i)
	}
	req, _ := http.NewRequest("POST", base+"/topics/gm.t/groups/billing/fetch?max=2", nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	session := resp.Header.Get("mmmq-session")
	resp.Body.Close()
	require.NotEmpty(t, session)
	req, _ = http.NewRequest("POST", base+"/topics/gm.t/groups/billing/ack", strings.NewReader(`{"offset":1}`))
	req.Header.Set("mmmq-session", session)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	resp, err = http.Get(base + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`mmmq_group_committed_offset{group="billing",topic="gm.t"} 2`,
		`mmmq_group_lag{group="billing",topic="gm.t"} 1`,
		`mmmq_group_held{group="billing",topic="gm.t"} 1`,
	} {
		assert.Contains(t, string(raw), want+"\n")
	}
}
