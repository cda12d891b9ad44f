package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/retention"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/configdispatchers"
)

// topicDirBytes is the size of the .mmm and .idx files of a topic dir.
func topicDirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var n int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), storage.SegmentExt) || strings.HasSuffix(e.Name(), storage.IndexExt) {
			fi, err := e.Info()
			require.NoError(t, err)
			n += fi.Size()
		}
	}
	return n
}

// TestRetentionEndToEnd is the acceptance check of retention on the whole
// broker: 4 KiB segments, max-bytes 40960, 5,000 publishes (a retention
// pass after every 100): the topic directory stays within max-bytes plus
// one segment, GET /topics shows the start offset moving up, reading
// offset 0 answers 410 OFFSET_EXPIRED with startOffset, and a dispatcher
// stuck at offset 0 (its consumer was down) continues from the start
// offset with one warning naming the messages it never delivered, counted
// in mmmq_retention_skipped_total{kind="dispatcher"}; what it had already
// read before the deletion it still delivers.
func TestRetentionEndToEnd(t *testing.T) {
	const topic, segMax, maxBytes = "ret.t", 4096, 40960
	cons := newGatedConsumer(t)

	root := t.TempDir()
	cfg := testConfig(t, root)
	config.EditSection(cfg, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) {
		seg.MaxBytes = segMax
		seg.MaxRecordBytes = 1024
	})
	config.EditSection(cfg, retention.ConfigSection, func(r *retention.Config) {
		r.MaxBytes = maxBytes
		r.CheckInterval = time.Hour // passes are run by the test
	})
	// The directory's bytes on disk are its data here: preallocation off
	// (with it, the active segment also holds up to a segment of zeros,
	// which the preallocation budget counts and retention does not).
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.Preallocate = 0 })
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "lagging", Host: cons.URL, Patterns: []string{topic}}})
	core, logs := observer.New(zapcore.WarnLevel)
	var r *retention.Retainer
	a, base := startBroker(t, cfg, fx.Populate(&r),
		fx.Decorate(func(l *zap.Logger) *zap.Logger { return zap.New(zapcore.NewTee(l.Core(), core)) }))
	defer a.RequireStop()

	dir := filepath.Join(root, topic)
	most := int64(0)
	msg := `{"topic":"` + topic + `","content":{"n":%d,"pad":"` + strings.Repeat("p", 40) + `"}}`
	for b := 0; b < 50; b++ {
		var items []string
		for i := 0; i < 100; i++ {
			items = append(items, fmt.Sprintf(msg, b*100+i))
		}
		st, out := postBatch(t, base, "", "application/json", "["+strings.Join(items, ",")+"]")
		require.Equal(t, 200, st, "%+v", out)
		r.Pass()
		most = max(most, topicDirBytes(t, dir))
	}
	// One segment: up to segment.max-bytes plus the entry that crossed it.
	limit := int64(maxBytes + segMax + 1024 + storage.IndexEntrySize)
	assert.LessOrEqual(t, most, limit, "topic directory after a pass")

	start, next := onlyTopicOffsets(t, base)
	require.Equal(t, int64(5000), next)
	require.Greater(t, start, int64(0), "start offset after 5,000 publishes")

	assert.EqualValues(t, start, expiredStart(t, base, topic))

	cons.up.Store(true)
	require.Eventually(t, func() bool {
		got := cons.offsets()
		return len(got) > 0 && got[len(got)-1] == 4999
	}, 30*time.Second, 10*time.Millisecond)
	delivered := cons.offsets()
	// The worker may still deliver the batch it had read before the
	// deletion (offsets 0..k-1, held in memory); then it continues at the
	// start offset: never a gap inside what it delivers, nothing twice.
	k := int64(len(delivered)) - (5000 - start)
	require.GreaterOrEqual(t, k, int64(0), "delivered %d messages", len(delivered))
	for i, off := range delivered {
		want := int64(i)
		if want >= k {
			want = start + int64(i) - k
		}
		require.Equal(t, want, off, "delivery %d", i)
	}
	skipped := start - k
	warned := logs.FilterMessage("messages deleted by retention before this dispatcher read them; continuing from the log start offset").All()
	require.Len(t, warned, 1)
	assert.Equal(t, skipped, warned[0].ContextMap()["never-delivered"])
	assert.Equal(t, start, warned[0].ContextMap()["start-offset"])

	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(raw), fmt.Sprintf(`mmmq_retention_skipped_total{kind="dispatcher"} %d`, skipped))
	assert.Contains(t, string(raw), `mmmq_retention_skipped_total{kind="group"} 0`)
	t.Logf("start offset %d after 5,000 publishes; largest topic directory after a pass %d bytes (limit %d); the lagging dispatcher delivered %d held messages, skipped %d", start, most, limit, k, skipped)
}

// TestRetentionJetStreamEndToEnd: with backend jetstream, max-bytes is the
// topic's stream limit and JetStream drops the head as publishes come (no
// retention pass): GET /topics shows the start offset moving up, offset 0
// answers 410 OFFSET_EXPIRED with startOffset, and a dispatcher stuck at
// offset 0 continues from the start offset, warning with the count of
// what it never delivered, as on the local backend.
func TestRetentionJetStreamEndToEnd(t *testing.T) {
	const topic, n = "ret.js", 400
	cons := newGatedConsumer(t)

	cfg := testConfig(t, t.TempDir())
	_, _ = backends[1].setup(t, cfg) // jetstream
	require.Equal(t, topicqueue.BackendJetStream, config.SectionValue(cfg, topicqueue.StorageSection).Backend)
	config.EditSection(cfg, retention.ConfigSection, func(r *retention.Config) { r.MaxBytes = 16384 })
	config.SetSectionValue(cfg, configdispatchers.Section, configdispatchers.Entries{{Name: "lagging", Host: cons.URL, Patterns: []string{topic}}})
	core, logs := observer.New(zapcore.WarnLevel)
	a, base := startBroker(t, cfg,
		fx.Decorate(func(l *zap.Logger) *zap.Logger { return zap.New(zapcore.NewTee(l.Core(), core)) }))
	defer a.RequireStop()

	msg := `{"topic":"` + topic + `","content":{"n":%d,"pad":"` + strings.Repeat("p", 100) + `"}}`
	for b := 0; b < n/50; b++ {
		var items []string
		for i := 0; i < 50; i++ {
			items = append(items, fmt.Sprintf(msg, b*50+i))
		}
		st, out := postBatch(t, base, "", "application/json", "["+strings.Join(items, ",")+"]")
		require.Equal(t, 200, st, "%+v", out)
	}

	start, next := onlyTopicOffsets(t, base)
	require.Equal(t, int64(n), next)
	require.Greater(t, start, int64(0), "the stream dropped its head")

	assert.GreaterOrEqual(t, expiredStart(t, base, topic), start)

	cons.up.Store(true)
	require.Eventually(t, func() bool {
		got := cons.offsets()
		return len(got) > 0 && got[len(got)-1] == n-1
	}, 30*time.Second, 10*time.Millisecond)
	delivered := cons.offsets()
	// What the worker read before the head was dropped it still delivers;
	// what was dropped before it read it is skipped, warned about with
	// the count: every offset is one or the other, once, in order.
	for i := 1; i < len(delivered); i++ {
		require.Greater(t, delivered[i], delivered[i-1], "delivery %d", i)
	}
	warned := logs.FilterMessage("messages deleted by retention before this dispatcher read them; continuing from the log start offset").All()
	require.NotEmpty(t, warned)
	skipped := int64(0)
	for _, w := range warned {
		skipped += w.ContextMap()["never-delivered"].(int64)
	}
	assert.Equal(t, int64(n), int64(len(delivered))+skipped, "delivered + never-delivered")
	t.Logf("start offset %d after %d publishes; delivered %d, skipped %d in %d warnings", start, n, len(delivered), skipped, len(warned))
}

// gatedConsumer is a push consumer that answers 503 (abnormal: the
// dispatcher backs off and stays at its offset) until up is set, then ACKs
// every push and records its mmmq-offset.
type gatedConsumer struct {
	*httptest.Server
	up  atomic.Bool
	mu  sync.Mutex
	got []int64
}

func newGatedConsumer(t *testing.T) *gatedConsumer {
	c := &gatedConsumer{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !c.up.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		off, _ := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
		c.mu.Lock()
		c.got = append(c.got, off)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"acknowledgement":"ACK"}`)
	}))
	t.Cleanup(c.Close)
	return c
}

// offsets is a copy of the offsets ACKed so far, in arrival order.
func (c *gatedConsumer) offsets() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.got...)
}

// onlyTopicOffsets is the log start offset and the next offset of the one
// topic GET /topics lists (the test fails when it lists another number).
func onlyTopicOffsets(t *testing.T, base string) (start, next int64) {
	t.Helper()
	var topics struct {
		Topics []struct {
			NextOffset  int64 `json:"nextOffset"`
			StartOffset int64 `json:"startOffset"`
		} `json:"topics"`
	}
	resp, err := http.Get(base + "/topics")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&topics))
	resp.Body.Close()
	require.Len(t, topics.Topics, 1)
	return topics.Topics[0].StartOffset, topics.Topics[0].NextOffset
}

// expiredStart reads topic at offset 0, which retention deleted: the
// answer must be 410 OFFSET_EXPIRED; it returns the startOffset it names.
func expiredStart(t *testing.T, base, topic string) int64 {
	t.Helper()
	resp, err := http.Get(base + "/topics/" + topic + "/messages?offset=0")
	require.NoError(t, err)
	var body struct {
		Code        string `json:"code"`
		StartOffset int64  `json:"startOffset"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	resp.Body.Close()
	assert.Equal(t, http.StatusGone, resp.StatusCode)
	assert.Equal(t, "OFFSET_EXPIRED", body.Code)
	return body.StartOffset
}

// TestRetentionHeldByAnAPIDispatcher: under keep-unconsumed a dispatcher
// created through the admin API counts as a reader like one from the file:
// stuck at offset 0 (its consumer is down), it keeps its topic whole, also
// after a restart (loaded from dispatchers.json), and GET /topics and
// /metrics name it as what holds retention back; once it is deleted the
// next pass deletes, and nothing holds the topic any more.
func TestRetentionHeldByAnAPIDispatcher(t *testing.T) {
	const topic = "held.t"
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }))
	t.Cleanup(down.Close)
	root := t.TempDir()
	cfg := testConfig(t, root)
	config.EditSection(cfg, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) {
		seg.MaxBytes = 4096
		seg.MaxRecordBytes = 1024
	})
	config.EditSection(cfg, retention.ConfigSection, func(r *retention.Config) {
		r.MaxBytes = 8192
		r.KeepUnconsumed = true
		r.CheckInterval = time.Hour // passes are run by the test
	})
	topicRow := func(base string) map[string]any {
		t.Helper()
		_, body := call(t, "GET", base+"/topics", "")
		for _, x := range body["topics"].([]any) {
			if row := x.(map[string]any); row["name"] == topic {
				return row
			}
		}
		t.Fatalf("no topic %s in GET /topics: %v", topic, body)
		return nil
	}
	wantHeld := func(base string) {
		t.Helper()
		row := topicRow(base)
		assert.EqualValues(t, 0, row["startOffset"], "the API dispatcher at offset 0 did not hold the topic")
		held, _ := row["retentionHeldBy"].(map[string]any)
		require.NotNil(t, held, "GET /topics does not say what holds retention back: %v", row)
		assert.Equal(t, "dispatcher", held["kind"])
		assert.Equal(t, "stuck", held["name"])
		assert.EqualValues(t, 0, held["committed"])
		assert.Greater(t, held["heldBytes"], 0.0)
		resp, err := http.Get(base + "/metrics")
		require.NoError(t, err)
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Contains(t, string(raw), `mmmq_retention_holder{kind="dispatcher",reader="stuck",topic="held.t"} 1`)
		assert.Regexp(t, `mmmq_retention_held_bytes\{topic="held.t"\} [1-9]`, string(raw))
		// The status page names it too, in the topic list and on the
		// topic's own page (round-3 item 5).
		for _, page := range []string{"/ui/", "/ui/topics/" + topic} {
			assert.Regexp(t, `<td class="readers">stuck: lag \d+ <span class="held" [^>]*>holds retention: dispatcher stuck at offset 0, [0-9.]+ (KiB|B) kept</span></td>`, uiPage(t, base+page), page)
		}
	}

	var r *retention.Retainer
	a, base := startBroker(t, cfg, fx.Populate(&r))
	st, body := call(t, "POST", base+"/mmmq/dispatchers", fmt.Sprintf(`{"name":"stuck","host":%q,"patterns":[%q]}`, down.URL, topic))
	require.Equal(t, 201, st, "%v", body)
	publishN(t, base, topic, 400)
	r.Pass()
	wantHeld(base)
	a.RequireStop()

	a, base = startBroker(t, cfg, fx.Populate(&r))
	defer a.RequireStop()
	r.Pass()
	wantHeld(base) // across the restart: loaded from dispatchers.json

	st, body = call(t, "DELETE", base+"/mmmq/dispatchers/stuck", "")
	require.Equal(t, 200, st, "%v", body)
	r.Pass()
	row := topicRow(base)
	assert.Greater(t, row["startOffset"], 0.0, "nothing deleted once the dispatcher is gone")
	assert.Nil(t, row["retentionHeldBy"])
	assert.NotContains(t, uiPage(t, base+"/ui/"), `class="held"`)
}

// uiPage is the status page at url (auth off: no login).
func uiPage(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, raw)
	return string(raw)
}
