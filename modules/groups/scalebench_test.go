package groups

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mmmq/mmmq/modules/contract"
	"github.com/mmmq/mmmq/modules/httpapi"
	"github.com/mmmq/mmmq/modules/storage"
	"github.com/mmmq/mmmq/modules/storage/vfs"
	"github.com/mmmq/mmmq/modules/topicqueue"
)

// BenchmarkSharedScale is the scale run of a shared consumer group: 1, 2,
// 4 and 8 sessions (-groups.scale.sessions) of one shared group fetch over
// HTTP (the real router and groups route on a loopback httptest server,
// the local storage engine on the temp dir's disk), each with
// max=M (-groups.scale.max: 1 and 10), then take 2 ms per message
// (-groups.scale.work, a sleep, not computing) and acknowledge what they
// fetched in one POST .../ack {"offsets": [...]}, then fetch again. The
// topic holds enough messages (published before the runs, 200-byte
// content) that the producer is never the limit. Each point runs
// -groups.scale (after a warm-up of a tenth of it, at most 1 s) on a new
// group of the same topic.
//
// Reported per point: msgs/s (messages acknowledged per second),
// ideal-msgs/s = sessions × M / (M × work + rtt), where rtt is one fetch
// plus one ack of M messages on an idle broker (rtt-ms: the mean of 300,
// measured before the points: one session, no work), and pct-of-ideal; overhead-ms, the mean
// time of a session's fetch and ack requests per cycle (rtt plus the
// waiting under load); work-ms, the mean time a message's sleep took (a
// loaded machine wakes sleepers late); fsyncs/msg (file syncs: the .finished file and the
// checkpoint), dirsyncs/msg (directory syncs: the .finished file created
// again after a commit removed it), sync-busy-pct (the wall time spent in
// those syncs per second of the run: the group's syncs run one at a time
// under its lock, so 100% is the most one group can do), mutex-wait-us/msg
// (time goroutines spent blocked on a sync.Mutex, runtime/metrics: the
// whole process) and cpu-us/msg (user + system CPU of the process, the
// client's share included). Run with
//
//	go test -run '^$' -bench SharedScale -benchtime 1x ./modules/groups/ -groups.scale 20s
var (
	scaleFor      = flag.Duration("groups.scale", 5*time.Second, "how long each point of BenchmarkSharedScale runs")
	scaleSessions = flag.String("groups.scale.sessions", "1,2,4,8", "session counts of BenchmarkSharedScale, comma-separated")
	scaleMax      = flag.String("groups.scale.max", "1,10", "fetch sizes (max=) of BenchmarkSharedScale, comma-separated")
	scaleWork     = flag.Duration("groups.scale.work", 2*time.Millisecond, "time a BenchmarkSharedScale consumer takes per message (a sleep)")
)

func BenchmarkSharedScale(b *testing.B) {
	sessions, err := scaleList(*scaleSessions)
	if err != nil {
		b.Fatalf("-groups.scale.sessions: %v", err)
	}
	maxes, err := scaleList(*scaleMax)
	if err != nil {
		b.Fatalf("-groups.scale.max: %v", err)
	}
	dur, work := *scaleFor, *scaleWork
	warm := min(dur/10, time.Second)
	most := 0
	for _, n := range sessions {
		most = max(most, n)
	}
	// Enough for the fastest point (every session at its ideal) with a
	// margin: every point reads the topic from its start.
	need := int(1.3*float64(most)*(dur+warm).Seconds()/max(work.Seconds(), 0.0005)) + 20000
	sb := newScaleBroker(b, need)
	defer sb.close()

	rtt := map[int]time.Duration{}
	for _, m := range maxes {
		rtt[m] = sb.roundTrip(b, m)
	}
	for _, m := range maxes {
		for _, n := range sessions {
			b.Run(fmt.Sprintf("max=%d/sessions=%d", m, n), func(b *testing.B) {
				for range b.N {
					sb.runPoint(b, n, m, work, warm, dur, rtt[m])
				}
			})
		}
	}
}

func scaleList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a count >= 1", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// scaleBroker is a registry on the temp dir (syncs counted and timed), a
// coordinator and the HTTP router on a loopback server, with one topic.
type scaleBroker struct {
	fs     *timedFS
	reg    *topicqueue.Registry
	c      *Coordinator
	ts     *httptest.Server
	client *http.Client
	base   string // .../topics/<topic>/groups/
	groups atomic.Int64
}

func newScaleBroker(b *testing.B, messages int) *scaleBroker {
	sb := &scaleBroker{fs: &timedFS{FS: vfs.OS{}}}
	root := b.TempDir()
	sb.reg = topicqueue.New(topicqueue.Options{Root: root, Storage: storage.Options{FS: sb.fs, Logger: zap.NewNop()}})
	sb.c = New(sb.reg, Options{Logger: zap.NewNop()})
	q, err := sb.reg.GetOrCreate(testTopic)
	if err != nil {
		b.Fatal(err)
	}
	content := json.RawMessage(`"` + strings.Repeat("x", 198) + `"`)
	batch := make([][]byte, 0, 1000)
	for i := 0; i < messages; i++ {
		m, err := contract.EncodeMessage(testTopic, content, "", nil, time.Now())
		if err != nil {
			b.Fatal(err)
		}
		batch = append(batch, m)
		if len(batch) == cap(batch) || i == messages-1 {
			if _, err := q.Log().AppendBatch(context.Background(), batch, contract.Durable); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	sb.ts = httptest.NewServer(httpapi.New(httpapi.Options{}, sb.reg, nil, zap.NewNop(), NewRoute(sb.c, RouteOptions{})).Handler())
	sb.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	sb.base = sb.ts.URL + "/topics/" + testTopic + "/groups/"
	return sb
}

func (sb *scaleBroker) close() {
	sb.client.CloseIdleConnections()
	sb.ts.Close()
	_ = sb.c.Stop(context.Background())
	_ = sb.reg.Close()
}

// scaleSession is one consumer of a shared group over HTTP.
type scaleSession struct {
	sb      *scaleBroker
	url     string // .../groups/<group>/
	session string
	offs    []int64
}

type scaleFetched struct {
	Messages []struct {
		Offset int64 `json:"offset"`
	} `json:"messages"`
}

type scaleAcked struct {
	Acked int `json:"acked"`
}

// fetch fetches up to m messages (waiting up to 100 ms for one), the
// first call starting the session.
func (s *scaleSession) fetch(m int) error {
	req, err := http.NewRequest(http.MethodPost, s.url+"fetch?mode=shared&wait=100&max="+strconv.Itoa(m), nil)
	if err != nil {
		return err
	}
	if s.session != "" {
		req.Header.Set(SessionHeader, s.session)
	}
	var f scaleFetched
	h, err := s.sb.do(req, &f)
	if err != nil {
		return err
	}
	s.session = h.Get(SessionHeader)
	s.offs = s.offs[:0]
	for _, e := range f.Messages {
		s.offs = append(s.offs, e.Offset)
	}
	return nil
}

// ack acknowledges what the last fetch returned and returns how many.
func (s *scaleSession) ack() (int, error) {
	body, _ := json.Marshal(map[string][]int64{"offsets": s.offs})
	req, err := http.NewRequest(http.MethodPost, s.url+"ack", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set(SessionHeader, s.session)
	var a scaleAcked
	if _, err := s.sb.do(req, &a); err != nil {
		return 0, err
	}
	return a.Acked, nil
}

func (s *scaleSession) release() {
	if s.session == "" {
		return
	}
	req, err := http.NewRequest(http.MethodDelete, s.url+"session", nil)
	if err != nil {
		return
	}
	req.Header.Set(SessionHeader, s.session)
	_, _ = s.sb.do(req, nil)
}

// do sends req and decodes a 200 answer into v.
func (sb *scaleBroker) do(req *http.Request, v any) (http.Header, error) {
	resp, err := sb.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, raw)
	}
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
		}
	}
	return resp.Header, nil
}

func (sb *scaleBroker) newSession() *scaleSession {
	return &scaleSession{sb: sb, url: sb.base + fmt.Sprintf("scale-%d/", sb.groups.Load())}
}

// roundTrip is the mean time of one fetch of m messages and its ack, one
// session on an idle broker, no work in between (300 cycles, a new group,
// after 20 unmeasured ones). The mean, not the median: a sync stalled by
// other work on the disk is part of the cycle time that throughput pays.
func (sb *scaleBroker) roundTrip(b *testing.B, m int) time.Duration {
	sb.groups.Add(1)
	s := sb.newSession()
	defer s.release()
	const warm, cycles = 20, 300
	var start time.Time
	for i := range warm + cycles {
		if i == warm {
			start = time.Now()
		}
		if err := s.fetch(m); err != nil {
			b.Fatal(err)
		}
		if len(s.offs) < m {
			b.Fatalf("round trip: fetched %d messages, want %d (too few published)", len(s.offs), m)
		}
		if _, err := s.ack(); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start) / cycles
}

// scaleSample is what a point measures between two instants.
type scaleSample struct {
	at            time.Time
	acked, cycles int64
	overhead      int64 // ns in fetch + ack requests
	slept         int64 // ns in the consumers' work (sleeps)
	syncs, dirs   int64
	syncNs        int64
	cpu           time.Duration
	mutexWait     float64 // seconds
	empty         int64
}

func (sb *scaleBroker) runPoint(b *testing.B, n, m int, work, warm, dur, rtt time.Duration) {
	sb.groups.Add(1)
	var acked, cycles, overhead, slept, empty atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range n {
		s := sb.newSession()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.release()
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := s.fetch(m); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				t1 := time.Now()
				if len(s.offs) == 0 {
					empty.Add(1)
					continue
				}
				for range s.offs {
					time.Sleep(work)
				}
				t2 := time.Now()
				k, err := s.ack()
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				acked.Add(int64(k))
				cycles.Add(1)
				overhead.Add(int64(t1.Sub(t0) + time.Since(t2)))
				slept.Add(int64(t2.Sub(t1)))
			}
		}()
	}
	sample := func() scaleSample {
		return scaleSample{at: time.Now(), acked: acked.Load(), cycles: cycles.Load(), overhead: overhead.Load(), slept: slept.Load(),
			syncs: sb.fs.syncs.Load(), dirs: sb.fs.dirSyncs.Load(), syncNs: sb.fs.syncNs.Load(),
			cpu: processCPU(), mutexWait: mutexWaitSeconds(), empty: empty.Load()}
	}
	time.Sleep(warm)
	s0 := sample()
	time.Sleep(dur)
	s1 := sample()
	cancel()
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		b.Fatal(err)
	}

	el := s1.at.Sub(s0.at)
	msgs := float64(max(s1.acked-s0.acked, 1))
	rate := float64(s1.acked-s0.acked) / el.Seconds()
	ideal := float64(n) * float64(m) / (float64(m)*work.Seconds() + rtt.Seconds())
	cyc := max(s1.cycles-s0.cycles, 1)
	b.ReportMetric(rate, "msgs/s")
	b.ReportMetric(ideal, "ideal-msgs/s")
	b.ReportMetric(100*rate/ideal, "pct-of-ideal")
	b.ReportMetric(float64(s1.overhead-s0.overhead)/float64(cyc)/1e6, "overhead-ms")
	b.ReportMetric(float64(rtt.Microseconds())/1000, "rtt-ms")
	b.ReportMetric(float64(s1.slept-s0.slept)/float64(max(s1.acked-s0.acked, 1))/1e6, "work-ms")
	b.ReportMetric(float64(s1.syncs-s0.syncs)/msgs, "fsyncs/msg")
	b.ReportMetric(float64(s1.dirs-s0.dirs)/msgs, "dirsyncs/msg")
	b.ReportMetric(100*float64(s1.syncNs-s0.syncNs)/float64(el.Nanoseconds()), "sync-busy-pct")
	b.ReportMetric((s1.mutexWait-s0.mutexWait)*1e6/msgs, "mutex-wait-us/msg")
	b.ReportMetric(float64((s1.cpu-s0.cpu).Microseconds())/msgs, "cpu-us/msg")
	if e := s1.empty - s0.empty; e > 0 {
		b.Logf("%d fetches came back empty (the topic ran dry, or a session waited for messages leased to others)", e)
	}
}

// processCPU is the user + system CPU time of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// mutexWaitSeconds is the time goroutines of this process have spent
// blocked on a sync.Mutex or sync.RWMutex so far.
func mutexWaitSeconds() float64 {
	s := []metrics.Sample{{Name: "/sync/mutex/wait/total:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64 {
		return 0
	}
	return s[0].Value.Float64()
}

// timedFS counts and times the file syncs (Sync, Datasync) and directory
// syncs (SyncDir) of the files it opens.
type timedFS struct {
	vfs.FS
	syncs, dirSyncs, syncNs atomic.Int64
}

// SyncFS forwards to the inner FS (vfs.OS implements it).
func (t *timedFS) SyncFS(dir string) error {
	if s, ok := t.FS.(vfs.FSSyncer); ok {
		return s.SyncFS(dir)
	}
	return fmt.Errorf("sync filesystem of %s: not supported", dir)
}

func (t *timedFS) Create(name string) (vfs.File, error) { return t.wrap(t.FS.Create(name)) }
func (t *timedFS) OpenRW(name string) (vfs.File, error) { return t.wrap(t.FS.OpenRW(name)) }
func (t *timedFS) Open(name string) (vfs.File, error)   { return t.wrap(t.FS.Open(name)) }

func (t *timedFS) SyncDir(dir string) error {
	start := time.Now()
	err := t.FS.SyncDir(dir)
	t.dirSyncs.Add(1)
	t.syncNs.Add(int64(time.Since(start)))
	return err
}

func (t *timedFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &timedFile{File: f, fs: t}, nil
}

type timedFile struct {
	vfs.File
	fs *timedFS
}

func (f *timedFile) Sync() error     { return f.timed(f.File.Sync) }
func (f *timedFile) Datasync() error { return f.timed(f.File.Datasync) }

func (f *timedFile) timed(sync func() error) error {
	start := time.Now()
	err := sync()
	f.fs.syncs.Add(1)
	f.fs.syncNs.Add(int64(time.Since(start)))
	return err
}
