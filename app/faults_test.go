package app_test

// I/O faults: a full broker on a vfs.MemFS whose hook
// fails fsync or reads, or whose capacity runs out. Each test checks the HTTP
// answer (a JSON NACK, {"acknowledgement":"NACK","error":…,"code":…}, with
// 503 TOPIC_FAILED for a failed write or fsync, 503 UNAVAILABLE for a failed
// read), that nothing after the fault is ever
// acknowledged, that other topics keep working, and what a restart recovers.

import (
	"bytes"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/dispatcher"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// memRoot is the data root on a MemFS.
const memRoot = "/data"

// onMem replaces the broker's filesystem with mem.
func onMem(mem *vfs.MemFS) fx.Option {
	return fx.Decorate(func(vfs.FS) vfs.FS { return mem })
}

// failOn returns a hook that fails op with errno on the segment files of
// topic whose name ends with ext ("" = .mmm and .idx), at most once when
// once is set, and counts the faults.
func failOn(op vfs.Op, topic, ext string, errno syscall.Errno, once bool, fired *atomic.Int64) func(vfs.Op, string) error {
	return func(o vfs.Op, name string) error {
		// A group commit into preallocated zeros makes its bytes durable
		// with fdatasync: for OpSync, both durability calls fail.
		if o == vfs.OpDatasync && op == vfs.OpSync {
			o = vfs.OpSync
		}
		if o != op || !strings.Contains(name, "/"+topic+"/") {
			return nil
		}
		isSeg := strings.HasSuffix(name, storage.SegmentExt) || strings.HasSuffix(name, storage.IndexExt)
		if !isSeg || ext != "" && !strings.HasSuffix(name, ext) {
			return nil
		}
		if once && fired.Load() > 0 {
			return nil
		}
		fired.Add(1)
		return &fs.PathError{Op: op.String(), Path: name, Err: errno}
	}
}

// postJSON posts body to base+path and decodes the JSON answer; it fails the
// test when the answer is not JSON.
func postJSON(t *testing.T, url string, body []byte) (int, map[string]any) {
	t.Helper()
	return postJSONAs(t, url, "", body)
}

// postJSONAs is postJSON with a bearer token ("" for none).
func postJSONAs(t *testing.T, url, token string, body []byte) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(newRequest(t, http.MethodPost, url, token, bytes.NewReader(body)))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(b, &out), "answer is not JSON: %q", b)
	return resp.StatusCode, out
}

// newRequest is a request with a bearer token ("" for none); a POST is
// JSON.
func newRequest(t *testing.T, method, url, token string, body io.Reader) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	if method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return req
}

// publishAt publishes content to topic at ack level lvl ("" = default).
func publishAt(t *testing.T, base, topic string, content any, lvl string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"topic": topic, "content": content})
	url := base + "/messages"
	if lvl != "" {
		url += "?ack=" + lvl
	}
	return postJSON(t, url, body)
}

// requireNACK checks an error answer: status, NACK, code, non-empty error.
func requireNACK(t *testing.T, status int, out map[string]any, wantStatus int, wantCode string) {
	t.Helper()
	require.Equal(t, wantStatus, status, "answer %v", out)
	assert.Equal(t, "NACK", out["acknowledgement"], "answer %v", out)
	assert.Equal(t, wantCode, out["code"], "answer %v", out)
	assert.NotEmpty(t, out["error"], "answer %v", out)
	assert.NotContains(t, out, "offset", "a NACK never carries an offset")
}

// readItem is one row of GET /topics/{t}/messages.
type readItem struct {
	Offset  int64           `json:"offset"`
	Message json.RawMessage `json:"message"`
	Error   string          `json:"error"`
}

type readPage struct {
	Messages      []readItem `json:"messages"`
	NextOffset    int64      `json:"nextOffset"`
	HighWatermark int64      `json:"highWatermark"`
}

// readTopic returns the status and, on 200, the decoded page; on another
// status it returns the decoded error body in errBody.
func readTopic(t *testing.T, base, topic string) (status int, page readPage, errBody map[string]any) {
	t.Helper()
	return readTopicAs(t, base, topic, "")
}

// readTopicAs is readTopic with a bearer token ("" for none).
func readTopicAs(t *testing.T, base, topic, token string) (status int, page readPage, errBody map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(newRequest(t, http.MethodGet, base+"/topics/"+topic+"/messages?offset=0&limit=1000", token, nil))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(b, &page), "page %q", b)
	} else {
		require.NoError(t, json.Unmarshal(b, &errBody), "error answer is not JSON: %q", b)
	}
	return resp.StatusCode, page, errBody
}

// contentOf returns the "content" of a stored message JSON.
func contentOf(t *testing.T, stored json.RawMessage) any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(stored, &m), "stored %q", stored)
	return m["content"]
}

// requireAcked checks that topic holds exactly the acknowledged contents at
// offsets 0..len(acked)-1 (contents are {"n": i}, compared as float64), with
// no read error, and returns the high watermark.
func requireAcked(t *testing.T, base, topic string, acked []int) int64 {
	t.Helper()
	st, page, eb := readTopic(t, base, topic)
	require.Equal(t, http.StatusOK, st, "read %s: %v", topic, eb)
	require.GreaterOrEqual(t, len(page.Messages), len(acked), "every acknowledged offset is readable")
	for i, n := range acked {
		it := page.Messages[i]
		require.Empty(t, it.Error, "offset %d", i)
		require.EqualValues(t, i, it.Offset)
		assert.Equal(t, map[string]any{"n": float64(n)}, contentOf(t, it.Message), "offset %d", i)
	}
	return page.HighWatermark
}

// topicRow returns topic's row of GET /topics.
func topicRow(t *testing.T, base, topic string) (httpapi.TopicInfo, bool) {
	t.Helper()
	resp, err := http.Get(base + "/topics")
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct{ Topics []httpapi.TopicInfo }
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	for _, ti := range out.Topics {
		if ti.Name == topic {
			return ti, true
		}
	}
	return httpapi.TopicInfo{}, false
}

// memUsage sums the sizes of every file under dir on mem.
func memUsage(t *testing.T, mem *vfs.MemFS, dir string) int64 {
	t.Helper()
	ents, err := mem.List(dir)
	require.NoError(t, err)
	var n int64
	for _, e := range ents {
		p := path.Join(dir, e.Name)
		if e.IsDir {
			n += memUsage(t, mem, p)
			continue
		}
		b, err := mem.ReadFile(p)
		require.NoError(t, err)
		n += int64(len(b))
	}
	return n
}

// TestFsyncEIOFailsTopicUntilRestart: an fsync of a .mmm or .idx returning
// EIO answers that publish 503 NACK; the topic then refuses every write (at
// every ack level) even though later fsyncs would succeed (fsyncgate: never
// retry and acknowledge); other topics keep working; reads of what was
// acknowledged keep working; a restart (after power loss, or on the same
// files) recovers every acknowledged offset and accepts writes again.
func TestFsyncEIOFailsTopicUntilRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ext   string
		crash bool
	}{
		{"segment fsync, restart after power loss", storage.SegmentExt, true},
		{"segment fsync, restart on same files", storage.SegmentExt, false},
		{"index fsync, restart after power loss", storage.IndexExt, true},
		{"index fsync, restart on same files", storage.IndexExt, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := testConfig(t, memRoot)
			a, base := startBroker(t, cfg, onMem(mem))
			const topic, other = "fault.eio", "fault.healthy"
			var acked []int
			for i := range 5 {
				st, out := publishAt(t, base, topic, map[string]any{"n": i}, "")
				require.Equal(t, 200, st, out)
				require.EqualValues(t, i, out["offset"])
				acked = append(acked, i)
			}
			st, out := publishAt(t, base, other, map[string]any{"n": 0}, "")
			require.Equal(t, 200, st, out)

			var fired atomic.Int64
			mem.SetHook(failOn(vfs.OpSync, topic, tc.ext, syscall.EIO, true, &fired))
			st, out = publishAt(t, base, topic, map[string]any{"n": 100}, "")
			requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)
			assert.Contains(t, out["error"], "input/output error")
			assert.Contains(t, out["error"], "(EIO)", "the cause is named")
			require.EqualValues(t, 1, fired.Load(), "the fault was injected once; later fsyncs succeed")

			// Nothing after the failure is ever acknowledged, at any level.
			for i, lvl := range []string{"durable", "written", "accepted", "durable"} {
				st, out = publishAt(t, base, topic, map[string]any{"n": 200 + i}, lvl)
				requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)
			}
			row, ok := topicRow(t, base, topic)
			require.True(t, ok)
			assert.Contains(t, row.Failed, "input/output error", "GET /topics shows the failure")
			assert.EqualValues(t, 5, row.NextOffset, "the high watermark did not move")

			// Other topics keep working; acknowledged data stays readable.
			st, out = publishAt(t, base, other, map[string]any{"n": 1}, "")
			require.Equal(t, 200, st, out)
			assert.EqualValues(t, 1, out["offset"])
			assert.EqualValues(t, 5, requireAcked(t, base, topic, acked))

			a.RequireStop()
			mem.SetHook(nil)
			fs2 := mem
			if tc.crash {
				fs2 = mem.Crash(vfs.CrashOptions{})
			}
			a2, base2 := startBroker(t, cfg, onMem(fs2))
			defer a2.RequireStop()
			hw := requireAcked(t, base2, topic, acked)
			// The NACKed publish's outcome is unknown (like a lost reply): it
			// may survive when only the index fsync failed and the files were
			// not lost; nothing published after the failure ever does.
			switch {
			case hw == 5:
			case hw == 6 && tc.ext == storage.IndexExt && !tc.crash:
				_, page, _ := readTopic(t, base2, topic)
				assert.Equal(t, map[string]any{"n": float64(100)}, contentOf(t, page.Messages[5].Message))
			default:
				t.Fatalf("high watermark after restart %d, want 5 (or 6 when only the index fsync failed)", hw)
			}
			requireAcked(t, base2, other, []int{0, 1})
			st, out = publishAt(t, base2, topic, map[string]any{"n": 300}, "")
			require.Equal(t, 200, st, "the reopened topic accepts writes: %v", out)
			assert.EqualValues(t, hw, out["offset"])
		})
	}
}

// TestDiskFullFailsTopicThenRecovers: with the disk guard off, a write
// that meets a full disk (MemFS capacity), segment or index, fails its
// topic: 503 TOPIC_FAILED naming ENOSPC, and the topic stays failed
// (TOPIC_FAILED, not NO_SPACE: it needs an operator) even once space is
// freed, while a topic that did not hit the full disk writes again as soon
// as space is freed; the files are never corrupt (storage.Verify: OK or
// TORN_TAIL), and after a restart every acknowledged message is intact and
// writes succeed.
func TestDiskFullFailsTopicThenRecovers(t *testing.T) {
	const content = "0123456789abcdef0123456789abcdef" // same size for every message
	for _, tc := range []struct {
		name  string
		slack func(entry int64) int64 // free bytes left when the disk fills
		crash bool
	}{
		{"no byte free", func(int64) int64 { return 0 }, false},
		{"segment write torn", func(e int64) int64 { return e / 2 }, false},
		{"segment fits, index write torn", func(e int64) int64 { return e + storage.IndexEntrySize/2 }, false},
		{"segment write torn, power loss", func(e int64) int64 { return e / 2 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			cfg := testConfig(t, memRoot)
			// The disk guard off: this test is about a write that meets
			// a full disk (TestDiskGuard507OnRealTmpfs: the guard).
			// And preallocation off: a write into preallocated zeros
			// needs no free space (TestPreallocDiskGuard in
			// modules/storage: preallocation under the guard).
			config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.MinFreeBytes, st.Preallocate = 0, 0 })
			a, base := startBroker(t, cfg, onMem(mem))
			const topic, other = "full.disk", "full.other"
			msg := func(i int) map[string]any { return map[string]any{"n": i, "pad": content} }
			var acked []int
			for i := range 4 {
				st, out := publishAt(t, base, topic, msg(i), "")
				require.Equal(t, 200, st, out)
				acked = append(acked, i)
			}
			st, out := publishAt(t, base, other, msg(0), "")
			require.Equal(t, 200, st, out)
			row, _ := topicRow(t, base, topic)
			entry := row.Bytes / 4
			require.Equal(t, entry*4, row.Bytes, "equal-size entries")

			mem.SetCapacity(memUsage(t, mem, "/") + tc.slack(entry))
			st, out = publishAt(t, base, topic, msg(100), "")
			requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)
			assert.Contains(t, out["error"], "no space left on device")
			assert.Contains(t, out["error"], "(ENOSPC)", "the cause is named")
			// Still full, then freed: the failed topic answers TOPIC_FAILED
			// until it is reopened.
			st, out = publishAt(t, base, topic, msg(101), "written")
			requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)
			mem.SetCapacity(0)
			st, out = publishAt(t, base, topic, msg(102), "")
			requireNACK(t, st, out, http.StatusServiceUnavailable, contract.CodeTopicFailed)
			// A topic that did not hit the full disk writes again at once.
			st, out = publishAt(t, base, other, msg(1), "")
			require.Equal(t, 200, st, out)
			requireAckedPadded(t, base, topic, acked)
			a.RequireStop()

			fs2 := mem
			if tc.crash {
				fs2 = mem.Crash(vfs.CrashOptions{})
			}
			// Offline check before restart recovery touches anything.
			rep, err := storage.Verify(path.Join(memRoot, topic), storage.Options{FS: fs2}, nil)
			require.NoError(t, err)
			assert.Contains(t, []string{storage.StatusOK, storage.StatusTornTail}, rep.Status, "report %+v", rep)
			assert.EqualValues(t, 4, rep.Entries, "verify sees exactly the acknowledged entries")

			a2, base2 := startBroker(t, cfg, onMem(fs2))
			defer a2.RequireStop()
			requireAckedPadded(t, base2, topic, acked)
			st, out = publishAt(t, base2, topic, msg(4), "")
			require.Equal(t, 200, st, "writes succeed after space is freed and the broker restarts: %v", out)
			assert.EqualValues(t, 4, out["offset"])
			rep, err = storage.Verify(path.Join(memRoot, topic), storage.Options{FS: fs2}, nil)
			require.NoError(t, err)
			assert.Equal(t, storage.StatusOK, rep.Status, "report %+v", rep)
		})
	}
}

// requireAckedPadded is requireAcked for the {"n": i, "pad": ...} contents of
// TestDiskFullFailsTopicThenRecovers, and checks nothing else is visible.
func requireAckedPadded(t *testing.T, base, topic string, acked []int) {
	t.Helper()
	st, page, eb := readTopic(t, base, topic)
	require.Equal(t, http.StatusOK, st, "read %s: %v", topic, eb)
	require.Len(t, page.Messages, len(acked), "exactly the acknowledged messages are visible")
	for i, n := range acked {
		require.Empty(t, page.Messages[i].Error)
		c, _ := contentOf(t, page.Messages[i].Message).(map[string]any)
		assert.Equal(t, float64(n), c["n"], "offset %d", i)
	}
}

// TestReadErrors503: a read error (EIO on ReadAt) on GET
// /topics/{t}/messages answers 503 JSON NACK, the broker keeps serving, a
// dispatcher retries the read with backoff instead of skipping, and
// everything is delivered in order once reads work again.
func TestReadErrors503(t *testing.T) {
	mem := vfs.NewMem()
	cons := newConsumer(t)
	plugin := provideDispatcher(dispatcher.New("read-dispatcher", cons.host(t), dispatcher.MustPattern("read.**")))
	cfg := testConfig(t, memRoot)
	var fired atomic.Int64
	mem.SetHook(failOn(vfs.OpRead, "read.topic", "", syscall.EIO, false, &fired))
	a, base := startBroker(t, cfg, onMem(mem), plugin)
	defer a.RequireStop()

	publishN(t, base, "read.topic", 3)
	for _, ext := range []string{storage.IndexExt, storage.SegmentExt} {
		fired.Store(0)
		mem.SetHook(failOn(vfs.OpRead, "read.topic", ext, syscall.EIO, false, &fired))
		st, _, eb := readTopic(t, base, "read.topic")
		requireNACK(t, st, eb, http.StatusServiceUnavailable, contract.CodeUnavailable)
		assert.Contains(t, eb["error"], "input/output error")
		assert.Positive(t, fired.Load())
	}
	// The broker still serves; the dispatcher keeps retrying, delivers nothing.
	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode)
	require.Eventually(t, func() bool { return fired.Load() >= 3 }, 10*time.Second, 5*time.Millisecond,
		"the dispatcher retries the read")
	cons.mu.Lock()
	assert.Empty(t, cons.got, "nothing is delivered while reads fail")
	cons.mu.Unlock()

	mem.SetHook(nil)
	requireAcked(t, base, "read.topic", []int{0, 1, 2})
	got := cons.waitFor(t, 3)
	require.Len(t, got, 3)
	for i, r := range got {
		assert.EqualValues(t, i, r.Offset, "in order, nothing skipped")
		assert.Equal(t, map[string]any{"n": float64(i)}, r.Body["content"])
	}
}
