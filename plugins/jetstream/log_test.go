package jetstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/mmmq/mmmq/modules/contract"
)

func open(t *testing.T, b *Backend, topic string) *Log {
	t.Helper()
	l, err := b.Open(topic, true)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l.(*Log)
}

func msg(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"timestamp":%d}`, i, 1000+i) }

// Offsets start at 0 and grow by one per message at every level; a batch
// takes consecutive offsets; everything reads back byte for byte.
func TestAppendLevelsAndReadBack(t *testing.T) {
	b := connect(t, startServer(t))
	l := open(t, b, "orders.created")
	ctx := context.Background()

	var want [][]byte
	for i, lvl := range []contract.AckLevel{contract.Durable, contract.Written, contract.Durable} {
		off, err := l.Append(ctx, msg(i), lvl)
		require.NoError(t, err)
		assert.EqualValues(t, i, off)
		want = append(want, msg(i))
	}
	off, err := l.Append(ctx, msg(3), contract.Accepted)
	require.NoError(t, err)
	assert.EqualValues(t, -1, off, "accepted promises no offset")
	want = append(want, msg(3))
	require.Eventually(t, func() bool { return l.HighWatermark() == 4 }, 5*time.Second, 5*time.Millisecond)

	batch := [][]byte{msg(4), msg(5), msg(6)}
	first, err := l.AppendBatch(ctx, batch, contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 4, first)
	want = append(want, batch...)
	first, err = l.AppendBatch(ctx, [][]byte{msg(7), msg(8)}, contract.Accepted)
	require.NoError(t, err)
	assert.EqualValues(t, -1, first)
	want = append(want, msg(7), msg(8))
	require.Eventually(t, func() bool { return l.HighWatermark() == 9 }, 5*time.Second, 5*time.Millisecond)

	for i, w := range want {
		got, err := l.Read(int64(i))
		require.NoError(t, err)
		assert.Equal(t, string(w), string(got), "offset %d", i)
	}
	ents, err := l.ReadBatch(2, 100)
	require.NoError(t, err)
	require.Len(t, ents, 7)
	for i, e := range ents {
		assert.EqualValues(t, i+2, e.Offset)
		assert.Equal(t, string(want[i+2]), string(e.Payload))
	}
	ents, err = l.ReadBatch(9, 10)
	require.NoError(t, err)
	assert.Empty(t, ents)

	st := l.Stats()
	assert.EqualValues(t, 9, st.NextOffset)
	assert.EqualValues(t, 0, st.StartOffset)
	assert.Positive(t, st.Bytes)
	assert.Empty(t, st.Failed)

	at, err := l.OffsetAt(time.UnixMilli(1005))
	require.NoError(t, err)
	assert.EqualValues(t, 5, at)
	at, err = l.OffsetAt(time.UnixMilli(99999))
	require.NoError(t, err)
	assert.EqualValues(t, 9, at)
}

// Concurrent single appends get distinct offsets without gaps.
func TestConcurrentAppendsContiguous(t *testing.T) {
	b := connect(t, startServer(t))
	l := open(t, b, "c")
	const n = 8
	const each = 20
	errs := make(chan error, n)
	offs := make(chan int64, n*each)
	for g := 0; g < n; g++ {
		go func() {
			for i := 0; i < each; i++ {
				o, err := l.Append(context.Background(), msg(i), contract.Durable)
				if err != nil {
					errs <- err
					return
				}
				offs <- o
			}
			errs <- nil
		}()
	}
	for g := 0; g < n; g++ {
		require.NoError(t, <-errs)
	}
	close(offs)
	seen := map[int64]bool{}
	for o := range offs {
		assert.False(t, seen[o], "offset %d twice", o)
		seen[o] = true
	}
	for o := int64(0); o < n*each; o++ {
		assert.True(t, seen[o], "offset %d missing", o)
	}
	assert.EqualValues(t, n*each, l.HighWatermark())
}

// A message published through another broker (a second Backend on the same
// server) raises this broker's high watermark and wakes its Notify.
func TestHighWatermarkFollowsOtherNode(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	la := open(t, a, "shared.topic")
	lb := open(t, b, "shared.topic")
	assert.Equal(t, la.Incarnation(), lb.Incarnation(), "one topic, one incarnation on every node")

	ch := la.Notify(0)
	select {
	case <-ch:
		t.Fatal("Notify(0) closed before anything was stored")
	default:
	}
	off, err := lb.Append(context.Background(), msg(0), contract.Durable)
	require.NoError(t, err)
	require.EqualValues(t, 0, off)
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify(0) not closed after another node stored offset 0")
	}
	assert.EqualValues(t, 1, la.HighWatermark())
	got, err := la.Read(0)
	require.NoError(t, err)
	assert.Equal(t, string(msg(0)), string(got))

	// Both nodes append: offsets stay contiguous across them.
	o1, err := la.Append(context.Background(), msg(1), contract.Durable)
	require.NoError(t, err)
	o2, err := lb.AppendBatch(context.Background(), [][]byte{msg(2), msg(3)}, contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 1, o1)
	assert.EqualValues(t, 2, o2)
	require.Eventually(t, func() bool { return la.HighWatermark() == 4 }, 5*time.Second, 5*time.Millisecond)

	// Notify of an offset already stored is closed at once.
	select {
	case <-la.Notify(3):
	default:
		t.Fatal("Notify(3) open with the high watermark at 4")
	}
}

// A log opened on a stream that already holds messages starts at their
// high watermark.
func TestReopenKeepsOffsets(t *testing.T) {
	s := startServer(t)
	b := connect(t, s)
	l := open(t, b, "re.open")
	_, err := l.AppendBatch(context.Background(), [][]byte{msg(0), msg(1)}, contract.Durable)
	require.NoError(t, err)
	require.NoError(t, l.Close())

	l2, err := b.Open("re.open", false)
	require.NoError(t, err)
	defer l2.Close()
	assert.EqualValues(t, 2, l2.HighWatermark())
	off, err := l2.Append(context.Background(), msg(2), contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 2, off)
}

// Refusals before anything is sent, and reads out of range, carry the
// local log's sentinels and classify as it does.
func TestErrors(t *testing.T) {
	b := connect(t, startServer(t))
	l := open(t, b, "errs")
	ctx := context.Background()

	_, err := l.Append(ctx, []byte("x"), contract.Durable)
	require.ErrorIs(t, err, contract.ErrEmptyRecord)
	assert.Equal(t, http.StatusBadRequest, contract.Classify(err).Status)
	_, err = l.Append(ctx, make([]byte, 1<<16+1), contract.Durable)
	require.ErrorIs(t, err, contract.ErrRecordTooLarge)
	assert.Equal(t, contract.CodeTooLarge, contract.Classify(err).Code)
	_, err = l.AppendBatch(ctx, [][]byte{msg(0), nil}, contract.Durable)
	require.ErrorIs(t, err, contract.ErrEmptyRecord)
	big := make([][]byte, MaxBatch+1)
	for i := range big {
		big[i] = msg(i)
	}
	_, err = l.AppendBatch(ctx, big, contract.Durable)
	require.ErrorIs(t, err, ErrBatchTooLarge)
	assert.Equal(t, contract.CodeTooLarge, contract.Classify(err).Code)
	assert.EqualValues(t, 0, l.HighWatermark(), "nothing of the refused appends was stored")

	_, err = l.Read(0)
	require.ErrorIs(t, err, contract.ErrOutOfRange)
	_, err = l.Read(-1)
	require.ErrorIs(t, err, contract.ErrOutOfRange)
	_, err = l.ReadBatch(-1, 10)
	require.ErrorIs(t, err, contract.ErrOutOfRange)

	_, err = b.Open("no.such", false)
	require.ErrorIs(t, err, ErrNoTopic)
	assert.Equal(t, http.StatusNotFound, contract.Classify(err).Status)
}

// A batch over the servers' own atomic-batch limit (lowered here to 2) is
// refused whole, as ErrBatchTooLarge: nothing of it is stored, and the
// offsets stay contiguous.
func TestServerBatchLimit(t *testing.T) {
	b := connect(t, startServerWith(t, func(o *server.Options) { o.JetStreamLimits.MaxBatchSize = 2 }))
	l := open(t, b, "limited")
	first, err := l.AppendBatch(context.Background(), [][]byte{msg(0), msg(1)}, contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 0, first)
	_, err = l.AppendBatch(context.Background(), [][]byte{msg(2), msg(3), msg(4)}, contract.Durable)
	require.ErrorIs(t, err, ErrBatchTooLarge)
	assert.Equal(t, contract.CodeTooLarge, contract.Classify(err).Code)
	off, err := l.Append(context.Background(), msg(5), contract.Durable)
	require.NoError(t, err)
	assert.EqualValues(t, 2, off, "the refused batch took no offsets")
	got, err := l.Read(2)
	require.NoError(t, err)
	assert.Equal(t, string(msg(5)), string(got))
}

// Close wakes Notify, fails later calls with contract.ErrClosed, and waits for the
// acknowledgements of accepted appends.
func TestClose(t *testing.T) {
	b := connect(t, startServer(t))
	l := open(t, b, "closing")
	ch := l.Notify(0)
	for i := 0; i < 50; i++ {
		_, err := l.Append(context.Background(), msg(i), contract.Accepted)
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	assert.EqualValues(t, 50, l.HighWatermark(), "Close waited for the accepted appends")
	select {
	case <-ch:
	default:
		t.Fatal("Notify channel open after Close")
	}
	select {
	case <-l.Notify(100):
	default:
		t.Fatal("Notify after Close not closed")
	}
	_, err := l.Append(context.Background(), msg(0), contract.Durable)
	require.ErrorIs(t, err, contract.ErrClosed)
	_, err = l.Read(0)
	require.ErrorIs(t, err, contract.ErrClosed)
	_, err = l.ReadBatch(0, 1)
	require.ErrorIs(t, err, contract.ErrClosed)
	_, err = l.OpenCheckpoint("d")
	require.ErrorIs(t, err, contract.ErrClosed)
	require.NoError(t, l.Close(), "a second Close")
}

// Checkpoints: committed with compare-and-set, read back by another node,
// listed, refused when another node committed in between.
func TestCheckpoints(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	la := open(t, a, "cp.topic")
	cp, err := la.OpenCheckpoint("disp.one")
	require.NoError(t, err)
	assert.EqualValues(t, 0, cp.Offset())
	again, err := la.OpenCheckpoint("disp.one")
	require.NoError(t, err)
	assert.Same(t, cp, again)
	require.NoError(t, cp.Commit(5))
	require.NoError(t, cp.Commit(7))
	assert.EqualValues(t, 7, cp.Offset())
	assert.Contains(t, cp.Path(), "mmmq-checkpoints")

	lb := open(t, b, "cp.topic")
	cpb, err := lb.OpenCheckpoint("disp.one")
	require.NoError(t, err)
	assert.EqualValues(t, 7, cpb.Offset())
	_, err = lb.OpenCheckpoint("never-committed")
	require.NoError(t, err)
	names, err := lb.Checkpoints()
	require.NoError(t, err)
	assert.Equal(t, []string{"disp.one"}, names)

	require.NoError(t, cpb.Commit(9))
	err = cp.Commit(8)
	require.Error(t, err, "the checkpoint changed under it")
	assert.EqualValues(t, 7, cp.Offset())

	_, err = la.OpenCheckpoint("../bad")
	require.Error(t, err)
}

// Topics lists this prefix's streams by topic name (long names through the
// metadata), and Delete removes a topic with its checkpoints.
func TestTopicsAndDelete(t *testing.T) {
	b := connect(t, startServer(t))
	long := strings.Repeat("x_", 124) + "y"
	for _, name := range []string{"b.two", "a.one", long} {
		l := open(t, b, name)
		_, err := l.Append(context.Background(), msg(0), contract.Durable)
		require.NoError(t, err)
		require.NoError(t, l.Close())
	}
	names, skipped, err := b.Topics()
	require.NoError(t, err)
	assert.Equal(t, []string{"a.one", "b.two", long}, names)
	assert.Empty(t, skipped)

	l, err := b.Open(long, false)
	require.NoError(t, err)
	got, err := l.Read(0)
	require.NoError(t, err)
	assert.Equal(t, string(msg(0)), string(got))
	cp, err := l.OpenCheckpoint("g")
	require.NoError(t, err)
	require.NoError(t, cp.Commit(1))
	require.NoError(t, l.Close())

	stored, err := b.Delete(long)
	require.NoError(t, err)
	assert.False(t, stored)
	names, _, err = b.Topics()
	require.NoError(t, err)
	assert.Equal(t, []string{"a.one", "b.two"}, names)
	l2 := open(t, b, long)
	assert.EqualValues(t, 0, l2.HighWatermark(), "created anew")
	assert.Len(t, l2.Incarnation(), 32)
	assert.NotEqual(t, l.(*Log).Incarnation(), l2.Incarnation(), "a new incarnation")
	names2, err := l2.Checkpoints()
	require.NoError(t, err)
	assert.Empty(t, names2, "the deleted topic's checkpoints went with it")

	release, err := b.Lock()
	require.NoError(t, err)
	require.NoError(t, release())
}

// Connecting to a port where nothing listens fails within the connect
// timeout, naming the server.
func TestConnectFails(t *testing.T) {
	s := startServer(t)
	url := s.ClientURL()
	s.Shutdown()
	s.WaitForShutdown()
	c := testConfig(s)
	c.Servers = url
	start := time.Now()
	_, err := Connect(c, 1<<16, nil, nil)
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.True(t, strings.HasPrefix(err.Error(), "jetstream: connect "+url+": "), err.Error())
	assert.False(t, errors.Is(err, contract.ErrClosed))
}

// ReadBatch serves at most maxReadBatch entries per call, in order, and
// the next call continues where it stopped.
func TestReadBatchBounded(t *testing.T) {
	b := connect(t, startServer(t))
	l := open(t, b, "many")
	for k := 0; k < 3; k++ {
		batch := make([][]byte, 100)
		for i := range batch {
			batch[i] = msg(100*k + i)
		}
		_, err := l.AppendBatch(context.Background(), batch, contract.Written)
		require.NoError(t, err)
	}
	ents, err := l.ReadBatch(0, 1000)
	require.NoError(t, err)
	require.Len(t, ents, maxReadBatch)
	rest, err := l.ReadBatch(int64(len(ents)), 1000)
	require.NoError(t, err)
	ents = append(ents, rest...)
	require.Len(t, ents, 300)
	for i, e := range ents {
		require.EqualValues(t, i, e.Offset)
		require.Equal(t, string(msg(i)), string(e.Payload))
	}
}

// With the server gone: a DURABLE append fails as 503 (never acknowledged),
// an ACCEPTED one is answered, and Close does not wait longer than the
// request timeout for its acknowledgement.
func TestServerGone(t *testing.T) {
	s := startServer(t)
	c := testConfig(s)
	c.RequestTimeout = 500 * time.Millisecond
	b := connectWith(t, c)
	l := open(t, b, "gone")
	_, err := l.Append(context.Background(), msg(0), contract.Durable)
	require.NoError(t, err)
	s.Shutdown()
	s.WaitForShutdown()

	_, err = l.Append(context.Background(), msg(1), contract.Durable)
	require.Error(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, contract.Classify(err).Status, err.Error())
	off, err := l.Append(context.Background(), msg(2), contract.Accepted)
	if err == nil {
		assert.EqualValues(t, -1, off)
	}
	_, err = l.Read(0)
	require.Error(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, contract.Classify(err).Status, err.Error())
	assert.EqualValues(t, 1, l.HighWatermark(), "nothing unacknowledged counted")

	start := time.Now()
	_ = l.Close()
	assert.Less(t, time.Since(start), c.RequestTimeout+time.Second)
}

// Two brokers creating the same topic at once both open it, with one
// incarnation.
func TestConcurrentCreate(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	for i := 0; i < 5; i++ {
		topic := fmt.Sprintf("race.t%d", i)
		logs := make([]contract.Log, 2)
		errs := make([]error, 2)
		done := make(chan struct{})
		go func() { logs[1], errs[1] = b.Open(topic, true); close(done) }()
		logs[0], errs[0] = a.Open(topic, true)
		<-done
		require.NoError(t, errs[0])
		require.NoError(t, errs[1])
		assert.Equal(t, logs[0].(*Log).Incarnation(), logs[1].(*Log).Incarnation(), topic)
		for _, l := range logs {
			require.NoError(t, l.Close())
		}
	}
}

// Three replicas on a single server: startup fails saying which key to
// change.
func TestReplicasHint(t *testing.T) {
	s := startServer(t)
	c := testConfig(s)
	c.Replicas = 3
	_, err := Connect(c, 1<<16, nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mmmq.jetstream.replicas is 3")
}

// AppendBatchNotify: consecutive calls get offsets in call order, each
// notify is called once with its first offset; refusals return at once
// without a call; a server gone fails the outstanding ones.
func TestAppendBatchNotify(t *testing.T) {
	s := startServer(t)
	// testConfig's 2 s request timeout: 500 ms was too short for an
	// acknowledgement on a loaded 2-core machine ("timeout waiting for
	// ack" in a CI-equivalent run); the server-gone case below waits 5 s.
	b := connectWith(t, testConfig(s))
	l := open(t, b, "notify")
	type result struct {
		call  int
		first int64
		err   error
	}
	results := make(chan result, 100)
	for i := 0; i < 20; i++ {
		payloads := [][]byte{msg(2 * i)}
		if i%2 == 1 {
			payloads = [][]byte{msg(2 * i), msg(2*i + 1)}
		}
		lvl := []contract.AckLevel{contract.Accepted, contract.Written, contract.Durable}[i%3]
		require.NoError(t, l.AppendBatchNotify(payloads, lvl, func(first int64, err error) {
			results <- result{i, first, err}
		}))
	}
	want := int64(0)
	got := map[int]int64{}
	for range 20 {
		select {
		case r := <-results:
			require.NoError(t, r.err)
			_, dup := got[r.call]
			require.False(t, dup, "notify of call %d twice", r.call)
			got[r.call] = r.first
		case <-time.After(5 * time.Second):
			t.Fatal("a notify never came")
		}
	}
	for i := 0; i < 20; i++ {
		assert.Equal(t, want, got[i], "call %d", i)
		want += int64(1 + i%2)
	}
	require.Eventually(t, func() bool { return l.HighWatermark() == want }, 5*time.Second, 5*time.Millisecond)
	p, err := l.Read(want - 1)
	require.NoError(t, err)
	assert.Equal(t, string(msg(39)), string(p))

	err = l.AppendBatchNotify([][]byte{nil}, contract.Durable, func(int64, error) { t.Error("notify of a refused append") })
	require.ErrorIs(t, err, contract.ErrEmptyRecord)

	// The server goes: an append sent just before fails through notify
	// (or is refused at once if the client already knows).
	s.Shutdown()
	s.WaitForShutdown()
	err = l.AppendBatchNotify([][]byte{msg(40)}, contract.Durable, func(first int64, err error) {
		results <- result{99, first, err}
	})
	if err == nil {
		select {
		case r := <-results:
			assert.EqualValues(t, -1, r.first)
			assert.Error(t, r.err)
		case <-time.After(5 * time.Second):
			t.Fatal("no notify after the server went")
		}
	}
}

// ACCEPTED appends hold their bytes of the in-flight budget until
// acknowledged, and are refused (nothing sent) when they do not fit.
func TestAcceptedBudget(t *testing.T) {
	s := startServer(t)
	budget := contract.NewBudget(100)
	b, err := Connect(testConfig(s), 1<<16, budget, zaptest.NewLogger(t))
	require.NoError(t, err)
	defer b.Close()
	l := open(t, b, "budget")
	_, err = l.Append(context.Background(), make([]byte, 101), contract.Accepted)
	require.ErrorIs(t, err, contract.ErrOverloaded)
	assert.Equal(t, contract.CodeOverloaded, contract.Classify(err).Code)
	for round := 1; round <= 3; round++ {
		for i := 0; i < 4; i++ { // 4 x 24 bytes fit in 100
			_, err = l.Append(context.Background(), msg(10+i), contract.Accepted)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool { return l.HighWatermark() == int64(4*round) && budget.InUse() == 0 },
			5*time.Second, 5*time.Millisecond, "the acknowledgements release the budget")
	}
	_, err = l.Append(context.Background(), make([]byte, 101), contract.Durable)
	require.NoError(t, err, "DURABLE appends wait instead of holding the budget")
}

// When the ordered consumer that keeps the high watermark current falls
// silent after an error (a node seen serving a stale end of its topic for
// a minute after its cluster regained quorum, its dispatcher idle at lag
// 0), the error starts a resync: the stream's state is read every
// resyncEvery and the high watermark raised to it, waking Notify. Without
// the error nothing is read (the consumer is trusted while it is quiet).
func TestResyncAfterConsumerErrorCatchesUp(t *testing.T) {
	every := resyncEvery
	resyncEvery = 50 * time.Millisecond
	t.Cleanup(func() { resyncEvery = every })
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	la, lb := open(t, a, "resync"), open(t, b, "resync")
	la.cons.Stop() // the feed of a's log goes silent, as it was seen to
	<-la.cons.Closed()
	for i := 0; i < 3; i++ {
		_, err := lb.Append(context.Background(), msg(i), contract.Durable)
		require.NoError(t, err)
	}
	woken := la.Notify(2)
	time.Sleep(3 * resyncEvery)
	require.EqualValues(t, 0, la.HighWatermark(), "the high watermark moved with the consumer stopped and no error")

	la.resync(errors.New("nats: no heartbeat received"))
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatalf("Notify(2) not woken after the consumer error; high watermark %d", la.HighWatermark())
	}
	assert.EqualValues(t, 3, la.HighWatermark())
	// Close ends the resync at once and waits for it.
	start := time.Now()
	require.NoError(t, la.Close())
	assert.Less(t, time.Since(start), time.Second)
	assert.False(t, la.resyncing.Load(), "a resync still runs after Close")
}

// A feed that falls silent without any error is caught by the topic
// watch's listing: each listing raises the high watermark to the stream's
// last sequence (waking Notify), and a feed that has not delivered even
// what the previous listing showed starts a resync. An idle topic whose
// feed is current starts none.
func TestListingRaisesStaleHighWatermark(t *testing.T) {
	s := startServer(t)
	a, b := connect(t, s), connect(t, s)
	la, lb := open(t, a, "listed"), open(t, b, "listed")
	w := &topicWatch{b: a, reported: map[string]string{}, fn: func(contract.TopicEvent) {}}
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		_, err := lb.Append(ctx, msg(i), contract.Durable)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return la.HighWatermark() == 2 }, 10*time.Second, 10*time.Millisecond)
	w.list(ctx) // idle and current: nothing to do
	w.list(ctx)
	require.False(t, la.resyncing.Load(), "a resync started for an idle topic whose feed is current")

	la.cons.Stop() // the feed of a's log goes silent, with no error
	<-la.cons.Closed()
	for i := 2; i < 5; i++ {
		_, err := lb.Append(ctx, msg(i), contract.Durable)
		require.NoError(t, err)
	}
	woken := la.Notify(4)
	require.EqualValues(t, 2, la.HighWatermark())
	w.list(ctx)
	select {
	case <-woken:
	default:
		t.Fatalf("Notify(4) not woken by the listing; high watermark %d", la.HighWatermark())
	}
	require.EqualValues(t, 5, la.HighWatermark())
	require.False(t, la.resyncing.Load(), "a resync started on the first listing that found the feed behind")

	_, err := lb.Append(ctx, msg(5), contract.Durable)
	require.NoError(t, err)
	w.list(ctx) // the feed has not delivered what the last listing showed
	require.EqualValues(t, 6, la.HighWatermark())
	require.True(t, la.resyncing.Load(), "no resync started for a feed behind a whole listing interval")
	require.NoError(t, la.Close())
}
