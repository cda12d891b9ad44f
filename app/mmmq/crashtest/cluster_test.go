package crashtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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

	"github.com/mmmq/mmmq/plugins/jetstream/jscluster"
)

// The cluster harness: mmmq nodes over a NATS JetStream cluster of real
// processes, producers publishing DURABLE through every mmmq node, a
// dispatcher delivering every topic to one consumer, and rounds that kill -9
// a NATS node (kept down until every topic takes publishes again: the
// failover time) and then an mmmq node, restarting both. Afterwards every
// acknowledged message must be in the log exactly once at its offset, with
// its content, and delivered at least once, in offset order per lease
// epoch, never by two workers of the same epoch at once.

const (
	clusterTopics = 3
	// clusterFailover is the most a topic may refuse publishes after a NATS
	// node dies before the harness calls it unavailable. The goal is 10 s;
	// a JetStream stream whose leader died elects a new one after a
	// randomized election timeout of several seconds, so single rounds
	// close to 10 s happen and the bound leaves room; the test logs every
	// round's figure and the README reports them against the goal.
	clusterFailover = 15 * time.Second
	clusterDown     = 20 * time.Second // how long a killed NATS node stays down at most
	clusterLease    = 2 * time.Second  // mmmq.jetstream.lease-timeout of the mmmq nodes
)

// clusterConf is one harness run.
type clusterConf struct {
	NATS, Replicas, Rounds int
}

// clusterAck is one acknowledged publish.
type clusterAck struct {
	topic, id     string
	content       []byte
	offset        int64
	sent, replied time.Time
}

// clusterPush is one push the consumer received.
type clusterPush struct {
	topic  string
	offset int64
	epoch  uint64
	id     string
}

// pushLog is the consumer: it records every push and answers ACK, and
// counts pushes of one (topic, epoch) that overlap in time: one worker
// delivers one message at a time, so that never happens.
type pushLog struct {
	mu       sync.Mutex
	pushes   []clusterPush
	inflight map[string]map[uint64]int // topic → epoch → pushes being answered
	bad      []string
}

func (p *pushLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(body, &m)
	off, err1 := strconv.ParseInt(r.Header.Get("mmmq-offset"), 10, 64)
	epoch, err2 := strconv.ParseUint(r.Header.Get("mmmq-lease-epoch"), 10, 64)
	topic := r.Header.Get("mmmq-topic")
	p.mu.Lock()
	if err1 != nil || err2 != nil || epoch == 0 {
		p.bad = append(p.bad, fmt.Sprintf("push of %s without a valid mmmq-offset / mmmq-lease-epoch: %q %q", topic, r.Header.Get("mmmq-offset"), r.Header.Get("mmmq-lease-epoch")))
	}
	if p.inflight[topic] == nil {
		p.inflight[topic] = map[uint64]int{}
	}
	if p.inflight[topic][epoch]++; p.inflight[topic][epoch] > 1 {
		p.bad = append(p.bad, fmt.Sprintf("two pushes of %s under epoch %d at once (offset %d)", topic, epoch, off))
	}
	p.pushes = append(p.pushes, clusterPush{topic: topic, offset: off, epoch: epoch, id: m.ID})
	p.mu.Unlock()
	time.Sleep(time.Millisecond) // a push takes a moment: overlaps can show
	p.mu.Lock()
	p.inflight[topic][epoch]--
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"acknowledgement":"ACK"}`))
}

// clusterRun is the state of one harness run.
type clusterRun struct {
	t     *testing.T
	conf  clusterConf
	nats  *jscluster.Cluster
	nodes []brokerConf
	bases []atomic.Pointer[string] // current base URL of each mmmq node; "" while down
	procs []*broker
	cons  *pushLog

	mu       sync.Mutex
	acks     []clusterAck
	failover []time.Duration // per NATS kill
	report   []string        // what went wrong (the test's verdict)
	stale    int             // pushes under an epoch older than one already seen for the topic
}

func startClusterRun(t *testing.T, c clusterConf) *clusterRun {
	t.Helper()
	r := &clusterRun{t: t, conf: c, nats: jscluster.Start(t, c.NATS), cons: &pushLog{inflight: map[string]map[uint64]int{}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: r.cons, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	dir := t.TempDir()
	r.bases = make([]atomic.Pointer[string], 2)
	for i := range 2 {
		conf := brokerConf{DataDir: filepath.Join(dir, fmt.Sprintf("node%d", i), "data"), JetStream: strings.Join(r.nats.URLs(), ","),
			// A publish to a stream without a leader fails after the
			// request timeout: 1 s, so that the failover is measured to
			// about a second (the default 5 s would round it up to 5 s steps).
			Replicas: c.Replicas, LeaseTimeout: clusterLease, RequestTimeout: time.Second,
			Dispatchers: []dispatcherConf{{Name: "d", Port: port, Patterns: []string{"k.*"}}}}
		if err := os.MkdirAll(filepath.Dir(conf.DataDir), 0o755); err != nil {
			t.Fatal(err)
		}
		r.nodes = append(r.nodes, conf)
		r.procs = append(r.procs, nil)
		r.startNode(i)
	}
	return r
}

// startNode starts mmmq node i, again as a supervisor would (up to 5
// tries, a second apart) when it exits at startup because JetStream did
// not answer in time: a node restarting while the cluster elects leaders.
func (r *clusterRun) startNode(i int) {
	conf := r.nodes[i]
	conf.MayDieStarting = true
	for try := 1; ; try++ {
		b := startBroker(r.t, conf)
		if b.alive() {
			r.procs[i] = b
			base := b.base
			r.bases[i].Store(&base)
			return
		}
		if try == 5 {
			r.t.Fatalf("mmmq node %d did not start in %d tries:\n%s", i, try, b.logTail())
		}
		r.t.Logf("mmmq node %d exited at startup (try %d), started again: %s", i, try, lastLine(b.logText()))
		time.Sleep(time.Second)
	}
}

// lastLine is the last non-empty line of s.
func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}

func (r *clusterRun) killNode(i int) {
	empty := ""
	r.bases[i].Store(&empty)
	r.procs[i].kill()
}

// produce publishes from p producers until stop is closed, alternating the
// mmmq nodes and the topics, and records every acknowledged message.
func (r *clusterRun) produce(p int, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				base := *r.bases[(w+n)%len(r.bases)].Load()
				if base == "" {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				topic := fmt.Sprintf("k.%d", (w+n)%clusterTopics)
				id := fmt.Sprintf("p%d-%d", w, n)
				content := []byte(fmt.Sprintf(`{"w":%d,"n":%d}`, w, n))
				sent := time.Now()
				res := publish(base, topic, id, content, "durable")
				if res.Ack {
					r.mu.Lock()
					r.acks = append(r.acks, clusterAck{topic: topic, id: id, content: content, offset: res.Offset, sent: sent, replied: time.Now()})
					r.mu.Unlock()
				} else {
					time.Sleep(10 * time.Millisecond) // a refused publish: the cluster is failing over
				}
			}
		}()
	}
	return &wg
}

// failoverAfter waits until every topic has had a publish sent after
// killed and acknowledged, at most clusterDown, and returns how long that
// took (clusterDown when some topic never came back).
func (r *clusterRun) failoverAfter(killed time.Time) time.Duration {
	for time.Since(killed) < clusterDown {
		back := map[string]time.Time{}
		r.mu.Lock()
		for _, a := range r.acks {
			if a.sent.After(killed) {
				if t, ok := back[a.topic]; !ok || a.replied.Before(t) {
					back[a.topic] = a.replied
				}
			}
		}
		r.mu.Unlock()
		if len(back) == clusterTopics {
			var worst time.Duration
			for _, t := range back {
				worst = max(worst, t.Sub(killed))
			}
			return worst
		}
		time.Sleep(50 * time.Millisecond)
	}
	return clusterDown
}

// round, under load: even rounds kill -9 NATS node round%NATS (down until
// every topic takes publishes again: the failover) and restart it, then
// kill -9 mmmq node round%2 and restart it; odd rounds freeze them
// instead (SIGSTOP, then SIGCONT): the NATS node past its peers' election
// timeout (cut off, as in a partition), the mmmq node past its lease (its
// work is taken over; when it wakes its late commits are refused and its
// late pushes carry the old epoch).
func (r *clusterRun) round(round int) {
	time.Sleep(300 * time.Millisecond)
	n, freeze := round%r.conf.NATS, round%2 == 1
	what := "killed"
	if freeze {
		what = "frozen"
	}
	lost := time.Now()
	if freeze {
		r.nats.Stop(n)
	} else {
		r.nats.Kill(n)
	}
	fo := r.failoverAfter(lost)
	if freeze {
		r.nats.Cont(n)
	} else {
		r.nats.Restart(n)
	}
	r.mu.Lock()
	r.failover = append(r.failover, fo)
	if fo > clusterFailover {
		r.report = append(r.report, fmt.Sprintf("round %d: publishes to some topic failed for %s after NATS node %d was %s (more than %s): unavailable",
			round, fo.Round(time.Millisecond), n, what, clusterFailover))
	}
	r.mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	m := round % len(r.procs)
	if freeze {
		p := r.procs[m].cmd.Process
		_ = p.Signal(syscall.SIGSTOP)
		time.Sleep(2*clusterLease + time.Second)
		_ = p.Signal(syscall.SIGCONT)
		return
	}
	r.killNode(m)
	time.Sleep(200 * time.Millisecond)
	r.startNode(m)
}

// run runs the rounds under load and checks everything; it returns what
// went wrong.
func (r *clusterRun) run() []string {
	stop := make(chan struct{})
	wg := r.produce(4, stop)
	for i := range r.conf.Rounds {
		r.round(i)
		r.t.Logf("round %d done: %d acknowledged so far, failover %s", i, r.ackCount(), r.failover[len(r.failover)-1].Round(time.Millisecond))
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	r.checkLog()
	r.checkDeliveries()
	r.checkGroupBusy()
	return r.report
}

func (r *clusterRun) ackCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.acks)
}

func (r *clusterRun) fail(format string, args ...any) {
	r.mu.Lock()
	r.report = append(r.report, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

// checkLog: every acknowledged message is in its topic's log, read through
// mmmq node 0, exactly once, at the offset it was acknowledged with, with
// the content sent (readAll checks that offsets are contiguous). Node 0
// learns of messages acknowledged through node 1 from its stream feed, a
// moment later: the log is read again until it reaches the last offset
// acknowledged on the topic, for at most clusterVisible (a node that stays
// behind longer fails the check). A read refused meanwhile (503: the
// cluster still electing after the last node loss) is tried again within
// the same bound; one still refused at its end fails the check.
func (r *clusterRun) checkLog() {
	base := *r.bases[0].Load()
	for tp := range clusterTopics {
		topic := fmt.Sprintf("k.%d", tp)
		lastAcked := int64(-1)
		for _, a := range r.acks {
			if a.topic == topic {
				lastAcked = max(lastAcked, a.offset)
			}
		}
		var log []stored
		var err error
		for deadline := time.Now().Add(clusterVisible); ; time.Sleep(200 * time.Millisecond) {
			log, err = readAll(base, topic)
			if err == nil && int64(len(log)) > lastAcked || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			r.fail("read %s: %v", topic, err)
			continue
		}
		seen := map[string]int{}
		for _, s := range log {
			seen[s.ID]++
		}
		for _, a := range r.acks {
			switch {
			case a.topic != topic:
			case a.offset < 0 || a.offset >= int64(len(log)):
				r.fail("%s: acknowledged %s at offset %d, the log holds %d messages", topic, a.id, a.offset, len(log))
			case log[a.offset].ID != a.id || !bytes.Equal(log[a.offset].Content, a.content):
				r.fail("%s offset %d: acknowledged %s %s, the log holds %s %s", topic, a.offset, a.id, a.content, log[a.offset].ID, log[a.offset].Content)
			case seen[a.id] != 1:
				r.fail("%s: acknowledged %s is in the log %d times", topic, a.id, seen[a.id])
			}
		}
	}
}

// checkDeliveries waits until every acknowledged message was delivered,
// then checks the order: under one lease epoch a topic's offsets never go
// back.
func (r *clusterRun) checkDeliveries() {
	want := map[string]map[int64]bool{}
	for _, a := range r.acks {
		if want[a.topic] == nil {
			want[a.topic] = map[int64]bool{}
		}
		want[a.topic][a.offset] = true
	}
	// Delivery goes on after the load stops: each push is followed by a
	// checkpoint commit to a replicated bucket, which a starved machine
	// (CI, the NATS servers logging read loops of 7 s) slows to a few per
	// second. So the wait lasts while pushes keep coming: it ends when
	// everything arrived, after clusterDeliverIdle without a new push (a
	// stall), or after clusterDeliverMax in all.
	var missing []string
	start, progress, seen := time.Now(), time.Now(), -1
	for ; ; time.Sleep(100 * time.Millisecond) {
		got := map[string]map[int64]bool{}
		r.cons.mu.Lock()
		for _, p := range r.cons.pushes {
			if got[p.topic] == nil {
				got[p.topic] = map[int64]bool{}
			}
			got[p.topic][p.offset] = true
		}
		if n := len(r.cons.pushes); n != seen {
			seen, progress = n, time.Now()
		}
		r.cons.mu.Unlock()
		missing = missing[:0]
		for topic, offs := range want {
			for o := range offs {
				if !got[topic][o] {
					missing = append(missing, fmt.Sprintf("%s@%d", topic, o))
				}
			}
		}
		if len(missing) == 0 || time.Since(progress) > clusterDeliverIdle || time.Since(start) > clusterDeliverMax {
			break
		}
	}
	if len(missing) > 0 {
		sort.Slice(missing, func(i, j int) bool { return pushOrder(missing[i], missing[j]) })
		why := fmt.Sprintf("no push for %s", clusterDeliverIdle)
		if time.Since(progress) <= clusterDeliverIdle {
			why = fmt.Sprintf("still delivering after %s", clusterDeliverMax)
		}
		r.fail("%d acknowledged messages never delivered (%s; %d pushes in all), e.g. %v", len(missing), why, seen, missing[:min(len(missing), 10)])
		r.explainUndelivered(missing[0][:strings.IndexByte(missing[0], '@')])
	}
	r.cons.mu.Lock()
	defer r.cons.mu.Unlock()
	for _, b := range r.cons.bad {
		r.fail("consumer: %s", b)
	}
	last, newest := map[string]map[uint64]int64{}, map[string]uint64{}
	for _, p := range r.cons.pushes {
		if p.epoch < newest[p.topic] {
			r.stale++ // from a node that lost its lease and has not noticed yet
		}
		newest[p.topic] = max(newest[p.topic], p.epoch)
		if last[p.topic] == nil {
			last[p.topic] = map[uint64]int64{}
		}
		if prev, ok := last[p.topic][p.epoch]; ok && p.offset < prev {
			r.fail("%s: under epoch %d offset %d was pushed after %d", p.topic, p.epoch, p.offset, prev)
		}
		last[p.topic][p.epoch] = p.offset
	}
}

// How long checkDeliveries waits: clusterDeliverIdle without a new push,
// clusterDeliverMax in all.
const (
	clusterDeliverIdle = 30 * time.Second
	clusterDeliverMax  = 3 * time.Minute
)

// pushOrder orders "topic@offset" names by topic, then by offset as a
// number (so that the first one listed is where a topic's delivery
// stopped).
func pushOrder(a, b string) bool {
	ta, oa, _ := strings.Cut(a, "@")
	tb, ob, _ := strings.Cut(b, "@")
	if ta != tb {
		return ta < tb
	}
	na, _ := strconv.ParseInt(oa, 10, 64)
	nb, _ := strconv.ParseInt(ob, 10, 64)
	return na < nb
}

// explainUndelivered logs what each mmmq node says of the dispatcher and
// topic of a message never delivered: the dispatcher's status and the
// lines of every log of that node's processes (this run's and the ones
// killed) that name the topic, the dispatcher's lease or its worker.
func (r *clusterRun) explainUndelivered(topic string) {
	for i, p := range r.procs {
		if b := r.bases[i].Load(); b != nil && *b != "" {
			body := "unreachable"
			if resp, err := http.Get(*b + "/mmmq/dispatchers/d"); err == nil {
				data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
				resp.Body.Close()
				body = string(data)
			}
			r.t.Logf("mmmq node %d: GET /mmmq/dispatchers/d: %s", i, body)
		}
		logs, _ := filepath.Glob(filepath.Join(filepath.Dir(p.logPath), "mmmq-*.log"))
		for _, path := range logs {
			data, _ := os.ReadFile(path)
			var lines []string
			for _, line := range strings.Split(string(data), "\n") {
				if strings.Contains(line, `"`+topic+`"`) || strings.Contains(line, "lease") || strings.Contains(line, "worker") {
					lines = append(lines, line)
				}
			}
			if len(lines) > 60 {
				lines = append(lines[:20:20], append([]string{fmt.Sprintf("... %d lines ...", len(lines)-60)}, lines[len(lines)-40:]...)...)
			}
			r.t.Logf("mmmq node %d, %s, lines about %s, its lease or a worker:\n%s", i, filepath.Base(path), topic, strings.Join(lines, "\n"))
		}
	}
}

// checkGroupBusy: a consumer group held through mmmq node 0 is busy
// through node 1.
func (r *clusterRun) checkGroupBusy() {
	fetch := func(base, session string) (int, string, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/topics/k.0/groups/cg/fetch?max=1", nil)
		if session != "" {
			req.Header.Set("mmmq-session", session)
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			return 0, err.Error(), ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header.Get("mmmq-session")
	}
	st, body, session := fetch(*r.bases[0].Load(), "")
	if st != http.StatusOK || session == "" {
		r.fail("group session through node 0: %d %s", st, body)
		return
	}
	if st, body, _ := fetch(*r.bases[1].Load(), ""); st != http.StatusConflict || !strings.Contains(body, "GROUP_BUSY") {
		r.fail("group held through node 0, fetch through node 1: %d %s, want 409 GROUP_BUSY", st, body)
	}
}

// clusterVisible bounds how long a message acknowledged through one mmmq
// node may take to become visible through the other (its high watermark
// follows the stream's ordered consumer, and after a consumer error the
// stream's state every 2 s).
const clusterVisible = 15 * time.Second

func clusterRounds() int {
	if os.Getenv("MMMQ_LONG") != "" {
		return 20
	}
	return 2
}

// TestClusterNodeLoss: 3 NATS nodes (replicas 3) and 2 mmmq nodes; every
// round kills a NATS node, then an mmmq node, under load. Nothing
// acknowledged is lost, altered or duplicated; everything is delivered, in
// order per lease epoch; failover stays within clusterFailover; a group is
// busy across nodes.
func TestClusterNodeLoss(t *testing.T) {
	r := startClusterRun(t, clusterConf{NATS: 3, Replicas: 3, Rounds: clusterRounds()})
	report := r.run()
	fo := append([]time.Duration(nil), r.failover...)
	sort.Slice(fo, func(i, j int) bool { return fo[i] < fo[j] })
	over := 0
	for _, d := range fo {
		if d > 10*time.Second {
			over++
		}
	}
	t.Logf("%d rounds, %d messages acknowledged, %d pushes (%d from a stale lease holder); failover p50 %s, max %s, %d of %d rounds over the 10 s goal",
		r.conf.Rounds, len(r.acks), len(r.cons.pushes), r.stale, fo[len(fo)/2].Round(time.Millisecond), fo[len(fo)-1].Round(time.Millisecond), over, len(fo))
	for _, line := range report {
		t.Error(line)
	}
}

// TestClusterNegativeControlOneReplica: with replicas 1 on a single NATS
// node, killing that node leaves nothing to fail over to: the harness must
// report the topics unavailable past clusterFailover (the checks can fail).
func TestClusterNegativeControlOneReplica(t *testing.T) {
	r := startClusterRun(t, clusterConf{NATS: 1, Replicas: 1, Rounds: 1})
	report := r.run()
	for _, line := range report {
		if strings.Contains(line, "unavailable") {
			t.Logf("reported as expected: %s", line)
			return
		}
	}
	t.Fatalf("the harness did not report the loss of the only replica; report: %q", report)
}
