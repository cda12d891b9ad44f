package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/retention"
)

// withRetention sets b's retention policies from r, as NewFactory does.
func withRetention(t *testing.T, b *Backend, r retention.Config) {
	t.Helper()
	ro, err := retention.OptionsFromConfig(r)
	require.NoError(t, err)
	b.opts.Retention = ro.PolicyFor
}

// streamInfo is topic's stream as the cluster has it now.
func streamInfo(t *testing.T, b *Backend, topic string) *jetstream.StreamInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := b.js.Stream(ctx, StreamName(b.cfg.StreamPrefix, topic))
	require.NoError(t, err)
	info, err := str.Info(ctx)
	require.NoError(t, err)
	return info
}

func ptr[T any](v T) *T { return &v }

// A new stream gets its topic's policy as MaxAge and MaxBytes: the default
// one, or the first matching override's, whose missing limit is the
// default's; 0 is unlimited (MaxBytes -1, MaxAge 0). The duplicate window
// is cut to a shorter MaxAge.
func TestStreamLimitsFromRetention(t *testing.T) {
	b := connect(t, startServer(t))
	b.opts.DedupWindow = 2 * time.Minute
	withRetention(t, b, retention.Config{
		MaxAge: 24 * time.Hour, MaxBytes: 1 << 20,
		Topics: retention.TopicsConfig{
			{Pattern: "metrics.**", MaxAge: ptr(time.Minute)},
			{Pattern: "audit.*", MaxAge: ptr(time.Duration(0)), MaxBytes: ptr(int64(0))},
			{Pattern: "metrics.cpu", MaxBytes: ptr(int64(4096))}, // never: metrics.** matches first
		},
	})
	for _, tt := range []struct {
		topic    string
		maxAge   time.Duration
		maxBytes int64
		dups     time.Duration
	}{
		{"orders", 24 * time.Hour, 1 << 20, 2 * time.Minute},
		{"metrics.cpu", time.Minute, 1 << 20, time.Minute},
		{"audit.login", 0, -1, 2 * time.Minute},
	} {
		open(t, b, tt.topic)
		c := streamInfo(t, b, tt.topic).Config
		assert.Equal(t, tt.maxAge, c.MaxAge, tt.topic)
		assert.Equal(t, tt.maxBytes, c.MaxBytes, tt.topic)
		assert.Equal(t, tt.dups, c.Duplicates, tt.topic)
		assert.Equal(t, jetstream.DiscardOld, c.Discard, tt.topic)
		assert.True(t, c.DenyDelete, tt.topic)
	}

	// Without a policy, streams keep everything.
	b.opts.Retention = nil
	open(t, b, "plain")
	c := streamInfo(t, b, "plain").Config
	assert.Zero(t, c.MaxAge)
	assert.EqualValues(t, -1, c.MaxBytes)
}

// Opening an existing stream with another policy updates its limits and
// keeps the rest of its configuration, the incarnation included; its
// messages and offsets stay.
func TestReopenUpdatesLimits(t *testing.T) {
	b := connect(t, startServer(t))
	l := open(t, b, "orders")
	inc := l.Incarnation()
	require.NotEmpty(t, inc)
	_, err := l.Append(context.Background(), msg(0), contract.Durable)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	c := streamInfo(t, b, "orders").Config
	assert.EqualValues(t, -1, c.MaxBytes)
	assert.Zero(t, c.MaxAge)

	withRetention(t, b, retention.Config{MaxAge: time.Hour, MaxBytes: 1 << 20})
	l = open(t, b, "orders")
	assert.Equal(t, inc, l.Incarnation())
	info := streamInfo(t, b, "orders")
	assert.Equal(t, time.Hour, info.Config.MaxAge)
	assert.EqualValues(t, 1<<20, info.Config.MaxBytes)
	assert.Equal(t, inc, info.Config.Metadata[MetaIncarnation])
	assert.Equal(t, "orders", info.Config.Metadata[MetaTopic])
	assert.True(t, info.Config.DenyDelete)
	assert.True(t, info.Config.AllowAtomicPublish)
	assert.EqualValues(t, 1, info.State.Msgs, "the messages stay")
	off, err := l.Append(context.Background(), msg(1), contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 1, off)
	require.NoError(t, l.Close())

	// A backend without policies (not the broker's) leaves them.
	b.opts.Retention = nil
	l = open(t, b, "orders")
	require.NoError(t, l.Close())
	assert.Equal(t, time.Hour, streamInfo(t, b, "orders").Config.MaxAge)

	// Back to unlimited.
	withRetention(t, b, retention.Config{})
	open(t, b, "orders")
	info = streamInfo(t, b, "orders")
	assert.Zero(t, info.Config.MaxAge)
	assert.EqualValues(t, -1, info.Config.MaxBytes)
	assert.Equal(t, inc, info.Config.Metadata[MetaIncarnation])
}

// With a small MaxBytes JetStream drops the head: a read below the new
// start is a *contract.OffsetExpiredError giving the start, although the
// log's cached start was still 0; reads at and above it work, and new
// appends keep contiguous offsets.
func TestHeadDroppedIsOffsetExpired(t *testing.T) {
	b := connect(t, startServer(t))
	withRetention(t, b, retention.Config{MaxBytes: 4096})
	l := open(t, b, "small")
	require.True(t, l.limited)
	l.limited = false // no background refresh: this test checks the reads'
	ctx := context.Background()
	payload := func(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"timestamp":%d,"pad":"%0200d"}`, i, 1000+i, 0) }
	const n = 100
	for i := range n {
		off, err := l.Append(ctx, payload(i), contract.Durable)
		require.NoError(t, err)
		require.EqualValues(t, i, off)
	}
	assert.Zero(t, l.StartOffset(), "the cached start is not refreshed by appends")
	st := streamInfo(t, b, "small").State
	start := int64(st.FirstSeq) - 1
	require.Greater(t, start, int64(0), "the head was dropped")
	require.EqualValues(t, n, st.LastSeq)

	// A time search starting below the real start searches again from it.
	at, err := l.OffsetAt(time.UnixMilli(1000))
	require.NoError(t, err)
	assert.Equal(t, start, at)
	l.start.Store(0) // stale again

	_, err = l.Read(0)
	var oe *contract.OffsetExpiredError
	require.ErrorAs(t, err, &oe)
	assert.ErrorIs(t, err, contract.ErrOffsetExpired)
	assert.Equal(t, start, oe.StartOffset)
	assert.Zero(t, oe.Offset)
	assert.Equal(t, start, l.StartOffset(), "refreshed by the read")

	_, err = l.ReadBatch(start-1, 10)
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, start, oe.StartOffset)

	got, err := l.Read(start)
	require.NoError(t, err)
	assert.Equal(t, string(payload(int(start))), string(got))
	es, err := l.ReadBatch(start, n)
	require.NoError(t, err)
	require.Len(t, es, int(n-start))
	for i, e := range es {
		assert.Equal(t, start+int64(i), e.Offset)
		assert.Equal(t, string(payload(int(start)+i)), string(e.Payload))
	}

	off, err := l.Append(ctx, payload(n), contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, n, off)
	first, err := l.AppendBatch(ctx, [][]byte{payload(n + 1), payload(n + 2)}, contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, n+1, first)
	assert.EqualValues(t, n+3, l.HighWatermark())

	// A log opened now starts at the stream's first message.
	require.NoError(t, l.Close())
	l2 := open(t, b, "small")
	assert.Equal(t, int64(streamInfo(t, b, "small").State.FirstSeq)-1, l2.StartOffset())
	assert.Greater(t, l2.StartOffset(), start)
	assert.Equal(t, l2.StartOffset(), l2.Stats().StartOffset)
}

// On a stream with limits, StartOffset refreshes the cached start in the
// background, at most once per startRefresh, without waiting for it.
func TestStartOffsetRefreshedInBackground(t *testing.T) {
	b := connect(t, startServer(t))
	withRetention(t, b, retention.Config{MaxBytes: 2048})
	l := open(t, b, "bg")
	for i := range 40 {
		_, err := l.Append(context.Background(), fmt.Appendf(nil, `{"n":%d,"pad":"%0200d"}`, i, 0), contract.Durable)
		require.NoError(t, err)
	}
	start := int64(streamInfo(t, b, "bg").State.FirstSeq) - 1
	require.Positive(t, start)
	l.refreshedAt.Store(time.Now().UnixNano())
	assert.Zero(t, l.StartOffset(), "refreshed less than startRefresh ago: the cache")
	l.refreshedAt.Store(0)
	require.Eventually(t, func() bool { return l.StartOffset() == start }, 5*time.Second, 10*time.Millisecond)

	// A stream without limits never refreshes in the background.
	withRetention(t, b, retention.Config{})
	u := open(t, b, "unlimited")
	assert.False(t, u.limited)
}
