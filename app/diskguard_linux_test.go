//go:build linux

package app_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mmmq/mmmq/modules/config"
	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/storage/vfs/vfstest"
	"github.com/mmmq/mmmq/modules/topicqueue"
	"github.com/mmmq/mmmq/plugins/lineproto"
)

// guardClock is the disk guard's clock in these tests: it moves only
// when told, so "space is noticed again after the interval" needs no
// sleep.
type guardClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *guardClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *guardClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// withGuardClock rebuilds the broker's disk guard with clock, keeping
// everything the configuration gave it.
func withGuardClock(cfg *config.Config, clock *guardClock) fx.Option {
	return fx.Decorate(func(fsys vfs.FS, log *zap.Logger) *storage.SpaceGuard {
		return storage.NewSpaceGuard(storage.SpaceGuardOptions{FS: fsys, Dir: config.SectionValue(cfg, topicqueue.StorageSection).RootDir,
			MinFree: config.SectionValue(cfg, topicqueue.StorageSection).MinFreeBytes, Now: clock.Now, Logger: log})
	})
}

// TestDiskGuard507OnRealTmpfs: the whole broker on a real 8 MiB tmpfs with
// min-free-bytes 2 MiB. Publishes of ~16 KiB (HTTP single) are answered 507
// NO_SPACE with Retry-After while statfs still shows free space — before
// any write meets ENOSPC, so no topic fails; a batch, a new topic and a
// line-protocol PUB are refused the same way; /readyz stays 200 and
// /metrics shows the free bytes and the refusals; exactly the
// acknowledged messages are readable. When an operator frees space,
// publishes are accepted again without a restart.
func TestDiskGuard507OnRealTmpfs(t *testing.T) {
	mnt := vfstest.MountTmpfs(t, 8<<20)
	filler := filepath.Join(mnt, "filler") // an operator's file, removed later
	require.NoError(t, os.WriteFile(filler, make([]byte, 2<<20), 0o644))
	cfg := testConfig(t, filepath.Join(mnt, "data"))
	config.EditSection(cfg, topicqueue.StorageSection, func(st *topicqueue.StorageConfig) { st.MinFreeBytes = 2 << 20 })
	config.EditSection(cfg, topicqueue.SegmentSection, func(seg *topicqueue.SegmentConfig) {
		seg.MaxBytes = 256 << 10
		seg.MaxRecordBytes = 64 << 10
	})
	lpAddr := freeAddr(t)
	config.SetSectionValue(cfg, lineproto.ConfigSection, lineproto.Config{Addr: lpAddr, MaxLineBytes: lineproto.ConfigSection.Default().MaxLineBytes, MaxPipeline: lineproto.DefaultMaxPipeline})
	clock := &guardClock{t: time.Unix(1_700_000_000, 0)}
	a, base := startBroker(t, cfg, withGuardClock(cfg, clock))
	defer a.RequireStop()

	const topic = "guard.orders"
	pad := strings.Repeat("x", 16000)
	var acked []int
	var st int
	var out map[string]any
	for i := 0; i < 5000; i++ {
		st, out = publishAt(t, base, topic, map[string]any{"n": i, "pad": pad}, "")
		if st != http.StatusOK {
			break
		}
		acked = append(acked, i)
	}
	requireNACK(t, st, out, http.StatusInsufficientStorage, contract.CodeNoSpace)
	assert.Contains(t, out["error"], "min-free-bytes")
	free, err := vfs.OS{}.FreeSpace(mnt)
	require.NoError(t, err)
	t.Logf("refused after %d acknowledged publishes with %d bytes free on the 8 MiB tmpfs (min-free-bytes 2 MiB)", len(acked), free)
	require.Greater(t, free, int64(1<<20), "refused before the disk was full")
	row, ok := topicRow(t, base, topic)
	require.True(t, ok)
	assert.Empty(t, row.Failed, "the guard refuses before any write fails the topic")

	// Retry-After on the single publish and on a batch; a new topic is
	// not created; the line protocol refuses with ERR NO_SPACE.
	resp := postRaw(t, base+"/messages", fmt.Sprintf(`{"topic":%q,"content":1}`, topic))
	assert.Equal(t, http.StatusInsufficientStorage, resp.StatusCode)
	assert.Equal(t, contract.NoSpaceRetryAfter, resp.Header.Get("Retry-After"))
	resp = postRaw(t, base+"/messages/batch", fmt.Sprintf(`[{"topic":%q,"content":1},{"topic":%q,"content":2}]`, topic, topic))
	assert.Equal(t, http.StatusInsufficientStorage, resp.StatusCode)
	assert.Equal(t, contract.NoSpaceRetryAfter, resp.Header.Get("Retry-After"))
	st, out = publishAt(t, base, "guard.new", 1, "")
	requireNACK(t, st, out, http.StatusInsufficientStorage, contract.CodeNoSpace)
	_, err = os.Stat(filepath.Join(mnt, "data", "guard.new"))
	assert.True(t, os.IsNotExist(err), "a refused publish creates no topic: %v", err)
	c, err := net.Dial("tcp", lpAddr)
	require.NoError(t, err)
	defer c.Close()
	rd := bufio.NewReader(c)
	fmt.Fprintf(c, "PUB %s DURABLE {\"n\":-1}\n", topic)
	line, err := rd.ReadString('\n')
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(line, "ERR NO_SPACE "), line)

	resp, err = http.Get(base + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "/readyz stays ready while the guard refuses")
	m := scrape(t, base)
	assert.Contains(t, m, "mmmq_storage_space_refusing 1")
	assert.Contains(t, m, "mmmq_storage_free_bytes ")
	assert.Contains(t, m, "mmmq_storage_space_refused_total 5")
	assert.Contains(t, m, "mmmq_storage_min_free_bytes 2.097152e+06")
	requireExactly(t, base, topic, acked)

	// A scheduled publish meets the same guard: 507 with Retry-After, and
	// nothing is written to the scheduled store.
	resp = postRaw(t, base+"/messages", fmt.Sprintf(`{"topic":%q,"content":1,"delay":"1h"}`, topic))
	assert.Equal(t, http.StatusInsufficientStorage, resp.StatusCode)
	assert.Equal(t, contract.NoSpaceRetryAfter, resp.Header.Get("Retry-After"))
	if ents, err := os.ReadDir(filepath.Join(mnt, "data", ".scheduled")); err == nil {
		assert.Empty(t, ents, "a refused scheduled publish wrote to the scheduled store")
	}

	// An operator frees space: accepted again once the guard samples.
	require.NoError(t, os.Remove(filler))
	clock.Advance(storage.DefaultSpaceCheckInterval)
	for i := 0; i < 3; i++ {
		n := 10_000 + i
		st, out = publishAt(t, base, topic, map[string]any{"n": n, "pad": pad}, "")
		require.Equal(t, http.StatusOK, st, "publish after space was freed: %v", out)
		require.EqualValues(t, len(acked), out["offset"])
		acked = append(acked, n)
	}
	fmt.Fprintf(c, "PUB %s DURABLE {\"n\":%d}\n", topic, 20_000)
	line, err = rd.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("OK %d DURABLE\n", len(acked)), line)
	assert.Contains(t, scrape(t, base), "mmmq_storage_space_refusing 0")
	requireExactly(t, base, topic, append(acked, 20_000))
}

// requireExactly reads topic page by page and checks that exactly the
// messages {"n": acked[i], ...} are visible, at offsets 0, 1, ...
func requireExactly(t *testing.T, base, topic string, acked []int) {
	t.Helper()
	var got []int
	for next := 0; ; {
		resp, err := http.Get(fmt.Sprintf("%s/topics/%s/messages?offset=%d&limit=100", base, topic, next))
		require.NoError(t, err)
		var page readPage
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		for _, it := range page.Messages {
			require.Empty(t, it.Error, "offset %d", it.Offset)
			require.EqualValues(t, len(got), it.Offset)
			var m struct {
				Content struct{ N int } `json:"content"`
			}
			require.NoError(t, json.Unmarshal(it.Message, &m))
			got = append(got, m.Content.N)
		}
		if len(page.Messages) == 0 {
			break
		}
		next = int(page.NextOffset)
	}
	require.Equal(t, len(acked), len(got), "exactly the acknowledged messages are visible")
	for i := range acked {
		require.Equal(t, acked[i], got[i], "offset %d", i)
	}
}

// postRaw posts body as JSON and returns the response with its body read
// and closed.
func postRaw(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// scrape returns the /metrics text.
func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestDiskGuardLargerThanFilesystemWarnsAtStartup: the default
// min-free-bytes (256 MiB) on an 8 MiB tmpfs can never be met; the broker
// says so when it starts, naming both numbers and the key, instead of
// first at a refused publish.
func TestDiskGuardLargerThanFilesystemWarnsAtStartup(t *testing.T) {
	mnt := vfstest.MountTmpfs(t, 8<<20)
	cfg := testConfig(t, filepath.Join(mnt, "data"))
	require.Equal(t, int64(storage.DefaultMinFreeBytes), config.SectionValue(cfg, topicqueue.StorageSection).MinFreeBytes)
	core, logs := observer.New(zapcore.WarnLevel)
	a, _ := startBroker(t, cfg, fx.Decorate(func(l *zap.Logger) *zap.Logger { return zap.New(zapcore.NewTee(l.Core(), core)) }))
	defer a.RequireStop()
	warned := logs.FilterMessageSnippet("smaller than mmmq.broker.storage.min-free-bytes").All()
	require.Len(t, warned, 1, "startup warnings: %v", logs.All())
	f := warned[0].ContextMap()
	assert.Equal(t, int64(8<<20), f["filesystem-bytes"])
	assert.Equal(t, int64(storage.DefaultMinFreeBytes), f["min-free-bytes"])
	assert.Equal(t, filepath.Join(mnt, "data"), f["dir"])
}
