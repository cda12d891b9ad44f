package loadgen

import (
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// exactQuantile is the nearest-rank quantile of sorted values.
func exactQuantile(sorted []int64, q float64) int64 {
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

func TestBucketRangeCoversEveryValue(t *testing.T) {
	// Every value lands in a bucket whose range holds it, buckets are
	// contiguous and the last bucket reaches MaxInt64.
	prevHi := int64(-1)
	for i := 0; i < histBuckets; i++ {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		for _, v := range []int64{lo, hi, lo + (hi-lo)/2} {
			if got := bucketOf(v); got != i {
				t.Fatalf("bucketOf(%d) = %d, want %d", v, got, i)
			}
		}
		if i >= 2*histSub && float64(hi-lo+1)/float64(lo) > 1.0/histSub+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d of its values", i, lo, hi, histSub)
		}
		prevHi = hi
		if hi == math.MaxInt64 {
			if i != bucketOf(math.MaxInt64) {
				t.Fatalf("MaxInt64 reached at bucket %d, bucketOf says %d", i, bucketOf(math.MaxInt64))
			}
			return
		}
	}
	t.Fatalf("buckets end at %d, below MaxInt64", prevHi)
}

func TestQuantileMatchesSortedSample(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	dists := map[string]func() int64{
		"uniform 0-10ms":       func() int64 { return rng.Int64N(int64(10 * time.Millisecond)) },
		"lognormal around 1ms": func() int64 { return int64(math.Exp(rng.NormFloat64()) * float64(time.Millisecond)) },
		"small exact values":   func() int64 { return rng.Int64N(100) },
		"bimodal with tail": func() int64 {
			if rng.IntN(1000) == 0 {
				return int64(time.Second) + rng.Int64N(int64(time.Second))
			}
			return int64(200*time.Microsecond) + rng.Int64N(int64(50*time.Microsecond))
		},
	}
	for name, gen := range dists {
		t.Run(name, func(t *testing.T) {
			var h latencyHistogram
			vals := make([]int64, 20000)
			for i := range vals {
				vals[i] = gen()
				h.Record(time.Duration(vals[i]))
			}
			sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
			if h.Count() != uint64(len(vals)) {
				t.Fatalf("count %d, want %d", h.Count(), len(vals))
			}
			for _, q := range []float64{0, 0.01, 0.5, 0.9, 0.99, 0.999, 0.9999, 1} {
				want := exactQuantile(vals, q)
				if q == 0 {
					want = vals[0]
				}
				got := int64(h.Quantile(q))
				tol := float64(want)/histSub + 1
				if math.Abs(float64(got-want)) > tol {
					t.Errorf("q%.4f = %d, want %d ± %.0f", q, got, want, tol)
				}
			}
			if int64(h.Max()) != vals[len(vals)-1] {
				t.Errorf("max %d, want %d", h.Max(), vals[len(vals)-1])
			}
		})
	}
}

func TestQuantileSmallCounts(t *testing.T) {
	var h latencyHistogram
	if h.Quantile(0.5) != 0 || h.Max() != 0 {
		t.Fatalf("empty histogram: q50 %v max %v, want 0", h.Quantile(0.5), h.Max())
	}
	h.Record(3 * time.Millisecond)
	for _, q := range []float64{0, 0.5, 0.99, 1} {
		if got := h.Quantile(q); got != 3*time.Millisecond {
			t.Errorf("one value: q%v = %v, want 3ms (clamped to the exact min/max)", q, got)
		}
	}
	// Nearest rank over 1..100 (exact range): p50 is 50, p99 is 99, p999 is 100.
	var g latencyHistogram
	for v := 1; v <= 100; v++ {
		g.Record(time.Duration(v))
	}
	for q, want := range map[float64]time.Duration{0.5: 50, 0.99: 99, 0.999: 100, 0.01: 1} {
		if got := g.Quantile(q); got != want {
			t.Errorf("1..100: q%v = %d, want %d", q, got, want)
		}
	}
	var n latencyHistogram
	n.Record(-5)
	if n.Quantile(1) != 0 {
		t.Errorf("negative duration recorded as %v, want 0", n.Quantile(1))
	}
}

func TestMergeEqualsRecordingEverything(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var all, a, b, empty latencyHistogram
	for i := 0; i < 5000; i++ {
		v := time.Duration(rng.Int64N(int64(time.Second)))
		all.Record(v)
		if i%3 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	var m latencyHistogram
	m.Merge(&empty)
	m.Merge(&a)
	m.Merge(&b)
	m.Merge(&empty)
	if m != all {
		t.Fatalf("merged histogram differs: count %d/%d min %d/%d max %d/%d",
			m.total, all.total, m.min, all.min, m.max, all.max)
	}
}

func TestBenchContentSizeAndBody(t *testing.T) {
	for _, size := range []int{0, 7, 8, 9, 200, 4096} {
		c := benchContent(size)
		if !json.Valid(c) {
			t.Fatalf("size %d: content %q is not JSON", size, c)
		}
		if size >= 8 && len(c) != size {
			t.Errorf("size %d: content is %d bytes", size, len(c))
		}
	}
	one := benchBody("bench.0", benchContent(200), 1, false)
	var m struct {
		Topic   string          `json:"topic"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(one, &m); err != nil || m.Topic != "bench.0" || len(m.Content) != 200 {
		t.Fatalf("single body %q: %v %+v", one, err, m)
	}
	var arr []json.RawMessage
	if err := json.Unmarshal(benchBody("bench.1", benchContent(50), 7, true), &arr); err != nil || len(arr) != 7 {
		t.Fatalf("batch body: %v, %d messages, want 7", err, len(arr))
	}
}

func TestDeliveryCounter(t *testing.T) {
	d := newDeliveryCounter()
	now := time.Now()
	for _, a := range []struct {
		topic string
		off   int64
	}{
		{"a", 0}, {"a", 1}, {"b", 5}, {"a", 1}, {"a", 2}, {"b", 6}, {"a", 4}, {"a", 3}, {"b", 6}, {"a", 200},
	} {
		d.record(a.topic, a.off, now)
	}
	// unique: a{0,1,2,4,3,200} + b{5,6} = 8; dups: a1, b6 = 2;
	// violations: a4 (after 2), a3 (after 4), a200 (after 4) = 3.
	if d.unique != 8 || d.dups != 2 || d.violations != 3 || d.arrivals != 10 {
		t.Fatalf("unique %d dups %d violations %d arrivals %d, want 8 2 3 10",
			d.unique, d.dups, d.violations, d.arrivals)
	}
}

func TestFsyncsFromMetrics(t *testing.T) {
	text := `# HELP mmmq_storage_fsync_duration_seconds fsync latency
# TYPE mmmq_storage_fsync_duration_seconds histogram
mmmq_storage_fsync_duration_seconds_bucket{topic="a",le="0.001"} 3
mmmq_storage_fsync_duration_seconds_sum{topic="a"} 0.01
mmmq_storage_fsync_duration_seconds_count{topic="a"} 10
mmmq_storage_fsync_duration_seconds_count{topic="b"} 5 1700000000000
mmmq_checkpoint_fsyncs_total 99
go_goroutines 12
`
	name, v, ok := fsyncsFromMetrics(text)
	if !ok || name != "mmmq_storage_fsync_duration_seconds_count" || v != 15 {
		t.Fatalf("got %q %v %v, want the histogram count 15", name, v, ok)
	}
	name, v, ok = fsyncsFromMetrics(text + "mmmq_storage_fsyncs_total{topic=\"a\"} 7\n")
	if !ok || name != "mmmq_storage_fsyncs_total" || v != 7 {
		t.Fatalf("got %q %v %v, want the counter 7", name, v, ok)
	}
	if _, _, ok := fsyncsFromMetrics("go_goroutines 12\n"); ok {
		t.Fatal("found a fsync counter in metrics without one")
	}
}

func TestProcessCPUCountsWork(t *testing.T) {
	pid := os.Getpid()
	before, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn 150 ms of CPU as getrusage(2) counts it (not of wall time: on
	// a loaded machine 150 ms of wall time may hold far less CPU); the
	// count processCPU reads has a 10 ms resolution.
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	x := uint64(1)
	for start := self(); self()-start < 150*time.Millisecond; {
		for i := 0; i < 1e5; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	after, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if d := after - before; d < 100*time.Millisecond || d > 10*time.Second {
		t.Fatalf("CPU time grew by %v over 150 ms of CPU work (x=%d)", d, x)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Fatal("processCPU of a process that does not exist: want an error")
	}
}

func TestPlainModeDrivesSeparateServer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	errc := make(chan error, 1)
	go func() { errc <- servePlain(ctx, addr) }()
	cfg := benchConfig{mode: "plain", url: "http://" + addr, urlSet: true, producers: 2, size: 50,
		count: 200, ack: "durable", topics: 1, topicPrefix: "bench", serverPID: os.Getpid(),
		// A producer whose first dial is refused (the server is still
		// starting) retries instead of giving up with its message.
		idleTimeout: time.Minute}
	var res *benchResult
	for i := 0; i < 100; i++ { // wait for the listener
		if res, err = runPlain(ctx, cfg); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Messages != 200 || res.URL != cfg.url {
		t.Fatalf("plain run against %s: %d messages at %s, want 200 at the given URL", addr, res.Messages, res.URL)
	}
	if res.ServerCPUUsPerMsg == nil || *res.ServerCPUUsPerMsg < 0 {
		t.Fatalf("server CPU per message missing or negative: %v", res.ServerCPUUsPerMsg)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatalf("plain server stop: %v", err)
	}
}

func TestMainExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"-mode", "nope"}, 2},
		{[]string{"-c", "0"}, 2},
		{[]string{"-no-such-flag"}, 2},
		{[]string{"-h"}, 0},
		{[]string{"stray"}, 2},
		{[]string{"-run-id", "a.b"}, 2},
		{[]string{"-mode", "plain", "-c", "2", "-count", "50", "-progress=false", "-json"}, 0},
	} {
		if got := Main(c.args); got != c.want {
			t.Errorf("Main(%q) = %d, want %d", c.args, got, c.want)
		}
	}
}

// mmmq bench writes to clearly named topics, new for every run, and says so
// on stderr, warm-up included; -h is the usage on stdout.
func TestTopicsAndNotice(t *testing.T) {
	var stdout, stderr strings.Builder
	cfg, code, ok := parseArgs([]string{"-topics", "3", "-warmup", "2s"}, &stdout, &stderr)
	if !ok || code != 0 {
		t.Fatalf("parseArgs: exit %d, stderr %q", code, stderr.String())
	}
	first, last := benchTopic(cfg, 0), benchTopic(cfg, 2)
	if !strings.HasPrefix(first, "mmmq-bench.") || !strings.HasSuffix(first, ".0") || strings.Count(first, ".") != 2 {
		t.Errorf("topic %q: want mmmq-bench.<run id>.0", first)
	}
	cfg2, _, _ := parseArgs(nil, &stdout, &stderr)
	if benchTopic(cfg2, 0) == first && cfg2.runID == cfg.runID {
		t.Errorf("two runs share the run id %q", cfg.runID)
	}
	n := notice(cfg)
	for _, want := range []string{first, last, "http://127.0.0.1:8080", "stay in the broker's data", "warm-up", "2s", "not counted"} {
		if !strings.Contains(n, want) {
			t.Errorf("notice %q does not mention %q", n, want)
		}
	}
	if cfg, _, _ := parseArgs([]string{"-mode", "plain"}, &stdout, &stderr); notice(cfg) != "" {
		t.Errorf("plain mode publishes to no broker, notice %q", notice(cfg))
	}
	if cfg, _, _ := parseArgs([]string{"-run-id", "r1", "-topic-prefix", "x"}, &stdout, &stderr); benchTopic(cfg, 0) != "x.r1.0" {
		t.Errorf("-run-id r1 -topic-prefix x: topic %q, want x.r1.0", benchTopic(cfg, 0))
	}
	stdout.Reset()
	stderr.Reset()
	if _, code, ok := parseArgs([]string{"-h"}, &stdout, &stderr); ok || code != 0 || !strings.Contains(stdout.String(), "usage: mmmq bench") || stderr.Len() != 0 {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
}

// A -topic-prefix that makes invalid topic names is a usage error before
// anything is sent.
func TestInvalidTopicPrefixRefused(t *testing.T) {
	var stdout, stderr strings.Builder
	_, code, ok := parseArgs([]string{"-topic-prefix", "bad..x"}, &stdout, &stderr)
	if ok || code != 2 || !strings.Contains(stderr.String(), "-topic-prefix") {
		t.Fatalf("exit %d ok=%v, stderr %q; want 2 naming -topic-prefix", code, ok, stderr.String())
	}
}

// A broker that refuses the request itself (4xx) is not retried until
// -idle-timeout: the run stops after the first refusal of each producer.
func TestClientErrorsAreNotRetried(t *testing.T) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			requests.Add(1)
		}
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"acknowledgement":"NACK","error":"no","code":"BAD_REQUEST"}`))
	}))
	defer srv.Close()
	var stdout, stderr strings.Builder
	cfg, code, ok := parseArgs([]string{"-url", srv.URL, "-c", "2", "-count", "50", "-idle-timeout", "1h"}, &stdout, &stderr)
	if !ok {
		t.Fatalf("parseArgs: exit %d, %s", code, stderr.String())
	}
	res, err := runPublish(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "HTTP 400") {
		t.Fatalf("runPublish: %+v, %v; want an error naming HTTP 400", res, err)
	}
	if n := requests.Load(); n > 2 {
		t.Errorf("%d publishes for 2 producers; a refused request must not be sent again", n)
	}
}

// A request that fails gives its messages back and its producer sends them
// again, also when the other producers already found the count used up
// (the count used to go negative and the retried message was lost).
func TestCountModeRetriesAfterOthersFinished(t *testing.T) {
	var posts atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		if posts.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"acknowledgement":"NACK","code":"UNAVAILABLE"}`))
			return
		}
		w.Write([]byte(`{"acknowledgement":"ACK"}`))
	}))
	defer srv.Close()
	var stdout, stderr strings.Builder
	cfg, code, ok := parseArgs([]string{"-url", srv.URL, "-c", "4", "-count", "1", "-progress=false"}, &stdout, &stderr)
	if !ok {
		t.Fatalf("parseArgs: exit %d, %s", code, stderr.String())
	}
	res, err := runPublish(context.Background(), cfg)
	if err != nil || res.Messages != 1 || res.Errors != 1 {
		t.Fatalf("runPublish: %+v, %v; want the one message acknowledged after one 503", res, err)
	}
}
