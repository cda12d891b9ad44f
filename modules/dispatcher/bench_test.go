package dispatcher

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
)

// Delivery benchmarks: a Manager over an in-memory topic (memTopic, whose
// checkpoints are real files: every commit is a write and an fsync) pushes
// to an httptest consumer in the same process, which reads each request
// and answers {"acknowledgement":"ACK"} at once, without parsing. Each op
// delivers a fixed number of stored messages (about 200 bytes of content)
// to a new dispatcher, from offset 0 until its checkpoint is committed at
// the end, and reports msgs/s (messages committed per second of wall time)
// and fsyncs/msg (checkpoint commits per message). The consumer shares the
// machine's cores with the broker side. Run with
//
//	go test -run '^$' -bench 'Replay|MaxInFlight' -benchtime 1x ./modules/dispatcher/
//	go test -run '^$' -bench Replay -benchtime 1x ./modules/dispatcher/ -dispatch.replay 1000000
var (
	replayCount = flag.Int("dispatch.replay", 100000,
		"messages stored and replayed per op by BenchmarkReplay")
	inFlightCount = flag.Int("dispatch.inflight", 5000,
		"messages delivered per op by BenchmarkMaxInFlight")
)

// BenchmarkReplay replays the stored messages to a new dispatcher, one
// message per push (batch=off) or up to 500 per push (batch=500), with the
// commit policy of a replay: interval 1 s or 1000 messages, and at the end.
func BenchmarkReplay(b *testing.B) {
	n := *replayCount
	tp := benchTopic(b, n)
	pol := CommitPolicy{Mode: Interval, Interval: time.Second, MaxCount: 1000}
	for _, c := range []struct {
		name  string
		batch Batch
	}{
		{"batch=off", Batch{}},
		{"batch=500", Batch{MaxMessages: 500}},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchDeliver(b, tp, n, func(d *Dispatcher) *Dispatcher {
				return d.WithCommitPolicy(pol).WithBatch(c.batch)
			})
		})
	}
}

// BenchmarkMaxInFlight delivers the stored messages one per push and
// commits after every message (the default policy: every commit an
// fsync of the checkpoint file), with one push at a time (max-in-flight=1,
// the original one-at-a-time delivery) or up to 64 (max-in-flight=64:
// one commit covers every answer that arrived meanwhile).
func BenchmarkMaxInFlight(b *testing.B) {
	n := *inFlightCount
	tp := benchTopic(b, n)
	for _, k := range []int{1, 64} {
		b.Run(fmt.Sprintf("max-in-flight=%d", k), func(b *testing.B) {
			benchDeliver(b, tp, n, func(d *Dispatcher) *Dispatcher { return d.WithMaxInFlight(k) })
		})
	}
}

// benchTopic returns a memTopic holding n stored messages of about 200
// bytes of content each, its checkpoints under a temporary directory.
func benchTopic(b *testing.B, n int) *memTopic {
	b.Helper()
	tp := &memTopic{
		name:     "bench",
		dir:      filepath.Join(b.TempDir(), "bench"),
		fs:       vfs.OS{},
		log:      zap.NewNop(),
		corrupt:  map[int64]bool{},
		waiting:  map[int64]chan struct{}{},
		cps:      map[string]*storage.Checkpoint{},
		payloads: make([][]byte, n),
	}
	if err := os.MkdirAll(tp.dir, 0o755); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(tp.closeCheckpoints)
	pad := strings.Repeat("x", 180)
	for i := range tp.payloads {
		tp.payloads[i] = fmt.Appendf(nil, `{"topic":{"name":"bench"},"content":{"n":%d,"pad":%q},"id":"m-%d","timestamp":1700000000000,"headers":{}}`, i, pad, i)
	}
	return tp
}

// benchSeq numbers the dispatchers of the benchmarks.
var benchSeq atomic.Int64

// benchDeliver runs b.N ops: each delivers the n messages of tp to a new
// dispatcher (configured by with) and waits until its checkpoint is n.
func benchDeliver(b *testing.B, tp *memTopic, n int, with func(*Dispatcher) *Dispatcher) {
	var msgs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		k := int64(1)
		if s := r.Header.Get(HeaderBatchSize); s != "" {
			k, _ = strconv.ParseInt(s, 10, 64)
		}
		msgs.Add(k)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"acknowledgement":"ACK"}`))
	}))
	defer srv.Close()
	host, err := ParseHost(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{DefaultTimeout: 30 * time.Second}
	var total time.Duration
	var commits uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A name never used on tp: a new checkpoint, from offset 0.
		name := fmt.Sprintf("bench-%d", benchSeq.Add(1))
		d := with(New(name, host, MustPattern("bench")))
		el, st := deliverAll(b, tp, d, opts, int64(n))
		total += el
		commits += st.Commits
	}
	b.StopTimer()
	if got := msgs.Load(); got < int64(n)*int64(b.N) {
		b.Fatalf("the consumer ACKed %d messages, want at least %d", got, int64(n)*int64(b.N))
	}
	b.ReportMetric(float64(n)*float64(b.N)/total.Seconds(), "msgs/s")
	b.ReportMetric(float64(commits)/(float64(n)*float64(b.N)), "fsyncs/msg")
}

// deliverAll starts a Manager delivering tp to d, waits until d's
// checkpoint on tp is n, stops it and returns the time from Start to that
// commit and d's worker status.
func deliverAll(b *testing.B, tp *memTopic, d *Dispatcher, opts Options, n int64) (time.Duration, WorkerStatus) {
	b.Helper()
	set, err := SetOf(d)
	if err != nil {
		b.Fatal(err)
	}
	sender := NewHTTPSender(opts)
	defer sender.CloseIdleConnections()
	m := NewManager(set, newMemSource(tp), sender, opts, nil)
	start := time.Now()
	if err := m.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := m.Stop(ctx); err != nil {
			b.Fatal(err)
		}
	}()
	for {
		st := status(m, d.Name(), tp.Name())
		if st.Committed >= n {
			return time.Since(start), st
		}
		if st.Err != "" {
			b.Fatalf("worker failed: %s", st.Err)
		}
		time.Sleep(time.Millisecond)
	}
}
