package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
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

func TestProcessIOCallsCountsReadsAndWrites(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r0, w0, err := processIOCalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	for i := 0; i < 50; i++ {
		_, _ = f.Read(buf)
	}
	for i := 0; i < 30; i++ {
		_, _ = f.Write(buf)
	}
	r1, w1, err := processIOCalls(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Other goroutines of the test binary may add a few calls of their own.
	if r1-r0 < 50 || r1-r0 > 200 || w1-w0 < 30 || w1-w0 > 200 {
		t.Fatalf("after 50 reads and 30 writes: %d reads and %d writes counted", r1-r0, w1-w0)
	}
	if _, _, err := processIOCalls(1 << 30); err == nil {
		t.Fatal("processIOCalls of a process that does not exist: want an error")
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

// fakeWire is a tiny server of the line protocol or RESP for the line and
// redis modes. It reads requests with read and checks them with check
// (which returns "" or what is wrong), and answers request number n (from
// 0, over all connections) with answer(n), at once, or with window > 0
// only once window requests of the connection are unanswered: a client
// that keeps fewer outstanding then stalls (the server's read times out,
// which fails the test), and one that sent more is seen with bytes already
// buffered. closeAfter > 0: the first connection is closed after that many
// requests, unanswered. allSend > 0: no publish is answered before that
// many connections sent one.
type fakeWire struct {
	t          *testing.T
	ln         net.Listener
	window     int
	closeAfter int
	allSend    int
	read       func(r *bufio.Reader) ([]string, error)
	check      func(args []string) string
	answer     func(n int) string

	mu       sync.Mutex
	requests int
	conns    int
	auths    []string
	problems []string
	wg       sync.WaitGroup
	senders  int
	allSent  chan struct{} // closed when allSend connections sent a publish
}

func (f *fakeWire) start() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.t.Fatal(err)
	}
	f.ln = ln
	f.allSent = make(chan struct{})
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				defer c.Close()
				f.serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

// stop closes the listener and waits for the connections to end; it
// returns the problems seen.
func (f *fakeWire) stop() []string {
	f.ln.Close()
	f.wg.Wait()
	return f.problems
}

func (f *fakeWire) problem(format string, args ...any) {
	f.mu.Lock()
	f.problems = append(f.problems, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *fakeWire) serve(c net.Conn) {
	f.mu.Lock()
	f.conns++
	first := f.conns == 1
	f.mu.Unlock()
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	var pending []int
	for served := 0; ; {
		// Only a guard against a stalled client (a test that hangs), not a
		// timed assertion.
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		args, err := f.read(r)
		if err != nil {
			if len(pending) > 0 || !errors.Is(err, io.EOF) {
				f.problem("read after %d requests, %d unanswered: %v", served, len(pending), err)
			}
			return
		}
		if len(args) == 2 && strings.EqualFold(args[0], "AUTH") {
			f.mu.Lock()
			f.auths = append(f.auths, args[1])
			f.mu.Unlock()
			w.WriteString(f.answer(-1))
			w.Flush()
			continue
		}
		if msg := f.check(args); msg != "" {
			f.problem("request %q: %s", args, msg)
		}
		served++
		if first && f.closeAfter > 0 && served == f.closeAfter {
			return
		}
		f.mu.Lock()
		pending = append(pending, f.requests)
		f.requests++
		if served == 1 {
			if f.senders++; f.senders == f.allSend {
				close(f.allSent)
			}
		}
		f.mu.Unlock()
		if len(pending) < f.window {
			continue
		}
		if f.window > 0 && r.Buffered() > 0 {
			f.problem("more than %d requests outstanding: %d bytes more already sent", f.window, r.Buffered())
		}
		if f.allSend > 0 {
			<-f.allSent
		}
		for _, n := range pending {
			w.WriteString(f.answer(n))
		}
		pending = pending[:0]
		if w.Flush() != nil {
			return
		}
	}
}

func readLineRequest(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	return strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4), nil
}

// readRESPRequest reads an array of bulk strings, checking its framing.
func readRESPRequest(r *bufio.Reader) ([]string, error) {
	head, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	var n int
	if _, err := fmt.Sscanf(head, "*%d\r\n", &n); err != nil || n < 1 {
		return nil, fmt.Errorf("array header %q", head)
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		var size int
		if err == nil {
			_, err = fmt.Sscanf(h, "$%d\r\n", &size)
		}
		if err != nil {
			return nil, fmt.Errorf("bulk header %q: %v", h, err)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil || string(b[size:]) != "\r\n" {
			return nil, fmt.Errorf("bulk string of %d bytes: %q %v", size, b, err)
		}
		args[i] = string(b[:size])
	}
	return args, nil
}

// wireProto is what a test needs of one protocol: the fake server's reader,
// a check of a publish request and the success and AUTH replies.
type wireProto struct {
	mode  string
	read  func(r *bufio.Reader) ([]string, error)
	check func(topics map[string]bool, content string) func([]string) string
	ok    func(n int) string
}

var wireProtos = []wireProto{
	{mode: "line", read: readLineRequest,
		check: func(topics map[string]bool, content string) func([]string) string {
			return func(a []string) string {
				if len(a) != 4 || a[0] != "PUB" || !topics[a[1]] || a[2] != "DURABLE" || a[3] != content {
					return "want PUB <topic> DURABLE <content>"
				}
				return ""
			}
		},
		ok: func(n int) string {
			if n < 0 {
				return "OK AUTH bench\n"
			}
			return fmt.Sprintf("OK %d DURABLE\n", n)
		}},
	{mode: "redis", read: readRESPRequest,
		check: func(topics map[string]bool, content string) func([]string) string {
			return func(a []string) string {
				if len(a) != 5 || a[0] != "XADD" || !topics[a[1]] || a[2] != "*" || a[3] != "data" || a[4] != content {
					return "want XADD <topic> * data <content>"
				}
				return ""
			}
		},
		ok: func(n int) string {
			if n < 0 {
				return "+OK\r\n"
			}
			id := fmt.Sprintf("1700000000000-%d", n)
			return fmt.Sprintf("$%d\r\n%s\r\n", len(id), id)
		}},
}

// runWire runs mode against the fake server f (started here) with args
// after -mode and -addr; it returns the result, the server's problems and
// the run's error.
func runWire(t *testing.T, f *fakeWire, mode string, args ...string) (*benchResult, []string, error) {
	t.Helper()
	addr := f.start()
	var stdout, stderr strings.Builder
	all := append([]string{"-mode", mode, "-addr", addr, "-progress=false", "-idle-timeout", "1m"}, args...)
	cfg, code, ok := parseArgs(all, &stdout, &stderr)
	if !ok {
		f.stop()
		t.Fatalf("parseArgs(%q): exit %d, %s", all, code, stderr.String())
	}
	res, err := runPublish(context.Background(), cfg)
	return res, f.stop(), err
}

// Every request is framed as its protocol wants, to the run's topics, with
// AUTH first on every connection, and each connection keeps exactly -depth
// requests outstanding (the fake server answers only full windows).
func TestWireModesFramingAndDepth(t *testing.T) {
	content := string(benchContent(120))
	for _, p := range wireProtos {
		for _, depth := range []int{1, 8} {
			t.Run(fmt.Sprintf("%s/depth=%d", p.mode, depth), func(t *testing.T) {
				topics := map[string]bool{"b.r1.0": true}
				f := &fakeWire{t: t, window: depth, read: p.read, check: p.check(topics, content), answer: p.ok}
				count := 5 * depth
				res, problems, err := runWire(t, f, p.mode, "-c", "1", "-depth", strconv.Itoa(depth), "-count", strconv.Itoa(count),
					"-size", "120", "-topic-prefix", "b", "-run-id", "r1", "-token", "s3cret")
				if err != nil || len(problems) > 0 {
					t.Fatalf("run: %v; server: %q", err, problems)
				}
				if res.Messages != int64(count) || res.Requests != int64(count) || res.Errors != 0 || f.requests != count {
					t.Fatalf("%d messages, %d requests, %d errors, server saw %d; want %d, %d, 0, %d",
						res.Messages, res.Requests, res.Errors, f.requests, count, count, count)
				}
				if res.Depth != depth || res.Mode != p.mode || res.P50Ms <= 0 || res.MaxMs < res.P50Ms {
					t.Fatalf("result %+v: want depth %d, mode %s and latencies", res, depth, p.mode)
				}
				if len(f.auths) != 1 || f.auths[0] != "s3cret" {
					t.Fatalf("AUTH tokens seen %q, want one s3cret", f.auths)
				}
			})
		}
	}
}

// Connections spread over the topics as the HTTP producers do, each
// authenticating first (the server answers no publish before each of the
// three sent one).
func TestWireModesSpreadTopics(t *testing.T) {
	content := string(benchContent(200))
	for _, p := range wireProtos {
		t.Run(p.mode, func(t *testing.T) {
			var mu sync.Mutex
			seen := map[string]int{}
			topics := map[string]bool{"b.r2.0": true, "b.r2.1": true}
			check := p.check(topics, content)
			f := &fakeWire{t: t, allSend: 3, read: p.read, answer: p.ok, check: func(a []string) string {
				mu.Lock()
				seen[a[1]]++
				mu.Unlock()
				return check(a)
			}}
			res, problems, err := runWire(t, f, p.mode, "-c", "3", "-depth", "2", "-count", "60",
				"-topics", "2", "-topic-prefix", "b", "-run-id", "r2", "-token", "t")
			if err != nil || len(problems) > 0 || res.Messages != 60 {
				t.Fatalf("run: %+v %v; server: %q", res, err, problems)
			}
			if len(seen) != 2 || len(f.auths) != 3 {
				t.Fatalf("topics written %v (want both), AUTHs %d (want 3)", seen, len(f.auths))
			}
		})
	}
}

// An error reply the server may not give again (ERR UNAVAILABLE, -LOADING)
// counts as an error and its message is sent again (count mode).
func TestWireModesCountRetriedErrors(t *testing.T) {
	for _, p := range wireProtos {
		t.Run(p.mode, func(t *testing.T) {
			errReply := map[string]string{"line": "ERR UNAVAILABLE queue full\n", "redis": "-LOADING loading the dataset\r\n"}[p.mode]
			var errs atomic.Int64
			f := &fakeWire{t: t, read: p.read, check: func([]string) string { return "" },
				answer: func(n int) string {
					if n%3 == 2 {
						errs.Add(1)
						return errReply
					}
					return p.ok(n)
				}}
			res, problems, err := runWire(t, f, p.mode, "-c", "2", "-depth", "4", "-count", "30")
			if err != nil || len(problems) > 0 {
				t.Fatalf("run: %v; server: %q", err, problems)
			}
			if res.Messages != 30 || res.Errors != errs.Load() || res.Errors == 0 {
				t.Fatalf("%d messages, %d errors; want 30 and the %d error replies sent", res.Messages, res.Errors, errs.Load())
			}
			if !strings.Contains(res.FirstError, strings.TrimSpace(errReply)) {
				t.Fatalf("first error %q, want the error reply %q", res.FirstError, errReply)
			}
		})
	}
}

// An error reply that refuses the request itself (ERR FORBIDDEN, -ERR)
// stops the connection: what was outstanding is read, nothing more is sent.
func TestWireModesRefusalStops(t *testing.T) {
	for _, p := range wireProtos {
		t.Run(p.mode, func(t *testing.T) {
			refusal := map[string]string{"line": "ERR FORBIDDEN publish x may not publish\n", "redis": "-ERR wrong number of arguments\r\n"}[p.mode]
			f := &fakeWire{t: t, read: p.read, check: func([]string) string { return "" },
				answer: func(int) string { return refusal }}
			res, problems, err := runWire(t, f, p.mode, "-c", "2", "-depth", "4", "-count", "1000")
			if err == nil || !strings.Contains(err.Error(), strings.TrimSpace(refusal)) || len(problems) > 0 {
				t.Fatalf("run: %v; server: %q; want no message acknowledged, naming %q", err, problems, refusal)
			}
			if f.requests > 2*4 || res.Errors != int64(f.requests) {
				t.Fatalf("server saw %d requests, %d errors counted; want at most one window per connection, each an error",
					f.requests, res.Errors)
			}
		})
	}
}

// A reply that is not the one the request expects is an error and ends the
// connection: another ack level, an offset that is not one, ACCEPTED's
// reply to DURABLE, a RESP reply of another type or without an entry id.
func TestWireModesReplyMismatch(t *testing.T) {
	for _, c := range []struct{ mode, reply string }{
		{"line", "OK 3 WRITTEN\n"},
		{"line", "OK x DURABLE\n"},
		{"line", "OK - ACCEPTED\n"},
		{"line", "MSG 0 {}\n"},
		{"redis", ":1\r\n"},
		{"redis", "$3\r\nabc\r\n"},
		{"redis", "$-1\r\n"},
		{"redis", "+OK\r\n"},
	} {
		t.Run(c.mode+"/"+strings.TrimSpace(c.reply), func(t *testing.T) {
			p := wireProtos[0]
			if c.mode == "redis" {
				p = wireProtos[1]
			}
			f := &fakeWire{t: t, read: p.read, check: func([]string) string { return "" },
				answer: func(n int) string {
					if n == 5 {
						return c.reply
					}
					return p.ok(n)
				}}
			res, problems, err := runWire(t, f, c.mode, "-c", "1", "-count", "20")
			if err != nil || len(problems) > 0 {
				t.Fatalf("run: %v; server: %q", err, problems)
			}
			if res.Messages != 5 || res.Errors != 1 || res.FirstError == "" || f.requests != 6 {
				t.Fatalf("%d messages, %d errors, first error %q, server saw %d; want 5, 1, the mismatch named, 6",
					res.Messages, res.Errors, res.FirstError, f.requests)
			}
		})
	}
}

// A connection that breaks counts its outstanding requests as errors; the
// producer connects again and sends them again (count mode).
func TestWireModesReconnect(t *testing.T) {
	for _, p := range wireProtos {
		t.Run(p.mode, func(t *testing.T) {
			f := &fakeWire{t: t, closeAfter: 4, read: p.read, check: func([]string) string { return "" }, answer: p.ok}
			res, problems, err := runWire(t, f, p.mode, "-c", "1", "-count", "20")
			if err != nil || len(problems) > 0 {
				t.Fatalf("run: %v; server: %q", err, problems)
			}
			if res.Messages != 20 || res.Errors != 1 || f.conns != 2 {
				t.Fatalf("%d messages, %d errors over %d connections; want 20, 1 (the request cut off), 2", res.Messages, res.Errors, f.conns)
			}
		})
	}
}

func TestWireModesUsage(t *testing.T) {
	for _, args := range [][]string{
		{"-depth", "2"},                        // HTTP publish has no pipelining
		{"-addr", "127.0.0.1:1"},               // nor a TCP address
		{"-mode", "line", "-batch", "10"},      // one message per PUB
		{"-mode", "redis", "-depth", "0"},      // at least 1
		{"-mode", "redis", "-depth", "5000"},   // at most 4096
		{"-mode", "line", "-addr", "nowhere"},  // host:port
		{"-mode", "line", "-token", "a\nPUB"},  // one line
		{"-mode", "line", "-ack", "sometimes"}, // an ack level
	} {
		var stdout, stderr strings.Builder
		if _, code, ok := parseArgs(args, &stdout, &stderr); ok || code != 2 {
			t.Errorf("parseArgs(%q): exit %d ok=%v, want a usage error", args, code, ok)
		}
	}
	var stdout, stderr strings.Builder
	cfg, _, ok := parseArgs([]string{"-mode", "redis"}, &stdout, &stderr)
	if !ok || cfg.addr != "127.0.0.1:6379" || cfg.depth != 1 {
		t.Errorf("-mode redis: addr %q depth %d, want the default 127.0.0.1:6379 and 1", cfg.addr, cfg.depth)
	}
	if n := notice(cfg); !strings.Contains(n, "XADD") || !strings.Contains(n, "127.0.0.1:6379") {
		t.Errorf("notice %q: want XADD and the address", n)
	}
}

// A server that is gone (connections refused): the producers try again
// until -duration ends, not until -idle-timeout (an hour here), and every
// failure is counted. The 30 s bound only turns a hang into a failure.
func TestWireModesStopAtDeadlineWhenServerGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // nobody listens there now
	var stdout, stderr strings.Builder
	cfg, code, ok := parseArgs([]string{"-mode", "line", "-addr", ln.Addr().String(), "-c", "2", "-depth", "4",
		"-duration", "200ms", "-warmup", "0s", "-idle-timeout", "1h", "-progress=false"}, &stdout, &stderr)
	if !ok {
		t.Fatalf("parseArgs: exit %d, %s", code, stderr.String())
	}
	type outcome struct {
		res *benchResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := runPublish(context.Background(), cfg)
		done <- outcome{res, err}
	}()
	select {
	case o := <-done:
		if o.err == nil || o.res.Messages != 0 || o.res.Errors == 0 {
			t.Fatalf("run: %+v, %v; want no message, the failures counted, an error", o.res, o.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not end at -duration: the producers went on reconnecting")
	}
}

// The disk modes write -count durable operations to a scratch file in -dir,
// report them, and leave the directory as they found it; one writer only,
// and -dir must be a directory.
func TestDiskModes(t *testing.T) {
	for _, mode := range []string{diskAppend, diskOverwrite} {
		dir := t.TempDir()
		cfg, code, ok := parseArgs([]string{"-mode", mode, "-dir", dir, "-count", "40", "-size", "300"}, io.Discard, io.Discard)
		if !ok {
			t.Fatalf("%s: parseArgs exit %d", mode, code)
		}
		if cfg.producers != 1 {
			t.Errorf("%s: -c defaults to %d, want 1", mode, cfg.producers)
		}
		res, err := runDisk(context.Background(), cfg)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if res.Messages != 40 || res.MsgsPerSec <= 0 || res.P50Ms <= 0 || res.Mode != mode {
			t.Errorf("%s: result %+v, want 40 measured operations", mode, res)
		}
		if left, _ := os.ReadDir(dir); len(left) != 0 {
			t.Errorf("%s: left %v in -dir", mode, left)
		}
	}
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o600)
	for _, args := range [][]string{
		{"-mode", diskAppend, "-c", "2"},
		{"-mode", diskOverwrite, "-dir", file},
		{"-mode", diskOverwrite, "-dir", filepath.Join(file, "nope")},
		{"-mode", diskAppend, "-size", "0"},
	} {
		if got := Main(args); got != 2 {
			t.Errorf("Main(%q) = %d, want 2", args, got)
		}
	}
}
